"""One rank of the torch backend collectives test, started by torchrun: the collectives FSDP uses
(reduce_scatter_single and all_gather_single -- reduce_scatter_tensor and all_gather_into_tensor before torch
2.13 -- and their coalesced forms) and the list forms, blocking and with
async_op=True, all-to-all, gather, scatter and point to point, on integer-valued float tensors so every result is
exact (the rest of what gloo has: tests/scripts/torch_c10d_worker.py). Prints one JSON line of check names that
failed (none)."""

import json
import sys

import torch
import torch.distributed as dist

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

# torch 2.13 names them *_single; earlier versions only have the older names (deprecated in 2.13).
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
dist.init_process_group("pycoll")
rank, size = dist.get_rank(), dist.get_world_size()
failed = []


def check(name, got, want):
    if not torch.equal(got, want):
        failed.append(f"{name}: got {got.tolist()}, want {want.tolist()}")


def contribution(r, n=6):
    """What rank r contributes: integer-valued, different on every rank and at every position."""
    return torch.arange(size * n, dtype=torch.float32) * (r + 1) + 10 * r


block = 6
whole_sum = sum(contribution(r) for r in range(size))
for async_op in (False, True):
    tag = "async" if async_op else "blocking"
    # FSDP's gradient reduction: every rank gets the sum (and the average) of its block only.
    out = torch.empty(block)
    work = reduce_scatter_single(out, contribution(rank), async_op=async_op)
    if async_op:
        work.wait()
    check(f"reduce_scatter_single {tag}", out, whole_sum[rank * block:(rank + 1) * block])
    avg = torch.empty(block)
    reduce_scatter_single(avg, contribution(rank), op=dist.ReduceOp.AVG)
    check("reduce_scatter_single avg", avg, whole_sum[rank * block:(rank + 1) * block] / size)
    # FSDP's parameter gather: every rank's shard, in rank order.
    gathered = torch.empty(size * block)
    work = all_gather_single(gathered, contribution(rank)[:block], async_op=async_op)
    if async_op:
        work.wait()
    check(f"all_gather_single {tag}", gathered, torch.cat([contribution(r)[:block] for r in range(size)]))
    # The list forms.
    outs = [torch.empty(3) for _ in range(size)]
    work = dist.all_gather(outs, torch.full((3,), rank + 1.0), async_op=async_op)
    if async_op:
        work.wait()
    check(f"all_gather {tag}", torch.stack(outs), torch.arange(1.0, size + 1).repeat_interleave(3).view(size, 3))
    out = torch.empty(block)
    work = dist.reduce_scatter(out, list(contribution(rank).split(block)), async_op=async_op)
    if async_op:
        work.wait()
    check(f"reduce_scatter {tag}", out, whole_sum[rank * block:(rank + 1) * block])
    t = contribution(rank)
    work = dist.reduce(t, dst=size - 1, async_op=async_op)
    if async_op:
        work.wait()
    if rank == size - 1:
        check(f"reduce {tag}", t, whole_sum)

# Coalesced, as FSDP and DDP issue them: several collectives, one Work.
outs, grads = [torch.empty(block), torch.empty(2)], [contribution(rank), torch.arange(2.0 * size) + rank]
with dist._coalescing_manager(async_ops=True) as cm:
    for out, g in zip(outs, grads):
        reduce_scatter_single(out, g)
cm.wait()
check("reduce_scatter_single coalesced", torch.cat(outs), torch.cat(
    [whole_sum[rank * block:(rank + 1) * block],
     sum(torch.arange(2.0 * size) + r for r in range(size))[rank * 2:rank * 2 + 2]]))
gathered = [torch.empty(size * 2), torch.empty(size)]
with dist._coalescing_manager(async_ops=True) as cm:
    all_gather_single(gathered[0], torch.tensor([rank, -rank], dtype=torch.float32))
    all_gather_single(gathered[1], torch.tensor([rank * 5.0]))
cm.wait()
check("all_gather_single coalesced", torch.cat(gathered), torch.cat(
    [torch.tensor([[r, -r] for r in range(size)], dtype=torch.float32).view(-1), torch.arange(size) * 5.0]))
ts = [torch.full((4,), rank + 1.0), torch.full((2,), 2.0 * rank)]
dist.all_reduce_coalesced(ts)
check("all_reduce_coalesced", torch.cat(ts), torch.cat([torch.full((4,), size * (size + 1) / 2),
                                                        torch.full((2,), float(size * (size - 1)))]))
# All-to-all (MoE's token exchange), rooted collectives and point to point (pipeline stages).
for async_op in (False, True):
    tag = "async" if async_op else "blocking"
    out = torch.empty(size * 3)
    work = dist.all_to_all_single(out, contribution(rank, 3)[:size * 3], async_op=async_op)
    if async_op:
        work.wait()
    check(f"all_to_all_single {tag}", out, torch.cat([contribution(r, 3)[rank * 3:(rank + 1) * 3]
                                                      for r in range(size)]))
    outs = [torch.empty(2, 2) for _ in range(size)]
    work = dist.all_to_all(outs, [torch.full((2, 2), 100.0 * rank + r) for r in range(size)], async_op=async_op)
    if async_op:
        work.wait()
    check(f"all_to_all {tag}", torch.stack(outs), torch.stack([torch.full((2, 2), 100.0 * r + rank)
                                                               for r in range(size)]))
    root = size - 1
    gathered = [torch.empty(4) for _ in range(size)] if rank == root else None
    work = dist.gather(torch.full((4,), rank * 2.0), gathered, dst=root, async_op=async_op)
    if async_op:
        work.wait()
    if rank == root:
        check(f"gather {tag}", torch.stack(gathered), torch.arange(size).repeat_interleave(4).view(size, 4) * 2.0)
    got = torch.empty(5)
    work = dist.scatter(got, [torch.full((5,), 7.0 * r) for r in range(size)] if rank == 0 else None, src=0,
                        async_op=async_op)
    if async_op:
        work.wait()
    check(f"scatter {tag}", got, torch.full((5,), 7.0 * rank))
# A ring of sends and receives: irecv, then isend, as a pipeline stage posts them.
nxt, prv = (rank + 1) % size, (rank - 1) % size
got = torch.empty(8)
works = [dist.irecv(got, src=prv, tag=3), dist.isend(torch.full((8,), rank + 0.5), dst=nxt, tag=3)]
for w in works:
    w.wait()
check("isend/irecv ring", got, torch.full((8,), prv + 0.5))
if rank == 0:
    dist.send(torch.arange(3.0), dst=1)
elif rank == 1:
    got = torch.empty(3)
    dist.recv(got, src=0)
    check("send/recv", got, torch.arange(3.0))
dist.barrier()
dist.destroy_process_group()
sys.stdout.write(json.dumps({"rank": rank, "failed": failed}) + "\n")
