"""How far a reduction is from the correctly rounded exact sum, in ulps, and the accuracy report built on it.

    ref = correctly_rounded_sum(inputs, np.float32)       # exact sum (math.fsum), rounded once to float32
    err = ulp_distance(result, ref)                       # representable values between them, per element

The report (`pycoll bench --accuracy-report`, bench/accuracy_report.py) runs every algorithm x accuracy mode x
world size x dtype x data set through the real C schedules -- simulated ranks in one process
(pycoll.tools.simulate), or real rank processes over TCP -- and tabulates the max and mean error in ulps.

Data sets (each rank's values, drawn from one seeded generator so every rank can rebuild all of them):
  gaussian  standard normal values.
  mixed     magnitudes log-uniform over 1e-8..1e8 (1e-2..1e2 for float16, whose range is narrow) with random
            signs; on pairs of ranks half of the elements nearly cancel (b = -a * (1 + d), 1e-4 <= |d| <= 1e-2,
            never exactly), so the sum is far smaller than its largest terms.
  crafted   every element starts its ring chain at the value 2^p (p = the dtype's precision) and every other
            rank adds 1.0, which a chain of fast additions drops each time: fast ring's error is (N-1)/2 ulps.
"""

import hashlib
import math
import sys

import numpy as np

from pycoll.algorithms import ACCURACIES as _ACCURACY_IDS, COLL_ALGORITHMS, NATIVE_ONLY
from pycoll.dtypes import DTYPE_INFO, FLOAT_DTYPES, float_dtype
from pycoll.tools.simulate import simulate

__all__ = ["FLOAT_DTYPES", "DATASETS", "float_dtype", "correctly_rounded_sum", "ulp_distance", "make_inputs",
           "reduction_error", "run_accuracy_report", "reproducible_bits", "reproducible_bits_processes",
           "format_table"]

DATASETS = ("gaussian", "mixed", "crafted")
# Simulated ranks run over the in-process transport, which has no native collectives.
ALGORITHMS = tuple(name for name in COLL_ALGORITHMS["all_reduce"] if name not in NATIVE_ONLY)
ACCURACIES = tuple(_ACCURACY_IDS)

# (bits of precision, bit width) of each float format, from the C dtype table.
_FORMATS = {name: (DTYPE_INFO[name].precision, 8 * DTYPE_INFO[name].size) for name in FLOAT_DTYPES}
PRECISION_BITS = {name: precision for name, (precision, _) in _FORMATS.items()}
_UINT = {16: np.uint16, 32: np.uint32, 64: np.uint64}
_INT = {16: np.int16, 32: np.int32, 64: np.int64}


def _round_to_odd_f64(nearest, residual_sign):
    """Round-to-odd of exact values into float64, given nearest = the float64 nearest to each and the sign of
    (exact - nearest). Rounding this once more to a format of p <= 51 bits (to nearest even) equals rounding
    the exact value directly: the odd last bit stands in for everything below it, so no double rounding."""
    bits = nearest.view(np.int64)
    inexact = residual_sign != 0
    odd = (bits & 1) == 1
    step = np.nextafter(nearest, np.where(residual_sign > 0, np.inf, -np.inf))
    return np.where(inexact & ~odd, step, nearest)


def _round_to_odd_f32(values):
    """Round-to-odd of float64 values into float32 (the same trick, one level down: for bfloat16, whose
    conversion from float64 in ml_dtypes goes through float32 with a double rounding)."""
    f = values.astype(np.float32)
    back = f.astype(np.float64)
    too_far = np.abs(back) > np.abs(values)
    f = np.where(too_far, np.nextafter(f, np.float32(0)), f)  # truncate toward zero
    inexact = f.astype(np.float64) != values
    bits = f.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def correctly_rounded_sum(inputs, dtype, divisor=1):
    """sum(inputs) / divisor, element-wise, computed exactly and rounded once to nearest-even in dtype.
    inputs: one array per rank. The exact sum is math.fsum's (correctly rounded to float64) plus the sign of
    what fsum left out; divisor must be a power of two (exact division) or 1."""
    dt = float_dtype(dtype)
    if divisor < 1 or divisor & (divisor - 1):
        raise ValueError(f"divisor must be a power of two, got {divisor!r}")
    columns = np.stack([np.asarray(x, dtype=dt).astype(np.float64) for x in inputs]).T.tolist()
    nearest = np.array([math.fsum(col) for col in columns], dtype=np.float64)
    residual = np.array([math.fsum(col + [-s]) for col, s in zip(columns, nearest.tolist())], dtype=np.float64)
    odd = _round_to_odd_f64(nearest, np.sign(residual)) / divisor
    if dt.name == "float64":
        return nearest / divisor  # fsum is already the correctly rounded float64; /2^k is exact
    if dt.name == "bfloat16":
        return _round_to_odd_f32(odd).astype(dt)
    return odd.astype(dt)


def _ordinals(x):
    """Each float's position on the number line of its format, as int64 (consecutive floats differ by 1)."""
    dt = np.dtype(x.dtype)
    width = _FORMATS[float_dtype(dt).name][1]
    signed = x.view(_INT[width]).astype(np.int64)
    magnitude = x.view(_UINT[width]).astype(np.uint64) & np.uint64((1 << (width - 1)) - 1)
    return np.where(signed < 0, -magnitude.astype(np.int64), magnitude.astype(np.int64))


def ulp_distance(result, reference):
    """Element-wise count of representable values between result and reference (same float dtype): 0 when
    equal, 1 for neighbours. +0 and -0 are 0 apart; a NaN on one side only is inf. Returns float64."""
    result, reference = np.asarray(result), np.asarray(reference)
    if result.dtype != reference.dtype:
        raise ValueError(f"result: dtype {result.dtype} differs from the reference's {reference.dtype}")
    a, b = _ordinals(result), _ordinals(reference)
    same_side = (a >= 0) == (b >= 0)
    with np.errstate(over="ignore"):
        near = np.abs(a - b).astype(np.float64)  # exact: no overflow when both have one sign
    far = np.abs(a.astype(np.float64)) + np.abs(b.astype(np.float64))
    dist = np.where(same_side, near, far)
    nan_a, nan_b = np.isnan(result.astype(np.float64)), np.isnan(reference.astype(np.float64))
    return np.where(nan_a & nan_b, 0.0, np.where(nan_a | nan_b, np.inf, dist))


def _block_starts(count, size):
    """Where each rank's block starts in the algorithms' split of count elements (schedule.h split_evenly)."""
    base, extra = divmod(count, size)
    return np.array([b * base + min(b, extra) for b in range(size + 1)])


def make_inputs(dataset, size, count, dtype, seed=0):
    """One array of count elements per rank (size ranks) of a data set (module doc), in dtype."""
    dt = float_dtype(dtype)
    rng = np.random.default_rng([seed, size, count, sorted(_FORMATS).index(dt.name)])
    if dataset == "gaussian":
        values = rng.standard_normal((size, count))
    elif dataset == "mixed":
        low, high = (-2, 2) if dt.name == "float16" else (-8, 8)
        values = rng.choice([-1.0, 1.0], (size, count)) * 10.0 ** rng.uniform(low, high, (size, count))
        rows = [row.astype(dt) for row in values]
        cancel = rng.random(count) < 0.5
        width = _FORMATS[dt.name][1]
        for r in range(0, size - 1, 2):
            d = rng.choice([-1.0, 1.0], count) * 10.0 ** rng.uniform(-4, -2, count)
            near = (-rows[r].astype(np.float64) * (1 + d)).astype(dt)
            # A 16-bit format can round the pair to an exact negation; keep it one ulp off, so "near" holds.
            exact = near == -rows[r]
            near.view(_UINT[width])[exact] += 1
            rows[r + 1] = np.where(cancel, near, rows[r + 1])
        return rows
    elif dataset == "crafted":
        values = np.ones((size, count))
        starts = _block_starts(count, size)
        for b in range(size):
            values[(b + 1) % size, starts[b]:starts[b + 1]] = 2.0 ** _FORMATS[dt.name][0]
    else:
        raise ValueError(f"dataset: unknown {dataset!r}; choose one of {', '.join(DATASETS)}")
    return [row.astype(dt) for row in values]


def reduction_error(outputs, inputs, dtype):
    """(max ulps, mean ulps, identical) of each rank's all-reduce output against the correctly rounded sum."""
    reference = correctly_rounded_sum(inputs, dtype)
    dist = ulp_distance(np.asarray(outputs[0]), reference)
    first = np.asarray(outputs[0]).tobytes()
    identical = all(np.asarray(out).tobytes() == first for out in outputs)
    return float(dist.max(initial=0.0)), float(dist.mean()) if dist.size else 0.0, identical


def reproducible_bits(world_sizes, dtypes=FLOAT_DTYPES, datasets=("gaussian", "mixed"), count=1024, seed=0,
                      contributions=2):
    """Whether accuracy="reproducible" gives the same bytes in every configuration: `contributions` arrays of a
    data set spread over each simulated world size in a seeded order (the other ranks contributing zeros), by
    every algorithm (hierarchical over two-rank hosts). One row per (dtype, data): {dtype, data, configs,
    same_bits, max_ulp} (the error of those bits against the correctly rounded sum)."""
    rows = []
    for dtype in dtypes:
        for dataset in datasets:
            base = make_inputs(dataset, contributions, count, dtype, seed=seed)
            first = None
            configs, same = 0, True
            for size in sorted(n for n in world_sizes if n >= contributions):
                inputs = _placed(base, size, seed, contributions)
                for algorithm in ALGORITHMS:
                    hosts = [r // 2 for r in range(size)] if algorithm == "hierarchical" else None
                    out = simulate("all_reduce", inputs, algorithm=algorithm, accuracy="reproducible",
                                   hosts=hosts)
                    if first is None:
                        first = out[0]
                    configs += 1
                    same &= all(o.tobytes() == first.tobytes() for o in out)
            max_ulp = float(ulp_distance(first, correctly_rounded_sum(base, dtype)).max(initial=0.0))
            rows.append({"dtype": dtype, "data": dataset, "configs": configs, "same_bits": bool(same),
                         "max_ulp": max_ulp})
    return rows


def _placed(base, size, seed, contributions):
    """The inputs of a world of `size` ranks: the contributions and zeros, in an order seeded by the size."""
    order = np.random.default_rng([seed, size]).permutation(size)
    ranks = base + [np.zeros_like(base[0])] * (size - contributions)
    return [ranks[i] for i in order]


def reproducible_bits_processes(world_sizes, backends=("tcp", "shm"), dtypes=FLOAT_DTYPES,
                                datasets=("gaussian", "mixed"), count=1024, seed=0, contributions=2,
                                timeout=300.0):
    """reproducible_bits over real rank processes: the same placed contributions, one job per world size and
    backend, by every algorithm (over shm the transport's own too). One row per (dtype, data): {dtype, data,
    configs, same_bits} -- same_bits: every rank of every run has the simulator's bytes (ring, world size
    `contributions`)."""
    reference = {}
    for dtype in dtypes:
        for dataset in datasets:
            base = make_inputs(dataset, contributions, count, dtype, seed=seed)
            out = simulate("all_reduce", base, algorithm="ring", accuracy="reproducible")[0]
            reference[dtype, dataset] = hashlib.sha256(out.tobytes()).hexdigest()
    runs = []
    for backend in backends:
        for size in sorted(n for n in world_sizes if n >= contributions):
            plan = {"kind": "bits", "dtypes": list(dtypes), "datasets": list(datasets), "count": count,
                    "seed": seed, "contributions": contributions, "timeout": timeout}
            runs += _run_processes(size, plan, backend, timeout)
    rows = []
    for dtype in dtypes:
        for dataset in datasets:
            mine = [r for r in runs if (r["dtype"], r["data"]) == (dtype, dataset)]
            rows.append({"dtype": dtype, "data": dataset, "configs": len(mine),
                         "same_bits": all(set(r["digests"]) == {reference[dtype, dataset]} for r in mine)})
    return rows


def _row(transport, size, algorithm, accuracy, dtype, dataset, count, error):
    max_ulp, mean_ulp, identical = error
    return {"transport": transport, "world": size, "algorithm": algorithm, "accuracy": accuracy,
            "dtype": dtype, "data": dataset, "count": count, "max_ulp": max_ulp, "mean_ulp": mean_ulp,
            "identical": identical}


def run_accuracy_report(world_sizes, algorithms=ALGORITHMS, dtypes=FLOAT_DTYPES, accuracies=ACCURACIES,
                        datasets=DATASETS, count=4096, seed=0, processes=False, timeout=300.0):
    """Rows of {transport, world, algorithm, accuracy, dtype, data, count, max_ulp, mean_ulp, identical}, one
    per combination. processes=False drives the C schedules over simulated ranks in this process; True starts
    world-size real rank processes over TCP loopback for each world size (pycoll run's launcher)."""
    for name in dtypes:
        float_dtype(name)
    rows = []
    for size in world_sizes:
        if processes:
            plan = {"kind": "report", "algorithms": list(algorithms), "dtypes": list(dtypes),
                    "accuracies": list(accuracies), "datasets": list(datasets), "count": count, "seed": seed,
                    "timeout": timeout}
            rows += _run_processes(size, plan, "tcp", timeout)
            continue
        for dtype in dtypes:
            for dataset in datasets:
                inputs = make_inputs(dataset, size, count, dtype, seed)
                for algorithm in algorithms:
                    for accuracy in accuracies:
                        outs = simulate("all_reduce", inputs, algorithm=algorithm, accuracy=accuracy,
                                        timeout=timeout)
                        rows.append(_row("sim", size, algorithm, accuracy, dtype, dataset, count,
                                         reduction_error(outs, inputs, dtype)))
    return rows


def _run_processes(size, plan, backend, timeout):
    """Rank 0's rows of one job of `size` real rank processes over `backend` running _rank_main(plan)."""
    import json
    import os
    import tempfile

    from pycoll.launcher import launch

    with tempfile.TemporaryDirectory(prefix="pycoll-accuracy-") as tmp:
        out = os.path.join(tmp, "rows.json")
        plan = dict(plan, out=out, backend=backend)
        # The ranks import the installed pycoll: -c would put the current directory (maybe a source checkout,
        # without the built extensions) first on sys.path, so it comes off before the import.
        program = ("import os, sys\n"
                   "if sys.path and sys.path[0] in ('', os.getcwd()): del sys.path[0]\n"
                   "from pycoll.tools.accuracy import _rank_main\n"
                   "_rank_main(__import__('json').loads(sys.argv[1]))\n")
        code = launch([sys.executable, "-c", program, json.dumps(plan)], size, backend=backend, timeout=timeout)
        if code != 0 or not os.path.exists(out):
            raise RuntimeError(f"accuracy report: the {size}-rank job over {backend} exited with {code}")
        with open(out) as f:
            return json.load(f)


def _gathered(comm, raw):
    """Every rank's bytes `raw` (the same length everywhere), gathered."""
    gathered = np.empty(raw.size * comm.size, dtype=np.uint8)
    comm.all_gather(raw, gathered)
    return np.split(gathered, comm.size)


def _report_rows(comm, plan):
    rows = []
    for dtype in plan["dtypes"]:
        for dataset in plan["datasets"]:
            inputs = make_inputs(dataset, comm.size, plan["count"], dtype, plan["seed"])
            for algorithm in plan["algorithms"]:
                for accuracy in plan["accuracies"]:
                    x = inputs[comm.rank].copy()
                    comm.all_reduce(x, algorithm=algorithm, accuracy=accuracy)
                    outs = [part.view(x.dtype) for part in _gathered(comm, x.view(np.uint8))]
                    rows.append(_row(plan["backend"], comm.size, algorithm, accuracy, dtype, dataset,
                                     plan["count"], reduction_error(outs, inputs, dtype)))
    return rows


def _bits_rows(comm, plan):
    algorithms = list(ALGORITHMS) + (list(NATIVE_ONLY) if plan["backend"] == "shm" else [])
    rows = []
    for dtype in plan["dtypes"]:
        for dataset in plan["datasets"]:
            base = make_inputs(dataset, plan["contributions"], plan["count"], dtype, seed=plan["seed"])
            x = _placed(base, comm.size, plan["seed"], plan["contributions"])[comm.rank]
            for algorithm in algorithms:
                out = np.empty_like(x)
                comm.all_reduce(x, out=out, algorithm=algorithm, accuracy="reproducible")
                digest = np.frombuffer(hashlib.sha256(out.tobytes()).digest(), dtype=np.uint8)
                rows.append({"dtype": dtype, "data": dataset, "world": comm.size, "backend": plan["backend"],
                             "algorithm": algorithm,
                             "digests": [part.tobytes().hex() for part in _gathered(comm, digest)]})
    return rows


def _rank_main(plan):
    """One rank of a real-process job: the report's combinations (plan["kind"] "report") or reproducible's
    placed contributions ("bits"); rank 0 gathers the results and writes its rows to plan["out"]."""
    import json

    import pycoll

    with pycoll.init(timeout=plan["timeout"]) as comm:
        rows = (_report_rows if plan["kind"] == "report" else _bits_rows)(comm, plan)
        if comm.rank == 0:
            with open(plan["out"], "w") as f:
                json.dump(rows, f)


def format_table(rows):
    """A Markdown table of report rows, one line per row."""
    head = ("transport", "world", "algorithm", "accuracy", "dtype", "data", "count", "max ulp", "mean ulp",
            "identical")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (r["transport"], r["world"], r["algorithm"], r["accuracy"], r["dtype"], r["data"], r["count"],
                 f"{r['max_ulp']:g}", f"{r['mean_ulp']:.3g}", "yes" if r["identical"] else "NO")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"

