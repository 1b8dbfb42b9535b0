"""One rank of test_torch_shrink.py: DDP training over init_process_group("pycoll") until the test kills a rank
(kill -9); the survivors catch the error, learn who is gone (an agreement on the group's communicator), shrink
the default group with pycoll.torch.shrink_group, build DDP again on it and train AFTER more steps. Prints
{"ready": true} after its first steps, then one JSON line: the losses on a held-out batch (at the start, when
the error was caught, at the end), the new group, and the final parameters."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import pycoll.torch

BATCH = 48
TEACHER = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(12, 1)


def make_model():
    """A deep linear model of a linear teacher: its loss keeps falling for hundreds of steps at this rate, so
    a rise after the shrink would show (a model that plateaus could hide one)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)).double()


def batch(step):
    x = torch.randn(BATCH, 12, generator=torch.Generator().manual_seed(100 + step), dtype=torch.float64)
    return x, x @ TEACHER


AFTER = 10  # steps trained on the shrunk group before reporting
READY_AT = 2  # steps trained before telling the test it may kill
TIMEOUT = float(os.environ.get("TEST_TIMEOUT", "30"))

dist.init_process_group("pycoll", timeout=timedelta(seconds=TIMEOUT))
deadline = time.monotonic() + 3 * TIMEOUT  # the kill must come, and the training end, by then
model = make_model()
held_out = batch(10_000)


def held_out_loss():
    with torch.no_grad():
        return float(((model(held_out[0]) - held_out[1]) ** 2).mean())


ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.002)
opt = torch.optim.SGD(model.parameters(), lr=0.003)
report = {"rank": dist.get_rank(), "first_loss": held_out_loss()}
step, after = 0, None
while after is None or after < AFTER:
    if time.monotonic() > deadline:
        raise TimeoutError(f"no rank was lost, or training did not end, within {3 * TIMEOUT:g} s")
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = batch(step)
    rows = slice(rank * (BATCH // size), (rank + 1) * (BATCH // size))
    try:
        loss = ((ddp(x[rows]) - y[rows]) ** 2).mean()
        loss.backward()
    except RuntimeError as exc:  # DDP raises what the group's all-reduce failed with, as text
        if "caught" in report:
            raise  # a second failure: this test kills one rank
        report.update(caught=str(exc)[:200], loss_at_failure=held_out_loss(), steps_before=step)
        world = dist.group.WORLD
        world.comm.agree(1)  # every survivor takes part; it finds who is gone
        lost = world.comm.failed_ranks
        new = pycoll.torch.shrink_group(lost)
        del ddp
        opt.zero_grad()
        # DDP's construction broadcasts the parameters of the new rank 0, so the survivors start equal even
        # where one of them had applied the step the others failed; its step count goes with them.
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.002)
        agreed = torch.tensor([step])
        dist.broadcast(agreed, 0)
        step, after = int(agreed), 0
        report.update(lost=lost, new_rank=dist.get_rank(), new_size=dist.get_world_size(),
                      members=dist.get_process_group_ranks(new), default_is_new=dist.group.WORLD is new)
        continue
    opt.step()
    opt.zero_grad()
    step += 1
    if after is not None:
        after += 1
    if step == READY_AT and "ready" not in report:
        report["ready"] = True
        print('{"ready": true}', flush=True)
report.update(last_loss=held_out_loss(), steps=step,
              params=[p.detach().reshape(-1).tolist() for p in model.parameters()], ok=True)
dist.destroy_process_group()
sys.stdout.write(json.dumps(report) + "\n")
