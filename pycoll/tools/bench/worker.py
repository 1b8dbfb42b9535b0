"""One rank of a pycoll sweep. `python -m pycoll.tools.bench.worker CONFIG.json RESULT.json` under a launcher's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): rank 0 writes the rows to RESULT.json."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from pycoll.tools.bench import check, sweep, timing
from pycoll.tools.bench.progress import for_rank

DEVICES = ("cpu", "cuda", "npu")


class HostArrays:
    """--device cpu: NumPy arrays, timed by the host clock, each iteration after a barrier."""

    name = "cpu"
    back_to_back = False  # timed calls one at a time (timing.time_iterations)

    def to_device(self, a):
        return a

    def to_host(self, a):
        return np.asarray(a)

    def time_iterations(self, run, barrier, warmup, iters):
        return timing.time_iterations(run, barrier, warmup, iters)


class DeviceArrays(HostArrays):
    """What the device layers share: the timed calls run back to back in windows between the device's events
    (timing.time_windows, nccl-tests' method), one synchronize per window; a "time" is then a window's time
    per call. Subclasses give new_event() and elapsed_ms(start, end)."""

    back_to_back = True

    def time_iterations(self, run, barrier, warmup, iters):
        return timing.time_windows(run, barrier, warmup, iters, self.new_event, self.elapsed_ms)


class TorchDeviceArrays(DeviceArrays):
    """--device cuda or npu through torch (torch.cuda / torch_npu): arrays on the device LOCAL_RANK names (the
    launcher's rank on this host), timed by the device's events."""

    def __init__(self, torch, kind, index):
        self.torch, self.name = torch, kind
        self.module = getattr(torch, kind)
        self.module.set_device(index)
        self.device = torch.device(f"{kind}:{index}")

    def to_device(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def to_host(self, a):
        return a.cpu().numpy() if hasattr(a, "cpu") else np.asarray(a)

    def new_event(self):
        return self.module.Event(enable_timing=True)

    def elapsed_ms(self, start, end):
        return start.elapsed_time(end)


class CupyArrays(DeviceArrays):
    """--device cuda through CuPy where torch has no CUDA: the same device choice and event timing."""

    name = "cuda"

    def __init__(self, cupy, index):
        self.cupy = cupy
        cupy.cuda.Device(index).use()

    def to_device(self, a):
        return self.cupy.asarray(a)

    def to_host(self, a):
        return self.cupy.asnumpy(a)

    def new_event(self):
        return self.cupy.cuda.Event()  # timing enabled by default

    def elapsed_ms(self, start, end):
        return self.cupy.cuda.get_elapsed_time(start, end)


def _local_rank() -> int:
    text = os.environ.get("LOCAL_RANK", "0")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--device: LOCAL_RANK must be an integer, got {text!r}") from None


def device_arrays(device: str):
    """Where the bench's arrays live, for --device: "cpu", "cuda" (torch, else CuPy) or "npu" (torch_npu), on
    the device LOCAL_RANK names. ValueError naming --device where there is no such device here."""
    if device not in DEVICES:
        raise ValueError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return HostArrays()
    index = _local_rank()
    try:
        import torch
    except ImportError:
        torch = None
    if device == "npu":
        try:
            import torch_npu  # noqa: F401 -- registers torch.npu
        except ImportError:
            raise ValueError("--device npu: torch_npu is not installed (pip install torch-npu, with CANN)") from None
        if not torch.npu.is_available() or index >= torch.npu.device_count():
            raise ValueError(f"--device npu: no NPU {index} here (LOCAL_RANK={index}, "
                             f"{torch.npu.device_count()} NPUs visible)")
        return TorchDeviceArrays(torch, "npu", index)
    if torch is not None and torch.cuda.is_available():
        if index >= torch.cuda.device_count():
            raise ValueError(f"--device cuda: no GPU {index} here (LOCAL_RANK={index}, "
                             f"{torch.cuda.device_count()} GPUs visible)")
        return TorchDeviceArrays(torch, "cuda", index)
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 -- no CuPy, or CuPy without a driver: no GPU either way
        count = 0
    if index >= count:
        raise ValueError(f"--device cuda: no CUDA device {index} here (LOCAL_RANK={index}; torch sees no CUDA and "
                         f"CuPy {'sees ' + str(count) + ' GPUs' if count else 'is missing or finds no GPU'})")
    return CupyArrays(cupy, index)


def run_collective(comm, collective, x, out, op, algorithm, accuracy, root):
    """One call of the collective under test; returns the array holding this rank's result."""
    if collective == "all_reduce":
        return comm.all_reduce(x, op, out=out, algorithm=algorithm, accuracy=accuracy)
    if collective == "reduce_scatter":
        return comm.reduce_scatter(x, out, op, algorithm=algorithm, accuracy=accuracy)
    if collective == "all_gather":
        return comm.all_gather(x, out)
    if collective == "broadcast":
        return comm.broadcast(x, root=root)
    if collective == "reduce":
        return comm.reduce(x, root=root, op=op, out=out, accuracy=accuracy)
    if collective == "all_to_all":
        return comm.all_to_all(x, out)
    raise ValueError(f"collective: unknown {collective!r}")


def _buffers(case, count, input_of, rank, world, dev):
    """(x, out) of the case's form on the device: out None where the call is in place on x (broadcast,
    all_reduce and reduce in place), and x this rank's block of out for all_gather in place."""
    x = input_of(rank)
    if case.collective == "broadcast" or (case.in_place and case.collective != "all_gather"):
        return dev.to_device(x), None
    out = np.zeros(check.output_count(case.collective, count, world), dtype=x.dtype)
    if case.in_place:  # all_gather
        block = slice(rank * x.size, (rank + 1) * x.size)
        out[block] = x
        out = dev.to_device(out)
        return out[block], out
    return dev.to_device(x), dev.to_device(out)


def _checks(comm, case, count, root, seed, dev):
    """(#wrong summed over ranks, rank 0's max relative error) for one case."""
    rank, world = comm.rank, comm.size
    op = case.op if case.op != "-" else "sum"

    def integers(r):
        return check.integer_input(op, case.dtype, check.input_count(case.collective, count, world), r, world)

    x, out = _buffers(case, count, integers, rank, world, dev)
    got = dev.to_host(run_collective(comm, case.collective, x, out, op, case.algorithm, case.accuracy, root))
    want = check.reference(case.collective, op, integers, count, rank, world, root, np.int64)
    wrong = dev.to_device(np.array([0 if want is None else check.count_wrong(got, want, case.dtype)],
                                   dtype=np.int64))
    wrong = dev.to_host(comm.all_reduce(wrong))
    rel_err = check.max_rel_err(got, want) if rank == 0 and want is not None else 0.0
    if check.is_float(case.dtype):
        def randoms(r):
            return check.random_input(op, case.dtype, check.input_count(case.collective, count, world), r, seed)

        x, out = _buffers(case, count, randoms, rank, world, dev)
        got = dev.to_host(run_collective(comm, case.collective, x, out, op, case.algorithm, case.accuracy, root))
        if rank == 0:
            ref = check.reference(case.collective, op, randoms, count, rank, world, root, np.longdouble)
            rel_err = check.max_rel_err(got, ref)
    return int(wrong[0]), rel_err


# In-place inputs that a back-to-back reduction leaves as they were: 0 + 0 and 1 * 1. (max, min and avg leave
# equal values after their first call.)
_FIXED_POINTS = {"sum": 0, "prod": 1}


def _timed_call(comm, case, count, root, dev):
    """(the call a case times, what to run before each iteration -- each window, on a device -- or None): the
    collective on integer data, or the barrier itself. An all_reduce or reduce in place overwrites its input
    with the result, which would grow (or overflow) from one call to the next: its input is restored before
    each iteration, untimed, so both forms reduce the same values. On a device the calls of a window run back
    to back with nothing between them, so there a sum or a product in place reduces 0s or 1s instead, which it
    leaves unchanged. (All_gather in place leaves its own block as it was, and broadcast just copies.)"""
    if case.collective == "barrier":
        return comm.barrier, None
    world = comm.size
    op = case.op if case.op != "-" else "sum"
    reduces_in_place = case.in_place and case.collective in ("all_reduce", "reduce")

    def integers(r):
        n = check.input_count(case.collective, count, world)
        if reduces_in_place and dev.back_to_back and op in _FIXED_POINTS:
            return np.full(n, _FIXED_POINTS[op], dtype=sweep.numpy_dtype(case.dtype))
        return check.integer_input(op, case.dtype, n, r, world)

    x, out = _buffers(case, count, integers, comm.rank, world, dev)

    def call():
        return run_collective(comm, case.collective, x, out, op, case.algorithm, case.accuracy, root)

    if reduces_in_place:
        kept = dev.to_device(integers(comm.rank))

        def restore():
            x[...] = kept

        return call, restore
    return call, None


def _time(comm, case, count, root, warmup, iters, dev):
    """(timing.Timing of the ranks' medians, (p50, p99) of the slowest rank per iteration -- per window on a
    device --, the algorithm that ran)."""
    world = comm.size
    warm, timed = sweep.iterations(case.nbytes, iters, warmup)
    call, before = _timed_call(comm, case, count, root, dev)

    def barrier():
        if before is not None:
            before()
        comm.barrier()

    times = dev.time_iterations(call, barrier, warm, timed)  # one per iteration, or per window on a device
    picked = comm.last_algorithm  # what "auto" chose; read before the gather below replaces it
    gathered = dev.to_device(np.zeros(world * len(times), dtype=np.float64))
    comm.all_gather(dev.to_device(np.asarray(times, dtype=np.float64)), gathered)
    by_rank = dev.to_host(gathered).reshape(world, len(times)).tolist()
    return timing.across_ranks([timing.rank_median(t) for t in by_rank]), timing.spread(by_rank), picked


def _connect(comm, dev):
    """Collectives before the first timed case: libraries that set up connections or buffers lazily
    (Open MPI's TCP btl connects on first use) would otherwise charge that to the first size."""
    small = dev.to_device(np.zeros(comm.size, dtype=np.float64))
    one = dev.to_device(np.zeros(1, dtype=np.float64))
    for _ in range(10):
        comm.barrier()
        comm.all_reduce(small, "sum")
        comm.all_gather(one, small)


def _describe(case) -> str:
    """A case as the progress display names it."""
    if case.collective in sweep.NO_DATA:
        return case.collective
    return f"{case.dtype} {case.op} {case.algorithm} {case.accuracy} {case.nbytes} B" + \
        (" in place" if case.in_place else "")


def backend_algorithms(backend: str) -> list[str]:
    import pycoll

    return next(list(s.algorithms) for s in pycoll.backends() if s.name == backend)


def run_cases(comm, config, progress=None, dev=None):
    """Every case of the config on comm, with arrays on config's device (dev: its device_arrays); the rows on
    rank 0, None elsewhere."""
    dev = dev or device_arrays(config.get("device", "cpu"))
    world = comm.size
    root = int(config.get("root", 0))
    seed = int(config.get("seed", 0))
    algorithms = config["algorithms"]
    if algorithms == ["all"]:
        algorithms = backend_algorithms(comm.backend)
    todo = sweep.cases(collective=config["collective"], dtypes=config["dtypes"], ops=config["ops"],
                       algorithms=algorithms, accuracies=config["accuracies"], size_list=config["sizes"],
                       in_place=config.get("in_place", (False, True)))
    _connect(comm, dev)
    rows = []
    if progress is not None:
        progress.start(len(todo), f"{comm.backend} x{world}")
    for case in todo:
        no_data = case.collective in sweep.NO_DATA
        itemsize = 0 if no_data else sweep.numpy_dtype(case.dtype).itemsize
        count = 0 if no_data else sweep.count_for(case.collective, case.nbytes, itemsize, world)
        what = _describe(case)
        if count == 0 and not no_data:
            what += ": skipped (smaller than one element)"
        else:
            # Nothing to check of a barrier but that it returned on every rank.
            wrong, rel_err = (0, 0.0) if no_data else _checks(comm, case, count, root, seed, dev)
            t, (p50, p99), picked = _time(comm, case, count, root, config.get("warmup"), config.get("iters"),
                                          dev)
            algbw, busbw = timing.bandwidths(case.collective, count * itemsize, world, t.max_s)
            rows.append({"collective": case.collective, "bytes": count * itemsize, "count": count,
                         "dtype": case.dtype, "op": case.op, "algorithm": case.algorithm, "picked": picked,
                         "accuracy": case.accuracy, "in_place": case.in_place, "backend": comm.backend,
                         "transport": getattr(comm, "transport", None), "world": world,
                         "time_us": t.max_s * 1e6, "time_min_us": t.min_s * 1e6,
                         "time_median_us": t.median_s * 1e6, "time_p50_us": p50 * 1e6, "time_p99_us": p99 * 1e6,
                         "algbw": algbw, "busbw": busbw, "wrong": wrong, "max_rel_err": rel_err})
            what += f": {t.max_s * 1e6:.1f} us" + (f" ({picked})" if case.algorithm == "auto" else "")
        if progress is not None:
            progress.advance(what)
    if progress is not None:
        progress.finish()
    return rows if comm.rank == 0 else None


def run(config, progress=None):
    """Init each backend of the config in turn (rank and world from the launcher's environment)."""
    import pycoll

    dev = device_arrays(config.get("device", "cpu"))  # refused before any init where there is no such device
    rows = []
    for backend in config["backends"]:
        with pycoll.init(backend=backend) as comm:
            got = run_cases(comm, config, progress if comm.rank == 0 else None, dev)
        # Every rank runs every backend (the others wait for it in the next init); only rank 0 has rows.
        if got is None:
            rows = None
        else:
            rows.extend(got)
    return rows


def main(argv=None):
    config_path, result_path = (argv if argv is not None else sys.argv[1:])
    with open(config_path) as f:
        config = json.load(f)
    rows = run(config, for_rank(config.get("progress_file")))
    if rows is not None:
        with open(result_path, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
