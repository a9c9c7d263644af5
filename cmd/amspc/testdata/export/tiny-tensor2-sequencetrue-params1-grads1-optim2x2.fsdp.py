# tiny: plan MiCS(4) (4x1/4x1/4x1) on 8 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# HSDP: sharded within groups of 4 GPUs, replicated across the 2 groups.
mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("replicate", "shard"))
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)

# stderr:
../../testdata/models/tiny.amsp: fsdp cannot run plan shard tp2+sp 1x1/1x1/2x2 (1x1/1x1/2x2): tensor parallelism (tp2): this FSDP2 snippet has none (--export megatron or torchtitan run it).
  exporting MiCS(4) (4x1/4x1/4x1), the fastest plan of the table that fsdp runs: step 10.6 ms, 2.533 MiB per GPU, against 13.3 ms and 1.767 MiB for shard tp2+sp 1x1/1x1/2x2 (simulated)
