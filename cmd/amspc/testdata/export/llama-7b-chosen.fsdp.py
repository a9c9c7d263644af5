# llama_7b: plan MiCS(8) (8x1/8x1/8x1) on 1024 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# HSDP: sharded within groups of 8 GPUs, replicated across the 128 groups.
mesh = init_device_mesh("cuda", (128, 8), mesh_dim_names=("replicate", "shard"))
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)

# stderr:
../../testdata/models/llama-7b.amsp: fsdp cannot run plan AMSP 1x1/1x1/8x8 (1x1/1x1/8x8): optimizer states sharded (s_os 8x8) with parameters and gradients replicated: FSDP shards all three together (ZeRO-1 has no FSDP form).
  exporting MiCS(8) (8x1/8x1/8x1), the fastest plan of the table that fsdp runs: step 1.12 s, 35.85 GiB per GPU, against 1.12 s and 47.92 GiB for AMSP 1x1/1x1/8x8 (the analytic model for both)
