# tiny: plan DDP (1x1/1x1/1x1) on 8 GPUs, exported by amspc plan --export fsdp
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

mesh = init_device_mesh("cuda", (8,))
model = DDP(model, device_mesh=mesh)

# stderr:
../../testdata/models/tiny.amsp: fsdp cannot run plan shard 2x1/2x1/4x2 (2x1/2x1/4x2): s_p 2x1, s_g 2x1, s_os 4x2: FSDP shards parameters, gradients and optimizer states over one mesh dimension together.
  exporting DDP (1x1/1x1/1x1), the fastest plan of the table that fsdp runs: step 8.84 ms, 4.015 MiB per GPU, against 9.15 ms and 3.255 MiB for shard 2x1/2x1/4x2 (the analytic model for both)
