# llama_7b: plan shard mics(8) (8x1/8x1/8x1) on 1024 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# HSDP: sharded within groups of 8 GPUs, replicated across the 128 groups.
mesh = init_device_mesh("cuda", (128, 8), mesh_dim_names=("replicate", "shard"))
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
