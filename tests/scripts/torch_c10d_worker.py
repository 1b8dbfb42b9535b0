"""One rank of the torch c10d tests (2 ranks, started by multiproc.Ranks). Scenario "c10d": the group is a
named c10d group (new_group + destroy_process_group of it, init_device_mesh, functional collectives), DTensor
and FSDP2 give the numbers of one process, and the ops gloo has beyond the basics are exact: uneven
all_to_all (list form and single), all_gather_coalesced, recv from any source, bool and non-contiguous
tensors; arguments the ranks disagree on fail every rank. Scenario "file": init_method="file://..." with no
MASTER_ADDR. Prints one JSON line: the names of the checks that failed (none) and what was raised."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend
from pycoll.errors import MismatchError

failed = []


def check(name, got, want):
    if not (isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype and
            torch.equal(got, want)):
        failed.append(f"{name}: got {got!r}, want {want!r}")


def raises(name, call, kind, text=""):
    start = time.monotonic()
    try:
        call()
    except kind as exc:
        if text not in str(exc):
            failed.append(f"{name}: {type(exc).__name__} without {text!r}: {exc}")
        return time.monotonic() - start
    except Exception as exc:  # noqa: BLE001 -- reported
        failed.append(f"{name}: {type(exc).__name__} instead of {kind.__name__}: {exc}")
        return None
    failed.append(f"{name}: returned instead of raising {kind.__name__}")
    return None


def named_groups_mesh_and_functional(rank, size):
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.group.WORLD.group_name:
        failed.append("the default group has no name")
    sub = dist.new_group(list(range(size)))
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, group=sub)
    check("subgroup all_reduce", t, torch.tensor([size * (size + 1) / 2]))
    dist.destroy_process_group(sub)
    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("dp",))
    got = funcol.all_reduce(torch.full((3,), rank + 1.0), "sum", mesh).wait()
    check("functional all_reduce over a DeviceMesh", got, torch.full((3,), size * (size + 1) / 2))
    got = funcol.all_gather_tensor(torch.full((2,), float(rank)), 0, mesh).wait()
    check("functional all_gather", got, torch.arange(size, dtype=torch.float32).repeat_interleave(2))
    raises("an op pycoll lacks", lambda: dist.group.WORLD.monitored_barrier(), NotImplementedError, "monitored")
    return mesh


def dtensor_and_fsdp2(rank, size, mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    whole = torch.arange(24.0).view(6, 4)
    sharded = distribute_tensor(whole, mesh, [Shard(0)])
    check("DTensor shard", sharded.to_local(), whole.chunk(size)[rank])
    check("DTensor redistribute to Replicate", sharded.redistribute(mesh, [Replicate()]).to_local(), whole)
    weight = distribute_tensor(torch.arange(8.0).view(4, 2), mesh, [Replicate()])
    check("DTensor matmul", (sharded @ weight).full_tensor(), whole @ torch.arange(8.0).view(4, 2))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).double()

    x = torch.linspace(-1, 1, 8 * 4, dtype=torch.float64).view(8, 4)
    y = torch.linspace(0, 1, 8 * 2, dtype=torch.float64).view(8, 2)
    reference = model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    sharded_model = model()
    for layer in (sharded_model[0], sharded_model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(sharded_model, mesh=mesh)
    opt = torch.optim.SGD(sharded_model.parameters(), lr=0.1)
    rows = slice(rank * 8 // size, (rank + 1) * 8 // size)
    for _ in range(3):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(sharded_model(x[rows]), y[rows]).backward()  # FSDP2 averages the grads
        opt.step()
    for (name, p), q in zip(sharded_model.named_parameters(), reference.parameters()):
        if not torch.allclose(p.full_tensor(), q.detach(), rtol=1e-10, atol=1e-12):
            failed.append(f"FSDP2 {name}: {p.full_tensor().tolist()} != {q.tolist()}")


def the_ops_gloo_has(rank, size):
    # all_to_all with blocks of different sizes: rank r sends r + j + 1 elements to rank j.
    send = [torch.full((rank + j + 1,), 10.0 * rank + j) for j in range(size)]
    recv = [torch.empty(j + rank + 1) for j in range(size)]
    dist.all_to_all(recv, send)
    for j in range(size):
        check(f"uneven all_to_all block from {j}", recv[j], torch.full((j + rank + 1,), 10.0 * j + rank))
    # all_to_all_single with split sizes: rank r sends (r + j + 1) rows of 2 to rank j.
    in_splits = [rank + j + 1 for j in range(size)]
    out_splits = [j + rank + 1 for j in range(size)]
    x = torch.cat([torch.full((s, 2), 100.0 * rank + j) for j, s in enumerate(in_splits)])
    out = torch.empty(sum(out_splits), 2)
    work = dist.all_to_all_single(out, x, out_splits, in_splits, async_op=True)
    work.wait()
    check("uneven all_to_all_single", out, torch.cat([torch.full((s, 2), 100.0 * j + rank)
                                                      for j, s in enumerate(out_splits)]))
    # all_gather_coalesced: two tensors of different shapes at once.
    outs = [[torch.empty(2, 2), torch.empty(3, dtype=torch.float32)] for _ in range(size)]
    dist.all_gather_coalesced(outs, [torch.full((2, 2), float(rank)), torch.arange(3.0) + rank])
    for r in range(size):
        check(f"all_gather_coalesced from {r}", torch.cat([outs[r][0].view(-1), outs[r][1]]),
              torch.cat([torch.full((4,), float(r)), torch.arange(3.0) + r]))
    # Bool tensors: reductions are logical.
    flags = torch.tensor([rank == 0, True, False, rank == 1])
    dist.all_reduce(flags)
    check("bool all_reduce (or)", flags, torch.tensor([True, True, False, True]))
    flags = torch.tensor([rank == 0, True, False])
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    check("bool all_reduce min (and)", flags, torch.tensor([False, True, False]))
    bools = [torch.empty(2, dtype=torch.bool) for _ in range(size)]
    dist.all_gather(bools, torch.tensor([rank == 0, rank == 1]))
    check("bool all_gather", torch.stack(bools), torch.eye(size, 2, dtype=torch.bool))
    # Non-contiguous tensors: copied in and the result copied back, in place.
    t = (torch.arange(12.0).view(3, 4) * (rank + 1)).t()
    dist.all_reduce(t)
    check("non-contiguous all_reduce", t, (torch.arange(12.0).view(3, 4) * sum(range(1, size + 1))).t())
    base = torch.zeros(4, 6)
    b = base[:, ::2]
    if rank == 0:
        b.copy_(torch.arange(12.0).view(4, 3))
    dist.broadcast(b, 0)
    check("non-contiguous broadcast", base[:, ::2], torch.arange(12.0).view(4, 3))
    check("non-contiguous broadcast leaves the gaps", base[:, 1::2], torch.zeros(4, 3))
    outs = [torch.zeros(4, 2).t() for _ in range(size)]
    dist.all_gather(outs, torch.arange(8.0).view(2, 4) + rank)
    check("non-contiguous all_gather", torch.stack(outs), torch.stack([torch.arange(8.0).view(2, 4) + r
                                                                        for r in range(size)]))
    # A receive from any source, then one naming it: the sender is reported, order kept.
    if rank == 1:
        dist.send(torch.full((3,), 7.0), dst=0)
        dist.send(torch.full((3,), 8.0), dst=0)
    elif rank == 0:
        got = torch.empty(3)
        src = dist.recv(got)
        if src != 1:
            failed.append(f"recv from any source reported rank {src}")
        check("recv from any source", got, torch.full((3,), 7.0))
        dist.recv(got, src=1)
        check("recv after a receive from any source", got, torch.full((3,), 8.0))
    # The ranks disagree on an uneven all_to_all_single's counts: every rank raises, none waits.
    took = raises("all_to_all_single with counts that do not pair up",
                  lambda: dist.all_to_all_single(torch.empty(size + rank), torch.ones(size + 1),
                                                 [1] * (size - 1) + [1 + rank], [1] * (size - 1) + [2]),
                  MismatchError, "bytes")
    if took is not None and took > 10:
        failed.append(f"the mismatch took {took:.1f} s")
    # One rank's split sizes cannot be served: it raises ValueError, the others MismatchError.
    if rank == 0:
        raises("bad split sizes here", lambda: dist.all_to_all_single(
            torch.empty(size), torch.ones(size), [1] * size, [5] * size), ValueError, "input_split_sizes")
    else:
        raises("bad split sizes on rank 0", lambda: dist.all_to_all_single(
            torch.empty(size), torch.ones(size), [1] * size, [1] * size), MismatchError, "rank 0")
    # Still usable afterwards.
    t = torch.ones(2)
    dist.all_reduce(t)
    check("all_reduce after the refusals", t, torch.full((2,), float(size)))
    coalescing_manager(rank, size)


def coalescing_manager(rank, size):
    """torch's _coalescing_manager with a device: the ops inside run, the manager's Work covers them all
    (blocking, and handed back with async_ops)."""
    from torch.distributed.distributed_c10d import _coalescing_manager

    cpu = torch.device("cpu")
    a, b = torch.full((3,), rank + 1.0), torch.full((2,), 10.0 * rank)
    with _coalescing_manager(device=cpu):
        dist.all_reduce(a)
        dist.broadcast(b, src=1)
    check("coalesced all_reduce", a, torch.full((3,), size * (size + 1) / 2))
    check("coalesced broadcast", b, torch.full((2,), 10.0))
    outs = [torch.empty(2) for _ in range(size)]
    c = torch.full((4,), 1.0)
    with _coalescing_manager(device=cpu, async_ops=True) as cm:
        dist.all_gather(outs, torch.full((2,), float(rank)))
        dist.all_reduce(c)
    cm.wait()
    check("coalesced async all_gather", torch.stack(outs), torch.arange(size, dtype=torch.float32)[:, None]
          .expand(size, 2))
    check("coalesced async all_reduce", c, torch.full((4,), float(size)))


scenario = sys.argv[1]
if scenario == "file":
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    dist.init_process_group("pycoll", init_method=f"file://{sys.argv[2]}", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    check("all_reduce after file:// init", t, torch.tensor([dist.get_world_size() * (dist.get_world_size() + 1) / 2]))
else:
    dist.init_process_group("pycoll")
    mesh = named_groups_mesh_and_functional(dist.get_rank(), dist.get_world_size())
    dtensor_and_fsdp2(dist.get_rank(), dist.get_world_size(), mesh)
    the_ops_gloo_has(dist.get_rank(), dist.get_world_size())
print(json.dumps({"rank": dist.get_rank(), "failed": failed}), flush=True)
dist.destroy_process_group()
