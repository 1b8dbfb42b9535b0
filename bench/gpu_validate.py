"""Validate pycoll on an NVIDIA GPU machine end to end and write bench/results/gpu.md.

    python bench/gpu_validate.py [--nproc N] [--quick] [--parts a,b,...] [--comm-timeout S] [--timeout S]
                                 [--out bench/results/gpu.md]

NEVER RUN YET: written without a GPU (none was available where pycoll was developed); its first run on a GPU
machine is its first test. It refuses to run (exit code 2, nothing written) where there is no usable GPU: no
PyTorch with CUDA, no visible device, or pycoll's nccl backend unusable (pycoll.backends() says why).
The report opens with a PASS or FAIL for each part (NOT RUN, and why, for a part that did not run).

--parts runs only the named parts, in the order given (PARTS: correctness, algorithms, streams, torch_backend,
cupy, reproducible, killed, torch_bench, mixed, bench; below), so that a short session on a GPU runs what
matters first, e.g. `--quick --parts streams,torch_backend,killed,correctness`. A collective not done within
--comm-timeout seconds (default 60) raises; a part's ranks are killed after --timeout seconds (default
2 x --comm-timeout + 60: a hung collective raises at the communicator's timeout, tearing the communicator down
takes at most as long again, plus the start), and a killed part, like a `pycoll bench` past that deadline, is
reported as failed with the rest still written.

Its ranks (layout()): one per GPU where there are 2 or more (N = every visible GPU unless --nproc). On one GPU,
two ranks share it where both NCCLs (pycoll's and PyTorch's) are 2.30 or newer, with NCCL_MULTI_RANK_GPU_ENABLE=1
(NCCL refuses two ranks of a communicator on one device before that); else one rank, and the parts that need a
peer (a killed rank) say they did not run.

What it does, each part in fresh processes (its name for --parts first):
1. versions (always): NVIDIA driver, CUDA (driver and runtime), NCCL (pycoll's and PyTorch's), NVRTC (the first
   candidate that loads, as pycoll loads it), the GPUs;
2. correctness: every dtype x op x size {0, 1, 7, 1001, 2^20+3, 2^28} (--quick: up to 2^20+3; 2^28 for
   all_reduce only) of pycoll's all_reduce, reduce_scatter, all_gather, broadcast and reduce on backend nccl
   against torch.distributed's on NCCL, on the same data (correctness_rows());
3. algorithms: compensated mode and pycoll's own algorithms (ring, halving_doubling, recursive_doubling, mesh
   over ncclSend/ncclRecv) at 1 KiB .. 1 GiB (x16 steps), float32 sum: error in ulps against the float64 sum,
   and time; every row must stay within the rounding any summation order allows (a wrong sum fails in fast
   mode too), compensated within 4 ulps, and a NaN or infinite error fails;
4. streams: a long kernel on a side stream writes the input; the all-reduce, called with that stream
   current, must wait for it; an async one's Work.wait() must return while that kernel still runs (no host wait)
   and the stream's next kernel must see the result; and the async_op=True call itself must return while the
   kernel writing its input has not run (its CUDA event not done: async_returns_early());
5. torch_backend: torch.distributed with backend "pycoll" (import pycoll.torch) on CUDA tensors: all_reduce
   (blocking, and async_op=True then wait()), all_gather (list) and all_gather_into_tensor,
   reduce_scatter_tensor, broadcast, all_to_all_single, send/recv and barrier, each exact against NumPy
   (torch_backend_checks()), then the async call returning before its input is written, as in 4;
6. cupy: pycoll's all_reduce and all_gather on CuPy arrays, integer-valued and exact, on the default stream and
   on a non-default stream behind ~1 s of GPU sleep (array_checks()); NOT RUN where CuPy does not import;
7. reproducible: accuracy="reproducible" all_reduce of ill-conditioned float32 and float64 data, run again with
   the ranks' terms in reversed rank order: bitwise the same result, and the same on every rank
   (reproducible_checks());
8. killed: a rank killed during a 1 GiB all-reduce: the others must raise (Timeout or PeerFailure) within the
   communicator's timeout (30 s) plus 15 s (KILLED_MARGIN_S);
9. torch_bench and bench: `pycoll bench --backend nccl --device cuda` beside torch.distributed's NCCL
   all-reduce, both timed as nccl-tests times (back-to-back calls between CUDA events, one synchronize per
   window: timing.time_windows); the times are reported, not judged;
10. mixed: a job with backend="auto": the GPU ranks (cuda tensors, an NCCL island) and two host ranks (NumPy
   arrays), every collective across the two islands, integers exact against NumPy on every rank (mixed_checks()).
The checks of 5, 6, 7 and 10 run on this machine in tests/tools/test_gpu_validate.py: 5-7 on host memory
(pycoll's torch backend on CPU tensors, NumPy for CuPy, the cpu backend for nccl), 10 on the fake NCCL. That is
all they have run on; the GPU code around them (streams, events, CuPy) has never run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pycoll.dtypes import REAL_DTYPES as DTYPES  # NCCL has no complex type

ROOT = Path(__file__).resolve().parents[1]
OPS = ("sum", "prod", "min", "max", "avg")
SIZES = (0, 1, 7, 1001, 2**20 + 3, 2**28)
ALGORITHMS = ("ring", "halving_doubling", "recursive_doubling", "mesh")
REFUSED = 2
# Every part, in the order a full run takes them; --parts picks some, in its own order.
PARTS = ("correctness", "algorithms", "streams", "torch_backend", "cupy", "reproducible", "killed", "torch_bench",
         "mixed", "bench")
# How long a communicator waits for a collective before raising (--comm-timeout): every hang ends by then.
COMM_TIMEOUT_S = 60.0
# A part's start before its first collective: imports, the CUDA context, the NCCL communicators.
STARTUP_S = 60.0


def part_deadline(comm_timeout):
    """Seconds a part's ranks get before they are killed: a hung collective raises at the communicator's timeout,
    and closing the communicator after it is bounded by that timeout again; plus the start. A healthy part ends
    long before."""
    return 2 * comm_timeout + STARTUP_S


def parts_arg(text):
    """--parts: names of PARTS, comma-separated, run in that order."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown parts {unknown or [text]}: choose from {', '.join(PARTS)}")
    return tuple(names)


def preflight():
    """None when this machine can run the validation, else why not (pycoll's own check first: it is quick)."""
    import pycoll

    nccl = {s.name: s for s in pycoll.backends()}["nccl"]
    if not nccl.usable:
        return f"pycoll's nccl backend is unusable: {nccl.reason}"
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (pip install torch, a CUDA build)"
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        return f"PyTorch sees no CUDA device (torch {torch.__version__}, CUDA build: {torch.version.cuda})"
    return None


# NCCL runs two ranks of one communicator on one GPU from 2.30 on, where NCCL_MULTI_RANK_GPU_ENABLE=1.
MULTI_RANK_GPU_NCCL = (2, 30)


def _version(text):
    """(major, minor) of "2.30.1", () where unknown."""
    try:
        return tuple(int(part) for part in str(text).split(".")[:2])
    except ValueError:
        return ()


def layout(gpus, pycoll_nccl, torch_nccl, nproc=None):
    """(ranks, extra environment, why) for `gpus` visible devices and the two NCCL versions ("2.30.1"): one
    rank per GPU from 2 GPUs on; on one, two ranks sharing it where both NCCLs allow it, else one rank. A rank
    uses GPU LOCAL_RANK % gpus (_device)."""
    if gpus >= 2:
        return nproc or gpus, {}, f"one rank per GPU ({gpus} GPUs)"
    shared = all(_version(v) >= MULTI_RANK_GPU_NCCL for v in (pycoll_nccl, torch_nccl))
    if shared:
        return nproc or 2, {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}, (
            f"one GPU, two ranks sharing it (NCCL {pycoll_nccl} and PyTorch's {torch_nccl}: "
            f"NCCL_MULTI_RANK_GPU_ENABLE=1)")
    return 1, {}, (f"one GPU, one rank: two ranks on one GPU need NCCL 2.30+ in pycoll and PyTorch (here "
                   f"{pycoll_nccl or 'unknown'} and {torch_nccl or 'unknown'})")


def _device():
    import torch

    return int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()


def versions():
    import torch

    from pycoll.plugins import nccl as nccl_plugin

    out = {}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        out["nvidia-smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        out["nvidia-smi"] = f"not run: {exc}"
    backend = nccl_plugin.NcclBackend()
    backend.probe()
    out["pycoll NCCL"] = f"{backend.nccl_version()} ({backend.loaded.get(0)})"
    out["pycoll CUDA runtime"] = str(backend.loaded.get(1))
    torch_nccl = ".".join(map(str, torch.cuda.nccl.version()))
    out["torch"] = f"{torch.__version__}, CUDA {torch.version.cuda}, NCCL {torch_nccl}"
    gpus = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        gpus.append(f"{i}: {torch.cuda.get_device_name(i)} (sm_{major}{minor})")
    out["GPUs"] = ", ".join(gpus)
    out["NVRTC"] = nvrtc_version(nccl_plugin.nvrtc_candidates())
    return out


def nvrtc_version(candidates, load=None):
    """NVRTC's version and path: the first of `candidates` that loads (ctypes.CDLL unless `load`), as pycoll
    takes the first that loads -- the first candidate may be a bare soname (libnvrtc.so.12) absent where
    libnvrtc.so.13 is there. Else "not found" with every candidate tried and why it failed."""
    import ctypes

    tried = []
    for path in candidates:
        try:
            lib = (load or ctypes.CDLL)(path)
            major, minor = ctypes.c_int(), ctypes.c_int()
            lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        except (OSError, AttributeError) as exc:  # not loadable, or not NVRTC
            tried.append(f"{path}: {exc}")
            continue
        return f"{major.value}.{minor.value} ({path})"
    return f"not found, tried {'; '.join(tried) or 'nothing'}"


# ---- the ranks ----

def _comm_timeout():
    """The communicators' timeout main() hands every rank (--comm-timeout)."""
    return float(os.environ.get("GPU_VALIDATE_COMM_TIMEOUT", COMM_TIMEOUT_S))


def _init(timeout=None):
    """This rank's GPU, a pycoll communicator on nccl and a torch.distributed NCCL group beside it."""
    import torch
    import torch.distributed as dist

    import pycoll

    local = _device()
    torch.cuda.set_device(local)
    comm = pycoll.init(backend="nccl", timeout=timeout or _comm_timeout())
    port = int(os.environ["TORCH_PORT"])
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size, device_id=torch.device("cuda", local))
    return comm, torch, dist


def _data(torch, dtype, n, rank, op, device="cuda", wrap=lambda t: t):
    """Deterministic per-rank data whose reduction is exact in every dtype (no overflow, no rounding), made on
    `device` and handed to the collectives as wrap() makes it."""
    g = torch.Generator(device=device).manual_seed(1000 * rank + n)
    if op == "prod":
        x = torch.randint(0, 2, (n,), device=device, generator=g) * 2 - 1
        if dtype == "uint8":
            x = torch.ones(n, device=device, dtype=torch.int64)
    else:
        x = torch.randint(0 if dtype == "uint8" else -8, 9, (n,), device=device, generator=g)
    return wrap(x.to(getattr(torch, dtype)))


REDUCING = ("all_reduce", "reduce_scatter", "reduce")
CHECKED = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def correctness_rows(comm, dist, torch, sizes, dtypes=DTYPES, ops=OPS, device="cuda", wrap=lambda t: t,
                     sync=lambda: None, collectives=CHECKED, for_torch=lambda t: t):
    """Each of CHECKED by pycoll's `comm` and by torch.distributed's default group on the same data, compared
    exactly: rows of {"collective", "n", "dtype", "op", "equal"} (or "pycoll"/"torch": what raised). Roots are
    the last rank; off the root, pycoll's reduce must leave the input as it was. Where torch has no avg for a
    dtype, its reference is its sum divided by the world size (integers truncate, as NCCL's avg). for_torch(t):
    the tensor torch's group is handed for t (the same memory)."""
    size, rank, root = comm.size, comm.rank, comm.size - 1
    torch_ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
                 "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}

    def reference(call, op, result):
        """call(torch's op) into `result`; avg through the sum where torch refuses it (gloo sums integers, then
        fails to divide them in place: the sum starts again from the input)."""
        before = result.clone()
        try:
            call(torch_ops[op] if op else None)
        except Exception:
            if op != "avg":
                raise
            result.copy_(before)
            call(torch_ops["sum"])
            if result.is_floating_point():
                result.div_(size)
            else:
                result.copy_(torch.div(result, size, rounding_mode="trunc"))

    def one(collective, n, dtype, op):
        x = _data(torch, dtype, n * size if collective == "reduce_scatter" else n, rank, op, device, wrap)
        zeros = wrap(torch.zeros(n * size if collective == "all_gather" else n, dtype=x.dtype, device=device))
        mine, theirs = (x.clone(), x.clone()) if collective in ("all_reduce", "broadcast", "reduce") else (
            zeros.clone(), zeros.clone())
        pycoll_call = {
            "all_reduce": lambda: comm.all_reduce(mine, op=op),
            "reduce_scatter": lambda: comm.reduce_scatter(x, mine, op=op),
            "all_gather": lambda: comm.all_gather(x, mine),
            "broadcast": lambda: comm.broadcast(mine, root=root),
            "reduce": lambda: comm.reduce(mine, root=root, op=op),
        }[collective]
        t_theirs, t_x = for_torch(theirs), for_torch(x)
        torch_call = {
            "all_reduce": lambda o: dist.all_reduce(t_theirs, op=o),
            "reduce_scatter": lambda o: dist.reduce_scatter_tensor(t_theirs, t_x.clone(), op=o),
            "all_gather": lambda o: dist.all_gather_into_tensor(t_theirs, t_x),
            "broadcast": lambda o: dist.broadcast(t_theirs, src=root),
            "reduce": lambda o: dist.reduce(t_theirs, dst=root, op=o),
        }[collective]
        row = {"collective": collective, "n": n, "dtype": dtype, "op": op}
        try:
            pycoll_call()
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            row["pycoll"] = f"{type(exc).__name__}: {exc}"[:200]
        try:
            reference(torch_call, op, theirs)
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            row["torch"] = f"{type(exc).__name__}: {exc}"[:200]
        sync()
        if "pycoll" not in row and "torch" not in row:
            want = x if collective == "reduce" and rank != root else theirs
            row["equal"] = bool(torch.equal(mine, want))
        return row

    rows = []
    for collective in collectives:
        for n in sizes:
            for dtype in dtypes:
                for op in ops if collective in REDUCING else (None,):
                    rows.append(one(collective, n, dtype, op))
    return rows


def worker_correctness(quick):
    comm, torch, dist = _init()
    rows = []
    for n in SIZES:
        if quick and n > 2**20 + 3:
            continue
        # The largest size for all_reduce only: the others' inputs or outputs are `size` times larger.
        rows += correctness_rows(comm, dist, torch, (n,), sync=torch.cuda.synchronize,
                                 collectives=CHECKED if n <= 2**20 + 3 else ("all_reduce",))
        torch.cuda.empty_cache()
    return rows


def _ulps(torch, got, want_f64):
    """The largest error of float32 `got` in float32 ulps of the float64 reference."""
    if not got.numel():
        return 0.0
    w = want_f64.float().abs()
    spacing = (torch.nextafter(w, torch.full_like(w, float("inf"))) - w).double()
    return float(((got.double() - want_f64).abs() / spacing).max())


def worker_algorithms(quick):
    comm, torch, _ = _init()
    rows = []
    top = 2**26 if quick else 2**30
    nbytes = 1024
    while nbytes <= top:
        n = nbytes // 4
        want = sum(_mixed(torch, n, r).double() for r in range(comm.size))
        magnitude = sum(_mixed(torch, n, r).double().abs() for r in range(comm.size))
        for algorithm in ALGORITHMS:
            for accuracy in ("fast", "compensated"):
                x = _mixed(torch, n, comm.rank)
                row = {"bytes": nbytes, "algorithm": algorithm, "accuracy": accuracy}
                try:
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    comm.all_reduce(x, algorithm=algorithm, accuracy=accuracy)
                    torch.cuda.synchronize()
                    row["seconds"] = time.perf_counter() - t
                    row["ran"] = comm.last_algorithm
                    row["max_ulps"] = _ulps(torch, x, want)
                    row["over_bound"] = _over_bound(x, want, magnitude, comm.size)
                except Exception as exc:  # noqa: BLE001 -- reported in the table
                    row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                rows.append(row)
        nbytes *= 16
    return rows


def _over_bound(got, want_f64, magnitude, size):
    """The largest error of float32 `got` as a multiple of the worst a float32 sum of `size` terms can be off in
    any order (each of the size - 1 additions rounds once: about (size - 1) * 2^-24 * the sum of the
    magnitudes, a proven bound, far above the typical error): over 1 is a wrong sum whatever the algorithm,
    which an error in ulps cannot tell apart from cancellation in fast mode."""
    if not got.numel():
        return 0.0
    k = max(size - 1, 1) * 2.0**-24
    bound = k / (1 - k) * magnitude  # gamma_(size-1) * sum |x|: Higham, Accuracy and Stability, (4.4)
    return float(((got.double() - want_f64).abs() / bound).max())


def _mixed(torch, n, rank, dtype=None, device="cuda"):
    """Ill-conditioned data (float32 unless dtype): magnitudes 1e-8..1e8 with cancellation across ranks."""
    dtype = dtype or torch.float32
    g = torch.Generator(device=device).manual_seed(7 + rank)
    mag = 10.0 ** (torch.rand(n, device=device, generator=g, dtype=torch.float64) * 16 - 8)
    sign = torch.randint(0, 2, (n,), device=device, generator=g) * 2 - 1
    return (mag * sign).to(dtype)


def worker_streams(quick):
    comm, torch, _ = _init()
    side = torch.cuda.Stream()
    rows = []
    for n in (1001, 2**24):
        x = torch.zeros(n, device="cuda", dtype=torch.float32)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU clock cycles before the input is written
            x.fill_(comm.rank + 1)
            comm.all_reduce(x)  # queued on `side` (the current stream): after the fill
        side.synchronize()
        want = comm.size * (comm.size + 1) / 2
        rows.append({"n": n, "ok": bool((x == want).all()), "first": float(x[0])})
    # async_op=True: Work.wait() orders the current stream after the collective without a host wait, so it returns
    # while the side stream's ~1 s kernel still runs, and the stream's next kernel sees the result.
    x = torch.zeros(2**24, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
        x.fill_(comm.rank + 1)
        work = comm.all_reduce(x, async_op=True)
        started = time.perf_counter()
        work.wait()
        waited = time.perf_counter() - started
        y = x * 2  # on `side`, after the collective
    side.synchronize()
    want = comm.size * (comm.size + 1)
    rows.append({"n": "async wait", "ok": bool((y == want).all()) and waited < 0.5, "waited_s": waited,
                 "first": float(y[0])})
    with torch.cuda.stream(side):
        ok, seen = async_returns_early(torch, comm.rank, comm.size, lambda t: comm.all_reduce(t, async_op=True))
    rows.append({"n": "async call", "ok": ok, **seen})
    return rows


# The longest an async_op=True call may take on the host: it only queues the collective.
ASYNC_CALL_MAX_S = 0.5


def async_returns_early(torch, rank, size, start):
    """(ok, what was seen) of start(x), an async_op=True all-reduce (sum) of x, called on the current stream
    behind ~1 s of GPU sleep and the kernel that writes x: it must return, within ASYNC_CALL_MAX_S, while that
    kernel's CUDA event is not yet done -- so the call waited neither for the GPU nor for its own result, which
    a check of Work.wait() alone does not show. Then Work.wait() and the stream's next kernel must see the sum."""
    x = torch.zeros(2**20, device="cuda", dtype=torch.float32)
    written = torch.cuda.Event()
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU clock cycles before the input is written
    x.fill_(rank + 1)
    written.record()
    t = time.perf_counter()
    work = start(x)
    returned = time.perf_counter() - t
    pending = not written.query()
    work.wait()
    y = x * 1  # the current stream's next kernel, after the collective
    torch.cuda.synchronize()
    right = bool((y == size * (size + 1) / 2).all())
    return pending and returned < ASYNC_CALL_MAX_S and right, {
        "call_s": returned, "input_still_pending": pending, "first": float(y[0])}


# The killed part's communicator timeout: short, so that the part is; its survivors must raise within it.
KILLED_TIMEOUT_S = 30.0


def worker_killed(quick):
    import pycoll

    comm, torch, _ = _init(timeout=KILLED_TIMEOUT_S)
    x = torch.ones(2**28, device="cuda", dtype=torch.float32)  # 1 GiB
    comm.all_reduce(x)
    torch.cuda.synchronize()
    if comm.rank == comm.size - 1:
        os._exit(17)  # gone without a word, as a crash or OOM kill leaves it
    t = time.perf_counter()
    try:
        for _ in range(20):
            comm.all_reduce(x)
        torch.cuda.synchronize()
        return [{"raised": None, "seconds": time.perf_counter() - t, "timeout": KILLED_TIMEOUT_S}]
    except (pycoll.Timeout, pycoll.PeerFailure, pycoll.CommunicatorClosed) as exc:
        return [{"raised": type(exc).__name__, "message": str(exc)[:300], "seconds": time.perf_counter() - t,
                 "timeout": KILLED_TIMEOUT_S}]


def worker_torch_bench(quick):
    """torch.distributed's NCCL all-reduce (in place: torch has no other form), timed as `pycoll bench --device
    cuda` times pycoll (timing.time_windows: back-to-back calls between CUDA events, one synchronize per window)
    on zeros, which a sum in place leaves unchanged: the median and p99 over windows of the time per call."""
    import statistics

    import numpy as np

    from pycoll.tools.bench import timing

    _, torch, dist = _init()
    rows = []
    nbytes = 1024
    while nbytes <= (2**26 if quick else 2**30):
        x = torch.zeros(nbytes // 4, device="cuda", dtype=torch.float32)
        times = timing.time_windows(lambda: dist.all_reduce(x), dist.barrier, 5, 20,
                                    lambda: torch.cuda.Event(enable_timing=True), lambda a, b: a.elapsed_time(b))
        us = statistics.median(times) * 1e6
        world = dist.get_world_size()
        rows.append({"bytes": nbytes, "us": us, "p99_us": float(np.percentile(times, 99)) * 1e6,
                     "busbw_GBps": nbytes / us / 1e3 * timing.bus_factor("all_reduce", world)})
        nbytes *= 4
    return rows


def _ints(rank, n, dtype):
    import numpy as np

    return (np.arange(n, dtype=np.int64) * (rank + 3) % 40 - 20).astype(dtype)


# Across islands: small (the crossing model's flat side) and past one staging segment (its hierarchical side).
MIXED_SIZES = (1001, 2**20 + 3)


def _checked(name, run, want, to_numpy):
    """The row {"check", "equal"} of run()'s result, brought to NumPy by to_numpy, against `want` exactly (a
    None result equals a None want), or {"check", "error"}: what raised."""
    import numpy as np

    row = {"check": name}
    try:
        got = run()
        row["equal"] = bool(got is None and want is None or np.array_equal(to_numpy(got), want))
    except Exception as exc:  # noqa: BLE001 -- reported in the table
        row["error"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def mixed_checks(comm, to_rank, to_numpy):
    """Every collective across islands on this rank's kind of array (to_rank: a NumPy array -> one; to_numpy:
    back), each checked exactly against NumPy: rows of {"check", "equal", "ran"} (or "error")."""
    import numpy as np

    rank, size = comm.rank, comm.size
    rows = []

    def check(name, run, want):
        row = _checked(name, run, want, to_numpy)
        if "error" not in row:
            row["ran"] = comm.last_algorithm
        rows.append(row)

    every = range(size)
    for n in MIXED_SIZES:
        total = sum(_ints(r, n, np.int64) for r in every)
        check(f"all_reduce sum int32 n={n}", lambda: comm.all_reduce(to_rank(_ints(rank, n, np.int32))),
              total.astype(np.int32))
        check(f"all_reduce avg int32 n={n}", lambda: comm.all_reduce(to_rank(_ints(rank, n, np.int32)), "avg"),
              np.where(total < 0, -(-total // size), total // size).astype(np.int32))
        check(f"all_reduce max int64 n={n}", lambda: comm.all_reduce(to_rank(_ints(rank, n, np.int64)), "max"),
              np.max([_ints(r, n, np.int64) for r in every], axis=0))
    check("reduce root=last", lambda: comm.reduce(to_rank(_ints(rank, 1001, np.int64)), root=size - 1),
          sum(_ints(r, 1001, np.int64) for r in every) if rank == size - 1 else _ints(rank, 1001, np.int64))
    whole = sum(_ints(r, 7 * size, np.int64) for r in every)
    check("reduce_scatter sum", lambda: comm.reduce_scatter(to_rank(_ints(rank, 7 * size, np.int32)),
                                                            to_rank(np.zeros(7, np.int32))),
          whole[7 * rank:7 * (rank + 1)].astype(np.int32))
    check("all_gather", lambda: comm.all_gather(to_rank(_ints(rank, 5, np.int32)), to_rank(np.zeros(5 * size,
                                                                                                     np.int32))),
          np.concatenate([_ints(r, 5, np.int32) for r in every]))
    check("broadcast root=0", lambda: comm.broadcast(to_rank(_ints(rank, 1001, np.int64)), root=0),
          _ints(0, 1001, np.int64))
    check("all_to_all", lambda: comm.all_to_all(to_rank(_ints(rank, 3 * size, np.int32)),
                                                to_rank(np.zeros(3 * size, np.int32))),
          np.concatenate([_ints(r, 3 * size, np.int32)[3 * rank:3 * (rank + 1)] for r in every]))
    root = size - 1
    check("gather root=last", lambda: comm.gather(
        to_rank(_ints(rank, 4, np.int32)), to_rank(np.zeros(4 * size, np.int32)) if rank == root else None, root=root),
        np.concatenate([_ints(r, 4, np.int32) for r in every]) if rank == root else None)
    check("scatter root=0", lambda: comm.scatter(to_rank(_ints(0, 4 * size, np.int32)) if rank == 0 else None,
                                                 to_rank(np.zeros(4, np.int32)), root=0),
          _ints(0, 4 * size, np.int32)[4 * rank:4 * (rank + 1)])
    counts = [r % 3 + 1 for r in every]
    check("all_gather counts=", lambda: comm.all_gather(to_rank(_ints(rank, counts[rank], np.int32)),
                                                        to_rank(np.zeros(sum(counts), np.int32)), counts=counts),
          np.concatenate([_ints(r, counts[r], np.int32) for r in every]))
    first = sum(counts[:rank])
    check("reduce_scatter counts= max", lambda: comm.reduce_scatter(
        to_rank(_ints(rank, sum(counts), np.int64)), to_rank(np.zeros(counts[rank], np.int64)), "max", counts=counts),
        np.max([_ints(r, sum(counts), np.int64)[first:first + counts[rank]] for r in every], axis=0))

    def ring():
        got = to_rank(np.zeros(5, np.int64))
        works = [comm.recv(got, (rank - 1) % size, async_op=True),
                 comm.send(to_rank(_ints(rank, 5, np.int64)), (rank + 1) % size, async_op=True)]
        for work in works:
            work.wait()
        return got

    check("send/recv ring", ring, _ints((rank - 1) % size, 5, np.int64))
    return rows


def worker_mixed(quick):
    """The first MIXED_GPUS ranks on their GPU (cuda tensors), the others host ranks (NumPy arrays): one
    backend="auto" communicator across both."""
    import numpy as np
    import torch

    import pycoll

    rank = int(os.environ["RANK"])
    on_gpu = rank < int(os.environ["MIXED_GPUS"])
    if on_gpu:
        torch.cuda.set_device(_device())
    comm = pycoll.init(backend="auto", device="cuda" if on_gpu else "host", timeout=_comm_timeout())

    def to_rank(arr):
        return torch.from_numpy(np.ascontiguousarray(arr)).cuda() if on_gpu else arr

    def to_numpy(arr):
        if on_gpu:
            torch.cuda.synchronize()
            return arr.cpu().numpy()
        return arr

    rows = mixed_checks(comm, to_rank, to_numpy)
    rows.append({"islands": str(comm.islands)})
    comm.close()
    return rows


def torch_backend_checks(dist, to_device, to_host):
    """torch.distributed's collectives through the group's backend on this rank's kind of tensor (to_device: a
    NumPy array -> one; to_host: back), each exact against NumPy on integer-valued data: rows of {"check",
    "equal"} (or "error"). send/recv pairs rank 2k with 2k+1 (the last rank of an odd world has no partner), the
    even rank sending first: a pairing that cannot deadlock even where a send waits for its receive."""
    import numpy as np

    rank, size = dist.get_rank(), dist.get_world_size()
    every = range(size)
    rows = []

    def check(name, run, want):
        rows.append(_checked(name, run, want, to_host))

    def all_reduce(x, **kwargs):
        t = to_device(x)
        dist.all_reduce(t, **kwargs)
        return t

    def all_reduce_async(x):
        t = to_device(x)
        dist.all_reduce(t, async_op=True).wait()
        return t

    def all_gather_list():
        outs = [to_device(np.zeros(5, np.int64)) for _ in every]
        dist.all_gather(outs, to_device(_ints(rank, 5, np.int64)))
        return outs

    def into(out, call, *args):
        out = to_device(out)
        call(out, *[to_device(a) for a in args])
        return out

    def broadcast(root):
        t = to_device(_ints(rank, n, np.int64))
        dist.broadcast(t, src=root)
        return t

    def send_recv(peer):
        mine, got = to_device(_ints(rank, 5, np.int64)), to_device(np.zeros(5, np.int64))
        if rank % 2 == 0:
            dist.send(mine, peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(mine, peer)
        return got

    n = 1001
    total = sum(_ints(r, n, np.int64) for r in every)
    check("all_reduce sum int32", lambda: all_reduce(_ints(rank, n, np.int32)), total.astype(np.int32))
    check("all_reduce max float32", lambda: all_reduce(_ints(rank, n, np.float32), op=dist.ReduceOp.MAX),
          np.max([_ints(r, n, np.float32) for r in every], axis=0))
    check("all_reduce async_op=True + wait", lambda: all_reduce_async(_ints(rank, n, np.float32)),
          total.astype(np.float32))
    gathered = np.concatenate([_ints(r, 5, np.int64) for r in every])
    rows.append(_checked("all_gather (list)", all_gather_list, gathered,
                         lambda outs: np.concatenate([to_host(o) for o in outs])))
    check("all_gather_into_tensor", lambda: into(np.zeros(5 * size, np.int64), dist.all_gather_into_tensor,
                                                 _ints(rank, 5, np.int64)), gathered)
    whole = sum(_ints(r, 7 * size, np.int64) for r in every)
    check("reduce_scatter_tensor", lambda: into(np.zeros(7, np.int32), dist.reduce_scatter_tensor,
                                                _ints(rank, 7 * size, np.int32)),
          whole[7 * rank:7 * (rank + 1)].astype(np.int32))
    check("broadcast src=last", lambda: broadcast(size - 1), _ints(size - 1, n, np.int64))
    check("all_to_all_single", lambda: into(np.zeros(3 * size, np.int32), dist.all_to_all_single,
                                            _ints(rank, 3 * size, np.int32)),
          np.concatenate([_ints(r, 3 * size, np.int32)[3 * rank:3 * (rank + 1)] for r in every]))
    if rank ^ 1 < size:
        check(f"send/recv with rank {rank ^ 1}", lambda: send_recv(rank ^ 1), _ints(rank ^ 1, 5, np.int64))
    check("barrier", dist.barrier, None)
    return rows


def worker_torch_backend(quick):
    """torch.distributed with backend "pycoll" (import pycoll.torch) on this rank's GPU: its collectives on CUDA
    tensors (torch_backend_checks), then an async all-reduce whose call must return before its input is even
    written (async_returns_early)."""
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist

    import pycoll.torch  # noqa: F401 -- registers the "pycoll" backend

    torch.cuda.set_device(_device())
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("pycoll", init_method=f"tcp://127.0.0.1:{os.environ['TORCH_PORT']}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=_comm_timeout()))

    def to_host(t):
        torch.cuda.synchronize()
        return t.cpu().numpy()

    # The collectives first: the group makes its NCCL communicator on its first collective with CUDA tensors,
    # which the async call's timing must not include.
    rows = torch_backend_checks(dist, lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda(), to_host)
    ok, seen = async_returns_early(torch, rank, size, lambda t: dist.all_reduce(t, async_op=True))
    rows.append({"check": "all_reduce async_op=True returns before its input is written", "equal": ok, **seen})
    dist.destroy_process_group()
    return rows


def array_checks(comm, xp, to_host, where=""):
    """pycoll's all_reduce and all_gather on arrays of the array module xp (CuPy here; NumPy in the tests),
    integer-valued so that every result is exact against NumPy: rows of {"check", "equal"} (or "error"). The
    arrays are made, and so written, on xp's current stream."""
    import numpy as np

    rank, size = comm.rank, comm.size
    every = range(size)
    rows = []
    n = 2**20 + 3
    total = sum(_ints(r, n, np.int64) for r in every)
    for dtype in (np.int32, np.float32, np.float64):
        rows.append(_checked(f"all_reduce sum {np.dtype(dtype).name}{where}",
                             lambda: comm.all_reduce(xp.asarray(_ints(rank, n, dtype))), total.astype(dtype), to_host))
    rows.append(_checked(f"all_reduce max int64{where}", lambda: comm.all_reduce(xp.asarray(_ints(rank, n, np.int64)),
                                                                                 "max"),
                         np.max([_ints(r, n, np.int64) for r in every], axis=0), to_host))
    rows.append(_checked(f"all_gather int64{where}", lambda: comm.all_gather(xp.asarray(_ints(rank, 1001, np.int64)),
                                                                             xp.zeros(1001 * size, np.int64)),
                         np.concatenate([_ints(r, 1001, np.int64) for r in every]), to_host))
    return rows


def worker_cupy(quick):
    """pycoll on CuPy arrays (backend nccl): array_checks on the default stream, then on a non-default stream
    whose first work is ~1 s of GPU sleep, so that a collective not queued on CuPy's current stream reads its
    input before it is written. Not run where CuPy does not import."""
    try:
        import cupy
    except ImportError as exc:
        return [{"not_run": f"cupy missing ({exc})"}]
    import torch

    import pycoll

    local = _device()
    cupy.cuda.Device(local).use()
    torch.cuda.set_device(local)
    comm = pycoll.init(backend="nccl", timeout=_comm_timeout())
    rows = array_checks(comm, cupy, cupy.asnumpy)
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        with torch.cuda.stream(torch.cuda.ExternalStream(side.ptr)):
            torch.cuda._sleep(2_000_000_000)  # CuPy has no sleep kernel; torch's, on CuPy's stream
        rows += array_checks(comm, cupy, cupy.asnumpy, " on a side stream")  # asnumpy: on `side`, then waits
    comm.close()
    return rows


def reproducible_checks(comm, torch, n, device="cuda", accuracy="reproducible"):
    """accuracy="reproducible" all_reduce (sum) of ill-conditioned float32 and float64 data, run twice: rank r
    holding term set r, then term set size-1-r -- the same terms summed in another rank order. Rows of {"check",
    "equal"} (or "error"): the two results bitwise identical, and (gathered) bitwise identical on every rank.
    accuracy: a test's knob, to see that fast mode, where the order shows in the bits, fails."""
    rank, size = comm.rank, comm.size
    rows = []
    for dtype, bits in ((torch.float32, torch.int32), (torch.float64, torch.int64)):
        row = {"check": f"{accuracy} {str(dtype).removeprefix('torch.')} sum n={n}, rank order reversed"}
        try:
            runs = []
            for terms in (rank, size - 1 - rank):
                x = _mixed(torch, n, terms, dtype, device)
                comm.all_reduce(x, accuracy=accuracy)
                runs.append(x.view(bits))
            gathered = torch.zeros(size * n, dtype=bits, device=device)
            comm.all_gather(runs[0], gathered)
            if device == "cuda":
                torch.cuda.synchronize()
            row["same_bits_reordered"] = bool(torch.equal(runs[0], runs[1]))
            row["same_bits_every_rank"] = all(bool(torch.equal(gathered[r * n:(r + 1) * n], runs[0]))
                                              for r in range(size))
            row["equal"] = row["same_bits_reordered"] and row["same_bits_every_rank"]
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
        rows.append(row)
    return rows


def worker_reproducible(quick):
    import torch

    import pycoll

    torch.cuda.set_device(_device())
    comm = pycoll.init(backend="nccl", timeout=_comm_timeout())
    rows = reproducible_checks(comm, torch, 2**20 + 3 if quick else 2**24 + 3)
    comm.close()
    return rows


WORKERS = {"correctness": worker_correctness, "algorithms": worker_algorithms, "streams": worker_streams,
           "torch_backend": worker_torch_backend, "cupy": worker_cupy, "reproducible": worker_reproducible,
           "killed": worker_killed, "torch_bench": worker_torch_bench, "mixed": worker_mixed}
# The mixed run's host ranks, beside one rank per GPU.
MIXED_HOST_RANKS = 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(part, nproc, quick, timeout, env=None):
    """Start nproc ranks of `part` (own processes, not pycoll run: a killed rank must not end the others); each
    rank's rows, or its failure. env: more variables for every rank."""
    with tempfile.TemporaryDirectory() as tmp:
        base = dict(os.environ, WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(_free_port()), TORCH_PORT=str(_free_port()), PYTHONSAFEPATH="1", **(env or {}))
        procs = []
        for r in range(nproc):
            env = dict(base, RANK=str(r), LOCAL_RANK=str(r))
            cmd = [sys.executable, __file__, "--worker", part, "--result", f"{tmp}/{r}.json"]
            if quick:
                cmd.append("--quick")
            with open(f"{tmp}/{r}.log", "w") as log:  # a file, not a pipe: no rank blocks on a full pipe
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        results = {}
        for r, p in enumerate(procs):
            killed = False
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                killed = True
            path = Path(tmp, f"{r}.json")
            results[r] = json.loads(path.read_text()) if path.exists() else {
                "exit": p.returncode, "output": Path(tmp, f"{r}.log").read_text()[-2000:],
                **({"timed_out": f"killed at the part's deadline, {timeout:g} s"} if killed else {})}
        return results


# Compensated mode's promise on ill-conditioned float32 data: a few ulps whatever the size (fast mode's error in
# ulps grows with N and the data: it is judged only against the bound any summation order keeps to, _over_bound).
COMPENSATED_MAX_ULPS = 4.0


def algorithm_row_bad(row):
    """Whether a row of the algorithms part fails: it raised, or its result is past the bound any summation
    order keeps to (a wrong algorithm, in either accuracy), or compensated is over its few ulps. Written as
    `not (error <= limit)` so that a NaN error, which compares false with everything, fails."""
    if "error" in row:
        return True
    if not row.get("over_bound", float("nan")) <= 1.0:
        return True
    return row["accuracy"] == "compensated" and not row.get("max_ulps", float("nan")) <= COMPENSATED_MAX_ULPS


def _failed(ranks):
    """Why some ranks left no rows ("" where none): how each ended."""
    failed = {r: rows.get("timed_out", f"exit {rows.get('exit')}") for r, rows in ranks.items()
              if isinstance(rows, dict)}
    return f"ranks {sorted(failed)} failed ({'; '.join(sorted(set(failed.values())))})" if failed else ""


def _judge(ranks, is_bad, good, bad_text, every_rank=False):
    """(ok, why): every rank ran, and no row of rank 0 (every_rank: of any rank) is_bad."""
    if _failed(ranks):
        return False, _failed(ranks)
    bad = [row for r in (sorted(ranks) if every_rank else [0]) for row in ranks.get(r, []) if is_bad(row)]
    return not bad, f"{len(bad)} {bad_text}" if bad else good


def verdicts(parts, not_run=None):
    """Each part's pass or fail, with why: the first run on a GPU must say plainly whether pycoll works there.
    `parts[part][rank]` is that rank's rows, or a dict saying how it failed. A part absent from `parts` did not
    run: None, and why (not_run[part], else --parts left it out)."""
    judges = {
        # Every rank: each checks its own result (a reduce's root is the last rank).
        "correctness": lambda ranks: _judge(ranks, lambda r: not r.get("equal"), "every case equal to torch's",
                                            "cases not equal to torch's", every_rank=True),
        "algorithms": lambda ranks: _judge(
            ranks, algorithm_row_bad,
            f"every algorithm ran; every sum within the rounding any order allows, compensated within "
            f"{COMPENSATED_MAX_ULPS} ulps",
            f"rows with an error, a NaN or infinite error, a sum past the rounding any order allows, or "
            f"compensated over {COMPENSATED_MAX_ULPS} ulps"),
        "streams": lambda ranks: _judge(
            ranks, lambda r: not r["ok"], "the collective waited for the side stream; an async wait left the host "
            "free and the stream ordered",
            "collectives ran before the side stream's kernel, or an async wait blocked the host"),
        "killed": killed_verdict,
        "torch_bench": lambda ranks: _judge(ranks, lambda r: False, "timed (the times are reported, not judged)",
                                            ""),
        "torch_backend": checks_verdict,
        "cupy": checks_verdict,
        "reproducible": checks_verdict,
        "mixed": checks_verdict,
        "bench": lambda ranks: (ranks[0][0]["ok"], f"pycoll bench: {ranks[0][0]['why']}"),
    }
    return {part: judges[part](parts[part]) if part in parts else (
        None, (not_run or {}).get(part, "not run: not in --parts")) for part in PARTS}


# How long after the communicator's timeout a survivor of a killed rank may still raise: the collective in flight
# is aborted and the communicator torn down, each bounded by that timeout but not instant.
KILLED_MARGIN_S = 15.0


def killed_verdict(ranks):
    """(ok, why) of the killed part: the last rank exits on purpose; every other rank must have raised, not hung
    or returned, and within its communicator's timeout plus KILLED_MARGIN_S (a raise long after the timeout is
    a timeout not kept)."""
    last = max(ranks, default=0)
    survivors = {r: rows[0] if isinstance(rows, list) and rows else {} for r, rows in ranks.items() if r != last}
    late = [r for r, row in survivors.items() if row.get("raised") and not row.get("seconds", float("nan")) <= (
        row.get("timeout", KILLED_TIMEOUT_S) + KILLED_MARGIN_S)]
    raised = {r: row.get("raised") for r, row in survivors.items()}
    seconds = {r: round(row["seconds"], 1) for r, row in survivors.items() if "seconds" in row}
    ok = bool(survivors) and all(raised.values()) and not late
    why = f"the survivors raised {raised} after {seconds} s"
    if late:
        why += f"; ranks {late} raised later than their timeout + {KILLED_MARGIN_S:g} s"
    return ok, why


def checks_verdict(ranks):
    """(ok, why) of a part made of checks (mixed_checks, torch_backend_checks, ...): every rank ran, and every
    check of every rank was equal (each rank checks its own result: they differ by rank); None where the part
    said it could not run (a row {"not_run": why})."""
    if _failed(ranks) or not ranks:
        return False, _failed(ranks) or "no rank ran"
    not_run = [row["not_run"] for rows in ranks.values() for row in rows if "not_run" in row]
    if not_run:
        return None, f"not run: {not_run[0]}"
    bad = [(r, row["check"]) for r, rows in ranks.items() for row in rows if "check" in row and not row.get("equal")]
    checks = sum(1 for row in ranks[0] if "check" in row)
    return (not bad, f"{len(bad)} (rank, check) not equal or not run: {bad[:8]}" if bad
            else f"{checks} checks equal on every rank")


def report(args, info, parts, not_run=None):
    chosen = getattr(args, "parts", PARTS)
    command = (f"python bench/gpu_validate.py --nproc {args.nproc}{' --quick' if args.quick else ''}"
               f"{'' if chosen == PARTS else ' --parts ' + ','.join(chosen)}")
    lines = ["# pycoll on NVIDIA GPUs: validation", "",
             f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "", "## Versions", ""]
    if getattr(args, "layout", None):
        lines += [f"- ranks: {args.layout}"]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    lines += ["", "## Verdict", ""]
    lines += [f"- {part}: {'NOT RUN' if ok is None else 'PASS' if ok else 'FAIL'} ({why})"
              for part, (ok, why) in verdicts(parts, not_run).items()]
    for title, key in (("Correctness against torch.distributed (NCCL)", "correctness"),
                       ("Compensated and pycoll's algorithms (float32 sum, ill-conditioned data)", "algorithms"),
                       ("Stream ordering behind a long kernel on a side stream", "streams"),
                       ("A rank killed during a 1 GiB all-reduce", "killed"),
                       ("torch.distributed through pycoll's backend on CUDA tensors", "torch_backend"),
                       ("pycoll on CuPy arrays", "cupy"),
                       ("Reproducible accuracy: the same bits in another rank order and on every rank",
                        "reproducible"),
                       ("torch.distributed NCCL all-reduce in place (back-to-back, CUDA events)", "torch_bench"),
                       ("A mixed job: GPU ranks and host ranks, backend=\"auto\"", "mixed")):
        if key not in parts:
            continue
        lines += ["", f"## {title}", ""]
        for rank, rows in sorted(parts[key].items()):
            if isinstance(rows, dict):
                lines += [f"- rank {rank} failed ({rows.get('timed_out', 'exit %s' % rows['exit'])}):", "", "```",
                          rows["output"], "```"]
                continue
            if rank != 0 and key not in ("killed", "mixed", "torch_backend", "cupy", "reproducible"):
                continue  # every rank holds the same result; rank 0 speaks for them
            if key == "correctness":
                bad = [r for r in rows if not r.get("equal")]
                lines.append(f"- {len(rows) - len(bad)} of {len(rows)} (collective, dtype, op, size) cases equal "
                             f"to torch's")
                lines += [f"  - not equal or not run: {json.dumps(r)}" for r in bad]
            else:
                lines += [f"- rank {rank}: {json.dumps(r)}" for r in rows]
    for row in parts.get("bench", {}).get(0, []):
        lines += ["", "## pycoll bench --backend nccl --device cuda", "", f"{row['why']}:", "", "```",
                  row["output"].strip(), "```"]
    return "\n".join(lines + [""])


def run_bench(cmd, timeout):
    """The row of `pycoll bench` (cmd): {"ok", "why", "output"}, its table or how it failed. One past `timeout`
    is killed and reported as failed, so that the parts which ran before it still reach the report."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return {"ok": False, "why": f"timed out after {timeout:g} s", "output": out[-3000:]}
    if done.returncode:
        return {"ok": False, "why": f"exit {done.returncode}", "output": done.stderr[-3000:]}
    return {"ok": True, "why": "exit 0", "output": done.stdout}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=None,
                   help="ranks (default: one per visible GPU; on one GPU, two where NCCL allows, else one)")
    p.add_argument("--quick", action="store_true", help="sizes up to 2^20+3 elements and 64 MiB")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu.md"))
    p.add_argument("--parts", type=parts_arg, default=PARTS,
                   help=f"the parts to run, comma-separated, in that order (default: all: {','.join(PARTS)})")
    p.add_argument("--comm-timeout", type=float, default=COMM_TIMEOUT_S,
                   help="seconds every communicator waits for a collective before raising (default %(default)g)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds a part may take before its ranks are killed (default: 2 x --comm-timeout + "
                        f"{STARTUP_S:g})")
    p.add_argument("--check", action="store_true", help="only say whether this machine can run it (exit 0 or 2)")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.timeout = args.timeout or part_deadline(args.comm_timeout)
    if args.worker:
        rows = WORKERS[args.worker](args.quick)
        Path(args.result).write_text(json.dumps(rows))
        return 0
    why = preflight()
    if why:
        print(f"gpu_validate: refusing to run: no usable GPU here: {why}. Nothing was run and {args.out} was not "
              f"written; run this on a machine with NVIDIA GPUs, PyTorch with CUDA and the gpu extra "
              f"(pip install '.[gpu]').", file=sys.stderr)
        return REFUSED
    if args.check:
        print("gpu_validate: this machine can run the validation", file=sys.stderr)
        return 0
    import torch

    from pycoll.plugins import nccl as nccl_plugin

    gpus = torch.cuda.device_count()
    backend = nccl_plugin.NcclBackend()
    backend.probe()
    args.nproc, env, args.layout = layout(gpus, backend.nccl_version(),
                                          ".".join(map(str, torch.cuda.nccl.version())), args.nproc)
    print(f"gpu_validate: {args.layout}; parts {','.join(args.parts)}, {args.timeout:g} s each", file=sys.stderr)
    info = versions()
    env = {**env, "GPU_VALIDATE_COMM_TIMEOUT": str(args.comm_timeout)}
    parts, not_run = {}, {}
    for part in args.parts:
        started = time.monotonic()
        if part == "killed" and args.nproc < 2:
            not_run[part] = "not run: one rank, no peer to lose"
            continue
        if part == "mixed":
            print(f"gpu_validate: mixed on {args.nproc} GPU ranks and {MIXED_HOST_RANKS} host ranks", file=sys.stderr)
            parts[part] = run_ranks("mixed", args.nproc + MIXED_HOST_RANKS, args.quick, args.timeout,
                                    env={**env, "MIXED_GPUS": str(args.nproc)})
        elif part == "bench":
            # pycoll bench puts rank r on GPU r: one rank per GPU there.
            print(f"gpu_validate: pycoll bench on {min(args.nproc, gpus)} ranks", file=sys.stderr)
            parts[part] = {0: [run_bench([sys.executable, "-m", "pycoll", "bench", "-n", str(min(args.nproc, gpus)),
                                          "--backend", "nccl", "--device", "cuda", "-b", "1K",
                                          "-e", "64M" if args.quick else "1G", "-f", "4"], args.timeout)]}
        else:
            print(f"gpu_validate: {part} on {args.nproc} ranks", file=sys.stderr)
            parts[part] = run_ranks(part, args.nproc, args.quick, args.timeout, env=env)
        print(f"gpu_validate: {part} took {time.monotonic() - started:.0f} s", file=sys.stderr)
    Path(args.out).write_text(report(args, info, parts, not_run))
    print(f"gpu_validate: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
