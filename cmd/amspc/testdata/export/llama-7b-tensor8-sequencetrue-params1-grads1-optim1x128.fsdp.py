# llama_7b: plan ZeRO-2 (1x1/8x128/8x128) on 1024 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# Parameters stay gathered from forward to backward (ZeRO-2 within a step;
# FSDP2 still shards them between steps).
mesh = init_device_mesh("cuda", (1024,))
for block in model.layers:
    fully_shard(block, mesh=mesh, reshard_after_forward=False)
fully_shard(model, mesh=mesh, reshard_after_forward=False)

# stderr:
../../testdata/models/llama-7b.amsp: fsdp cannot run plan shard tp8+sp 1x1/1x1/1x128 (1x1/1x1/1x128): tensor parallelism (tp8): this FSDP2 snippet has none (--export megatron or torchtitan run it).
  exporting ZeRO-2 (1x1/8x128/8x128), the fastest plan of the table that fsdp runs: step 1.20 s, 33.2 GiB per GPU, against 2.30 s and 9.339 GiB for shard tp8+sp 1x1/1x1/1x128 (simulated)
