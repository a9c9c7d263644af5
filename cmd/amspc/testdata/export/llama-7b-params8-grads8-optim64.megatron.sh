# llama_7b: plan ZeRO-1 (1x1/1x1/8x128, recompute none) on 128 x 8 GPUs, exported by amspc plan --export megatron
# torchrun --nnodes 128 --nproc-per-node 8 pretrain_gpt.py $ARGS, with ARGS:
# (data and tokenizer arguments are yours: --data-path, --tokenizer-type, ...)
--tensor-model-parallel-size 1 \
--pipeline-model-parallel-size 1 \
--use-distributed-optimizer \
--overlap-grad-reduce \
--overlap-param-gather \
--num-layers 32 \
--hidden-size 4096 \
--ffn-hidden-size 11008 \
--num-attention-heads 32 \
--seq-length 4096 \
--max-position-embeddings 4096 \
--vocab-size 32000 \
--position-embedding-type rope \
--rotary-base 10000 \
--normalization RMSNorm \
--norm-epsilon 1e-06 \
--swiglu \
--untie-embeddings-and-output-weights \
--disable-bias-linear \
--attention-dropout 0 \
--hidden-dropout 0 \
--use-flash-attn \
--micro-batch-size 1 \
--global-batch-size 1024 \
--bf16 \
--optimizer adam \
--lr 0.0003 \
--adam-beta1 0.9 \
--adam-beta2 0.95 \
--adam-eps 1e-08 \
--weight-decay 0.1 \
--train-iters 1

# stderr:
../../testdata/models/llama-7b.amsp: megatron cannot run plan shard 8x1/8x1/8x8 (8x1/8x1/8x8): s_p 8x1, s_g 8x1: Megatron-LM keeps parameters and gradients whole on every data-parallel rank (its distributed optimizer shards only optimizer states).
  exporting ZeRO-1 (1x1/1x1/8x128), the fastest plan of the table that megatron runs: step 1.13 s, 46.82 GiB per GPU, against 1.12 s and 27.62 GiB for shard 8x1/8x1/8x8 (the analytic model for both)
