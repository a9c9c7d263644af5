# tiny: plan shard ddp (1x1/1x1/1x1) on 8 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

mesh = init_device_mesh("cuda", (8,))
model = DDP(model, device_mesh=mesh)
