"""Produce bench/results/islands.md: the step between islands of a backend="auto" all-reduce (the leaders'
all-reduce of host-staged copies) against a pure-host all-reduce (backend "cpu") of the same bytes between the
same number of ranks on this host, on the fake NCCL and HCCL (tests/fakes, built here with the C compiler: their
"device" memory is host memory, so a staging copy is a memcpy). Also: the whole hierarchical all-reduce, and
one staging copy each way, for context. Each job runs --runs times, alternating; medians reported.

    python bench/islands_crossing.py [--runs 3] [--iters 30] [--out bench/results/islands.md]
"""

import argparse
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pycoll.tools.tuning import time_each

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fakes.vendor_harness import build_fake, device_array, run_ranks_ok  # noqa: E402
from multiproc import free_port  # noqa: E402

SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
MIXED = ("cuda", "npu", "host")  # one rank per island: the step between islands has no idle members beside it


def _timed(fn, barrier, iters):
    return statistics.median(time_each(fn, iters, barrier))


def _mixed_rank(devices, port, iters, rank, world):
    """Per size: (the crossing step alone, the whole all-reduce, one staging copy each way) on this rank."""
    import pycoll
    from pycoll.islands.staging import host_buffer
    from pycoll.plugins import Call

    comm = pycoll.init("auto", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       device=devices[rank], timeout=60)
    engine = comm._engine  # the leaders' engine: the very communicator the schedule's crossing step runs on
    out = {}
    for nbytes in SIZES:
        host = np.ones(nbytes // 4, np.float32)
        staged = host_buffer(host, 6)
        x = np.ones(nbytes // 4, np.float32)
        dev = device_array(devices[rank], x)
        crossing = _timed(lambda: engine.leaders.run(Call("all_reduce", staged, staged, op=0)),
                          lambda: engine.leaders.run(Call("barrier")), iters)
        whole = _timed(lambda: comm.all_reduce(dev), comm.barrier, iters)
        copy = _timed(lambda: (engine.stage_out(engine.stage_in(comm._buffer(dev, "x", True), "bench"),
                                                comm._buffer(dev, "x", True))), lambda: None, iters)
        out[nbytes] = (crossing, whole, copy)
    comm.close()
    return out


def _host_rank(port, iters, rank, world):
    import pycoll

    comm = pycoll.init("cpu", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port, timeout=60)
    out = {}
    for nbytes in SIZES:
        x = np.ones(nbytes // 4, np.float32)
        out[nbytes] = _timed(lambda: comm.all_reduce(x), comm.barrier, iters)
    comm.close()
    return out


def _slowest(results, index=None):
    return {n: max(r[n] if index is None else r[n][index] for r in results) for n in SIZES}


def _size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "islands.md"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pycoll-islands-bench-"))
    nccl, hccl = build_fake("nccl", tmp), build_fake("hccl", tmp)
    env = dict(PYCOLL_NCCL_LIBRARY=nccl, PYCOLL_CUDART_LIBRARY=nccl, PYCOLL_HCCL_LIBRARY=hccl,
               PYCOLL_ACL_LIBRARY=hccl, FAKE_COLL_DIR=str(tmp), PYTHONSAFEPATH="1",
               PYCOLL_ISLANDS_CROSSING="hierarchical")  # the whole all-reduce is the hierarchical one at every size
    started, load = time.monotonic(), os.getloadavg()
    crossing, whole, copy, host = [], [], [], []
    for _ in range(args.runs):
        mixed = run_ranks_ok(functools.partial(_mixed_rank, MIXED, free_port(), args.iters), len(MIXED), env,
                             timeout=600)
        crossing.append(_slowest(mixed, 0))
        whole.append(_slowest(mixed, 1))
        copy.append(_slowest(mixed[:2], 2))  # the device ranks' copies
        host.append(_slowest(run_ranks_ok(functools.partial(_host_rank, free_port(), args.iters), len(MIXED),
                                          env, timeout=600)))

    def med(runs, n):
        return statistics.median(r[n] for r in runs) * 1e6

    lines = [
        "# The step between islands against a pure-host all-reduce (fake NCCL and HCCL)", "",
        f"Produced by `python bench/islands_crossing.py --runs {args.runs} --iters {args.iters}` in "
        f"{time.monotonic() - started:.0f} s.", "",
        f"- CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores; {platform.platform()}",
        f"- Python {platform.python_version()}; numpy {np.__version__}",
        f"- Load: 1/5/15-minute load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it started "
        f"(other sessions share the cores), {os.getloadavg()[0]:.1f} at the end.", "",
        f"Method: a backend=\"auto\" job of {len(MIXED)} ranks, one per island ({', '.join(MIXED)}: fake NCCL, fake "
        f"HCCL, host), beside a backend=\"cpu\" job of {len(MIXED)} ranks; both on this host (shared memory). float32 "
        f"sum, in place; each iteration after a barrier; a rank's median of {args.iters}, the slowest rank's, then "
        f"the median of {args.runs} runs (jobs alternating). *crossing* is the leaders' all-reduce of host-staged "
        f"buffers exactly as the hierarchical schedule runs it; *pure host* is pycoll.init(\"cpu\")'s all_reduce of "
        f"the same bytes; *whole* is the mixed job's comm.all_reduce (island step, staging, crossing, staging, "
        f"island step; a one-rank island's steps are local copies); *staging* is one copy to the host and back "
        f"through the fakes' cudaMemcpy / aclrtMemcpy (a memcpy here: on a device it is a PCIe or HCCS transfer).",
        "", "| size | crossing (us) | pure host (us) | crossing / pure host | whole all-reduce (us) | staging "
        "there and back (us) |", "|---:|---:|---:|---:|---:|---:|"]
    for n in SIZES:
        c, h = med(crossing, n), med(host, n)
        lines.append(f"| {_size(n)} | {c:.1f} | {h:.1f} | {c / h:.2f} | {med(whole, n):.1f} | {med(copy, n):.1f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
