# tiny: plan DDP (1x1/1x1/1x1) on 8 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

mesh = init_device_mesh("cuda", (8,))
model = DDP(model, device_mesh=mesh)

# stderr:
../../testdata/models/tiny.amsp: fsdp cannot run plan shard zero1 (1x1/1x1/4x2): optimizer states sharded (s_os 4x2) with parameters and gradients replicated: FSDP shards all three together (ZeRO-1 has no FSDP form).
  exporting DDP (1x1/1x1/1x1), the fastest plan of the table that fsdp runs: step 8.84 ms, 4.015 MiB per GPU, against 8.86 ms and 3.134 MiB for shard zero1 (the analytic model for both)
