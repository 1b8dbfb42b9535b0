"""One rank of tests/integrations/test_torch_cuda_fakes.py (2 ranks, multiproc.Ranks, the fake NCCL's libraries in the
environment): torch's whole collective set through the "pycoll" backend on CUDA tensors (tests/fakes/
fake_torch_cuda.py), each result exact. The group's methods are called as torch.distributed's functions call
them (torch's C++ dispatch into a Python group turns torch functions off, which the fake CUDA tensors need).
Prints one JSON line: the checks that failed (none), and the backend of the communicator CUDA tensors went to."""

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/, for fakes

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from fakes.fake_torch_cuda import cuda, enable  # noqa: E402

import pycoll.torch  # noqa: E402,F401 -- registers the "pycoll" backend

failed = []


def check(name, got, want):
    got = got.as_subclass(torch.Tensor) if isinstance(got, torch.Tensor) else got
    if not (isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype and
            torch.equal(got, want)):
        failed.append(f"{name}: got {got!r}, want {want!r}")


def run(name, fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 -- reported, and the next check still runs
        failed.append(f"{name}: {type(exc).__name__}: {exc}")


def main():
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # A call one rank fails on its own (a bad buffer) leaves its peer waiting on the NCCL communicator until the
    # group's timeout: short, so that such a failure is reported well within the test's deadline.
    dist.init_process_group("pycoll", rank=rank, world_size=size, timeout=datetime.timedelta(seconds=15))
    enable()
    f = torch.float32
    rows = torch.arange(size, dtype=f)

    g = dist.group.WORLD

    def opts(kind, **fields):
        o = getattr(dist, kind)()
        for k, v in fields.items():
            setattr(o, k, v)
        return o

    def all_reduce():
        t = cuda(torch.full((3,), rank + 1.0))
        g.allreduce([t]).wait()
        check("all_reduce", t, torch.full((3,), size * (size + 1) / 2))

    def broadcast_reduce():
        t = cuda(torch.full((2,), float(rank + 7)))
        g.broadcast([t], opts("BroadcastOptions", rootRank=1)).wait()
        check("broadcast", t, torch.full((2,), 8.0))
        t = cuda(torch.full((2,), rank + 1.0))
        g.reduce([t], opts("ReduceOptions", rootRank=0)).wait()
        if rank == 0:
            check("reduce", t, torch.full((2,), size * (size + 1) / 2))

    def all_gathers():
        outs = [cuda(torch.zeros(2)) for _ in range(size)]
        g.allgather([outs], [cuda(torch.full((2,), float(rank)))]).wait()
        for r, o in enumerate(outs):
            check(f"all_gather[{r}]", o, torch.full((2,), float(r)))
        out = cuda(torch.zeros(2 * size))
        g._allgather_base(out, cuda(torch.full((2,), float(rank)))).wait()
        check("all_gather_into_tensor", out, rows.repeat_interleave(2))
        lists = [[cuda(torch.zeros(1)), cuda(torch.zeros(2))] for _ in range(size)]
        g.allgather_coalesced(lists, [cuda(torch.full((1,), float(rank))), cuda(torch.full((2,), rank + 10.0))]).wait()
        for r in range(size):
            check(f"all_gather_coalesced[{r}][0]", lists[r][0], torch.full((1,), float(r)))
            check(f"all_gather_coalesced[{r}][1]", lists[r][1], torch.full((2,), r + 10.0))

    def reduce_scatters():
        out = cuda(torch.zeros(2))
        g.reduce_scatter([out], [[cuda(torch.full((2,), float(rank * 10 + j))) for j in range(size)]]).wait()
        check("reduce_scatter", out, torch.full((2,), float(sum(r * 10 + rank for r in range(size)))))
        out = cuda(torch.zeros(1))
        g._reduce_scatter_base(out, cuda(rows + rank)).wait()
        check("reduce_scatter_tensor", out, torch.tensor([float(size * rank + sum(range(size)))]))

    def all_to_alls():
        out = cuda(torch.zeros(size))
        g.all_to_all_single(out, cuda(rows + 10 * rank), [], []).wait()
        check("all_to_all_single", out, torch.arange(size, dtype=f) * 10 + rank)
        # Uneven: rank r sends r + j + 1 elements (all r * 100 + j) to rank j.
        send = torch.cat([torch.full((rank + j + 1,), float(rank * 100 + j)) for j in range(size)])
        want = torch.cat([torch.full((r + rank + 1,), float(r * 100 + rank)) for r in range(size)])
        out = cuda(torch.zeros(len(want)))
        g.all_to_all_single(out, cuda(send), [r + rank + 1 for r in range(size)],
                            [rank + j + 1 for j in range(size)]).wait()
        check("all_to_all_single uneven", out, want)
        outs = [cuda(torch.zeros(r + rank + 1)) for r in range(size)]
        g.alltoall(outs, [cuda(torch.full((rank + j + 1,), float(rank * 100 + j))) for j in range(size)]).wait()
        for r, o in enumerate(outs):
            check(f"all_to_all list[{r}]", o, torch.full((r + rank + 1,), float(r * 100 + rank)))

    def rooted():
        outs = [cuda(torch.zeros(2)) for _ in range(size)]
        g.gather([outs] if rank == 1 else [], [cuda(torch.full((2,), rank + 3.0))],
                 opts("GatherOptions", rootRank=1)).wait()
        if rank == 1:
            for r, o in enumerate(outs):
                check(f"gather[{r}]", o, torch.full((2,), r + 3.0))
        out = cuda(torch.zeros(3))
        ins = [[cuda(torch.full((3,), r * 2.0)) for r in range(size)]] if rank == 0 else []
        g.scatter([out], ins, opts("ScatterOptions", rootRank=0)).wait()
        check("scatter", out, torch.full((3,), rank * 2.0))

    def point_to_point():
        big = 1 << 16  # past the fake's per-peer buffer in the test: the receive must be posted for it to end
        if rank == 0:
            g.send([cuda(torch.arange(big, dtype=f))], 1, 0).wait()
            t = cuda(torch.zeros(4))
            g.recv([t], 1, 0).wait()
            check("recv on rank 0", t, torch.full((4,), 5.0))
        else:
            t = cuda(torch.zeros(big))
            g.recv([t], 0, 0).wait()
            check("recv on rank 1", t, torch.arange(big, dtype=f))
            g.send([cuda(torch.full((4,), 5.0))], 0, 0).wait()
        g.barrier().wait()

    for name, fn in [("all_reduce", all_reduce), ("broadcast/reduce", broadcast_reduce),
                     ("all_gather", all_gathers), ("reduce_scatter", reduce_scatters),
                     ("all_to_all", all_to_alls), ("gather/scatter", rooted), ("send/recv", point_to_point)]:
        run(name, fn)
    engine = getattr(g, "_cuda", None)
    print(json.dumps({"failed": failed, "cuda_backend": getattr(engine, "backend", None)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
