# llama_7b: plan shard zero2 (1x1/8x128/8x128) on 1024 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# Parameters stay gathered from forward to backward (ZeRO-2 within a step;
# FSDP2 still shards them between steps).
mesh = init_device_mesh("cuda", (1024,))
for block in model.layers:
    fully_shard(block, mesh=mesh, reshard_after_forward=False)
fully_shard(model, mesh=mesh, reshard_after_forward=False)
