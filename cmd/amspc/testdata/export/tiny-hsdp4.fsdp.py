# tiny: plan shard hsdp(4) (4x1/4x1/4x1) on 8 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# HSDP: sharded within groups of 4 GPUs, replicated across the 2 groups.
mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("replicate", "shard"))
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
