# llama_7b: plan shard ddp (1x1/1x1/1x1) on 1024 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

mesh = init_device_mesh("cuda", (1024,))
model = DDP(model, device_mesh=mesh)

# stderr:
../../testdata/models/llama-7b.amsp: plan shard ddp does not fit: needs 122.1 GiB > 80.0 GiB
