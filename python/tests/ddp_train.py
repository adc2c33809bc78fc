"""Trains a small model with DistributedDataParallel over NCCL, one process per GPU (torchrun).

    torchrun --nproc_per_node=2 python/tests/ddp_train.py strata|torch

Each rank prints one line, RESULT {"rank", "losses", "peak_reserved"}: the losses of 20 steps and
the peak reserved bytes of its device, from strata's statistics (mode strata: strata is each
rank's allocator) or PyTorch's (mode torch). Used by test_torch_gpu.py.
"""

import json
import os
import sys

mode = sys.argv[1]
if mode == "strata":
    import strata.torch

    strata.torch.enable()  # before the first CUDA allocation of this rank

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 512)).cuda()
ddp = DistributedDataParallel(model, device_ids=[rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
g = torch.Generator(device="cuda").manual_seed(100 + rank)
losses = []
for _ in range(20):
    x = torch.randn(256, 512, device="cuda", generator=g)
    loss = ddp(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(round(loss.item(), 5))
torch.cuda.synchronize()
stats = strata.torch.memory_stats(rank) if mode == "strata" else torch.cuda.memory_stats(rank)
print("RESULT", json.dumps({"rank": rank, "losses": losses,
                            "peak_reserved": stats["reserved_bytes.all.peak"]}), flush=True)
dist.destroy_process_group()
