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
../../testdata/models/llama-7b.amsp: fsdp cannot run plan shard tp4+sp 2x128/2x128/2x128 (2x128/2x128/2x128): tensor parallelism (tp4): this FSDP2 snippet has none (--export megatron or torchtitan run it).
  exporting ZeRO-2 (1x1/8x128/8x128), the fastest plan of the table that fsdp runs: step 1.20 s, 33.2 GiB per GPU, against 2.24 s and 7.75 GiB for shard tp4+sp 2x128/2x128/2x128 (simulated)
