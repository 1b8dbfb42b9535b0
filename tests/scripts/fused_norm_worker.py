"""One rank of tests/kernels/test_fused_norm.py: `python fused_norm_worker.py SCENARIO` under RANK/WORLD_SIZE/MASTER_*
env. Prints one JSON line {"rank", "ok", "error", "message", ...}; the test reads it.

correct   every norm x dtype x row count (0, fewer than the ranks, even, uneven) x residual on/off x out given
          or not against a float64 reference built from every rank's inputs; reports each case's largest error
          relative to the reference's largest magnitude, and a digest of each output (compared across ranks);
          the sequence-parallel variants must equal this rank's rows of the all-gathered result bit for bit.
errors    every bad argument raises its typed error naming the argument, and the communicator still works.
mismatch  rank 1 passes x transposed (the same element counts per rank): every rank raises MismatchError.
"""

import hashlib
import os
import sys
import time

import numpy as np
from worker_report import close_and_print, expect, failure_reported, refusal

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
report = {"scenario": scenario}
t0 = time.monotonic()
comm = None
DTYPES = ("float16", "bfloat16", "float32", "float64")


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def inputs(rank, rows, hidden, dtype, salt):
    """Rank `rank`'s x, and the shared weight, bias and residual (the same on every rank)."""
    rng = np.random.default_rng([rank, rows, hidden, salt])
    shared = np.random.default_rng([rows, hidden, salt, 99])
    # An offset mean makes a one-pass variance lose digits; the two-pass kernel must not.
    x = (3.0 + rng.standard_normal((rows, hidden))).astype(dtype)
    weight = (1.0 + 0.1 * shared.standard_normal(hidden)).astype(dtype)
    bias = (0.1 * shared.standard_normal(hidden)).astype(dtype)
    residual = shared.standard_normal((rows, hidden)).astype(dtype)
    return x, weight, bias, residual


def reference(kind, size, rows, hidden, dtype, salt, eps, with_residual):
    xs = [inputs(r, rows, hidden, dtype, salt) for r in range(size)]
    v = sum(x.astype(np.float64) for x, _, _, _ in xs)
    _, weight, bias, residual = xs[0]
    if with_residual:
        v = v + residual.astype(np.float64)
    if kind == "layernorm":
        v = v - v.mean(axis=1, keepdims=True)
    scale = 1.0 / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps)
    y = v * scale * weight.astype(np.float64)
    return y + bias.astype(np.float64) if kind == "layernorm" else y


def fused(comm, kind, x, weight, bias, gather, **kw):
    name = f"{'all_reduce' if gather else 'reduce_scatter'}_{kind}"
    args = (x, weight, bias) if kind == "layernorm" else (x, weight)
    return getattr(comm, name)(*args, **kw)


def check_correct(comm):
    rank, size = comm.rank, comm.size
    errors, digests = {}, {}
    case = 0
    for kind in ("layernorm", "rmsnorm"):
        eps = 1e-5 if kind == "layernorm" else 1e-6
        for name in DTYPES:
            dtype = np_dtype(name)
            for rows in (0, size - 1, 3 * size, 3 * size + 1):
                for hidden in (40, 64):
                    for with_residual in (False, True):
                        case += 1
                        x, weight, bias, residual = inputs(rank, rows, hidden, dtype, case)
                        res = residual if with_residual else None
                        given = case % 2 == 0
                        out = np.full((rows, hidden), np.nan, dtype) if given else None
                        y = fused(comm, kind, x, weight, bias, True, out=out, residual=res)
                        assert not given or y is out
                        assert y.shape == (rows, hidden) and y.dtype == dtype
                        key = f"{kind}/{name}/{rows}x{hidden}/res={int(with_residual)}"
                        digests[key] = hashlib.sha256(y.tobytes()).hexdigest()
                        ref = reference(kind, size, rows, hidden, dtype, case, eps, with_residual)
                        scale = float(np.abs(ref).max()) if ref.size else 1.0
                        errors[key] = float(np.abs(y.astype(np.float64) - ref).max() / scale) if ref.size else 0.0
                        # The sequence-parallel variant: this rank's rows, bit for bit the same.
                        first = rank * (rows // size) + min(rank, rows % size)
                        mine = rows // size + (rank < rows % size)
                        part_res = None if res is None else np.ascontiguousarray(res[first:first + mine])
                        part = fused(comm, kind, x, weight, bias, False, residual=part_res)
                        assert part.shape == (mine, hidden), (key, part.shape)
                        assert part.tobytes() == y[first:first + mine].tobytes(), ("sequence parallel", key)
    # Compensated accumulation of the sum, an explicit algorithm on even rows, the ring on uneven ones.
    x, weight, bias, residual = inputs(rank, 2 * size, 48, np.float32, 7)
    ref = reference("layernorm", size, 2 * size, 48, np.float32, 7, 1e-5, True)
    for algorithm in ("ring", "halving_doubling", "mesh"):
        for accuracy in ("fast", "compensated"):
            y = comm.all_reduce_layernorm(x, weight, bias, residual=residual, algorithm=algorithm,
                                          accuracy=accuracy)
            errors[f"layernorm/float32/{algorithm}/{accuracy}"] = float(np.abs(y - ref).max() / np.abs(ref).max())
            digests[f"layernorm/float32/{algorithm}/{accuracy}"] = hashlib.sha256(y.tobytes()).hexdigest()
    return errors, digests


def check_errors(comm):
    f32 = np.float32
    x, w, b = np.ones((4, 8), f32), np.ones(8, f32), np.zeros(8, f32)
    ln, rms = comm.all_reduce_layernorm, comm.all_reduce_rmsnorm
    expect(ValueError, ["x", "2-D"], lambda: ln(np.ones(8, f32), w, b))
    expect(ValueError, ["x", "2-D"], lambda: rms(np.ones((2, 2, 2), f32), w))
    expect(TypeError, ["x", "int32"], lambda: ln(np.ones((4, 8), np.int32), w, b))
    expect(ValueError, ["weight", "(8,)"], lambda: ln(x, np.ones(7, f32), b))
    expect(ValueError, ["bias", "(8,)"], lambda: ln(x, w, np.ones(9, f32)))
    expect(TypeError, ["weight", "float64"], lambda: rms(x, np.ones(8, np.float64)))
    expect(TypeError, ["bias", "float16"], lambda: ln(x, w, np.ones(8, np.float16)))
    expect(ValueError, ["residual", "(4, 8)"], lambda: ln(x, w, b, residual=np.ones((4, 7), f32)))
    expect(TypeError, ["residual", "float64"], lambda: rms(x, w, residual=np.ones((4, 8), np.float64)))
    expect(ValueError, ["out", "(4, 8)"], lambda: ln(x, w, b, out=np.ones((8, 4), f32)))
    expect(TypeError, ["out", "float64"], lambda: ln(x, w, b, out=np.ones((4, 8), np.float64)))
    expect(ValueError, ["out", "overlaps", "x"], lambda: ln(x, w, b, out=x))
    expect(ValueError, ["out", "C-contiguous"], lambda: ln(x, w, b, out=np.ones((8, 8), f32)[:, :4].T))
    expect(ValueError, ["eps"], lambda: ln(x, w, b, eps=-1.0))
    expect(TypeError, ["eps"], lambda: rms(x, w, eps="small"))
    expect(ValueError, ["algorithm", "ring"],
           lambda: ln(np.ones((comm.size + 1, 8), f32), w, b, algorithm="halving_doubling"))
    rows = comm.size + 1  # the sequence-parallel out and residual have this rank's rows
    mine = rows // comm.size + (comm.rank < rows % comm.size)
    expect(ValueError, ["out", f"({mine}, 8)"],
           lambda: comm.reduce_scatter_layernorm(np.ones((rows, 8), f32), w, b, out=np.ones((rows, 8), f32)))
    expect(ValueError, ["residual", f"({mine}, 8)"],
           lambda: comm.reduce_scatter_rmsnorm(np.ones((rows, 8), f32), w, residual=np.ones((rows, 8), f32)))
    # Nothing was sent: the communicator still works.
    y = ln(x, w, b)
    assert np.array_equal(y, np.zeros((4, 8), f32)), y
    return True


with failure_reported(report):
    comm = pycoll.init(timeout=timeout)
    rank = comm.rank
    report["rank"] = rank
    report["backend"] = comm.backend
    if scenario == "correct":
        report["errors"], report["digests"] = check_correct(comm)
        report["ok"] = True
    elif scenario == "errors":
        report["ok"] = check_errors(comm)
    elif scenario == "mismatch":
        size = comm.size
        shape = (2 * size, 3 * size) if rank != 1 else (3 * size, 2 * size)
        x = np.ones(shape, np.float32)
        with refusal(report):
            comm.all_reduce_rmsnorm(x, np.ones(shape[1], np.float32))
            comm.barrier()
    else:
        raise SystemExit(f"unknown scenario {scenario}")
close_and_print(report, comm, t0)
