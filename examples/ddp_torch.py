"""PyTorch's own DistributedDataParallel over pycoll: `import pycoll.torch` registers the "pycoll" backend, and
init_process_group("pycoll") is all that changes from a gloo or NCCL script. Every rank trains on its share of
the batch; DDP averages the gradients in buckets that start all-reducing while backward is still running.

    pip install "pycoll-collectives[torch]"
    torchrun --nproc-per-node 4 examples/ddp_torch.py   # or: pycoll run -n 4 examples/ddp_torch.py
    python examples/ddp_torch.py                        # one process on the whole batch: the same weights

Averaging the ranks' mean gradients over equal shares is the mean gradient of the whole batch, so every world
size trains the same model up to rounding (tests/integrations/test_examples.py checks it against one process).
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

BATCH, STEPS, LEARNING_RATE = 96, 30, 0.05


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()


def batch(step):
    """The whole batch of a step: the same on every rank (each then takes its share)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, 8, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def main():
    if "RANK" in os.environ:  # torchrun or pycoll run
        dist.init_process_group("pycoll")
    else:  # one process: a group of one, meeting through an in-process store
        dist.init_process_group("pycoll", store=dist.HashStore(), rank=0, world_size=1)
    rank, size = dist.get_rank(), dist.get_world_size()
    if BATCH % size:
        raise SystemExit(f"the batch of {BATCH} must split evenly over {size} ranks")
    model = make_model()
    # Small buckets so this small model still has several, overlapping with backward as a large model's do.
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE)
    share = BATCH // size
    for step in range(STEPS):
        x, y = batch(step)
        rows = slice(rank * share, (rank + 1) * share)
        loss = torch.nn.functional.mse_loss(ddp(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()  # DDP all-reduces (averages) the gradients here, bucket by bucket
        opt.step()
    x, y = batch(STEPS)
    with torch.no_grad():
        final_loss = torch.nn.functional.mse_loss(model(x), y).item()
    if "--json" in sys.argv:
        print(json.dumps({"rank": rank, "loss": final_loss,
                          "params": [p.detach().reshape(-1).tolist() for p in model.parameters()]}))
    elif rank == 0:
        print(f"{size} rank(s), {STEPS} steps: loss {final_loss:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
