# tiny: plan DDP (1x1/1x1/1x1, recompute none) on 2 x 4 GPUs, exported by amspc plan --export megatron
# torchrun --nnodes 2 --nproc-per-node 4 pretrain_gpt.py $ARGS, with ARGS:
# (data and tokenizer arguments are yours: --data-path, --tokenizer-type, ...)
--tensor-model-parallel-size 1 \
--pipeline-model-parallel-size 1 \
--overlap-grad-reduce \
--num-layers 2 \
--hidden-size 64 \
--ffn-hidden-size 172 \
--num-attention-heads 4 \
--seq-length 64 \
--max-position-embeddings 64 \
--vocab-size 256 \
--position-embedding-type rope \
--rotary-base 10000 \
--normalization RMSNorm \
--norm-epsilon 1e-05 \
--swiglu \
--untie-embeddings-and-output-weights \
--disable-bias-linear \
--attention-dropout 0 \
--hidden-dropout 0 \
--use-flash-attn \
--micro-batch-size 2 \
--global-batch-size 32 \
--optimizer adam \
--lr 0.001 \
--adam-beta1 0.9 \
--adam-beta2 0.95 \
--adam-eps 1e-08 \
--weight-decay 0.1 \
--train-iters 50

# stderr:
../../testdata/models/tiny.amsp: megatron cannot run plan shard zeropp(4) (4x2+4x1/4x2/4x2): a secondary parameter shard (ZeRO++ hpZ) has no Megatron-LM form.
  exporting DDP (1x1/1x1/1x1), the fastest plan of the table that megatron runs: step 8.84 ms, 4.015 MiB per GPU, against 10.3 ms and 2.795 MiB for shard zeropp(4) (the analytic model for both)
