"""One rank of the torch backend test, started by torchrun: PyTorch's own DistributedDataParallel over
init_process_group("pycoll"), with small buckets (several all-reduces per step) and a no_sync() accumulation
step. Prints one JSON line with the final parameters. The model and data come from ddp_model.py, which the
test also uses for the single-process reference."""

import json
import sys

import torch
import torch.distributed as dist
from ddp_model import BATCH, STEPS, batch, make_model, train_step

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

dist.init_process_group("pycoll")
rank, size = dist.get_rank(), dist.get_world_size()
model = make_model()
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.002)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
share = BATCH // size
for step in range(STEPS):
    x, y = batch(step)
    rows = slice(rank * share, (rank + 1) * share)
    train_step(ddp, opt, x[rows], y[rows], accumulate=step % 3 == 1)
backend = dist.get_backend()
pair = dist.new_group([0, 1])  # a second pycoll communicator, meeting through torch's prefixed store
t = torch.tensor([rank + 1.0])
if rank < 2:
    dist.all_reduce(t, group=pair)
dist.destroy_process_group()
sys.stdout.write(json.dumps({"rank": rank, "backend": backend, "pair_sum": t.item(),
                             "params": [p.detach().reshape(-1).tolist() for p in model.parameters()]}) + "\n")
