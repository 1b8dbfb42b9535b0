"""Correctness of a benchmarked collective, checked once per case outside the timed loop.

#wrong: every rank's input holds small integers chosen so that the reduction is exact in every dtype (no
overflow, no rounding), so any element that differs from the expected value is a bug, not arithmetic.

max_rel_err: every rank's input is random, drawn from (seed, rank); rank 0 regenerates all of them and
compares its result with a reference computed in long double. The random values are k * 2**(e - p) with
|k| < 2**p (p = the dtype's fraction bits) and e in [-EXPONENT_SPREAD, 0]: exact in the dtype, mixed in sign
and magnitude (so sums round and cancel as real data does), and their sum is exact in long double (x86's
64-bit significand holds p + EXPONENT_SPREAD + log2(world) bits; for float64 up to 32 ranks). The error
measured is the library's rounding alone.
"""

from __future__ import annotations

import numpy as np

from pycoll.tools.accuracy import PRECISION_BITS
from pycoll.tools.bench.sweep import numpy_dtype

FRACTION_BITS = {name: bits - 1 for name, bits in PRECISION_BITS.items()}  # the stored bits, without the hidden one
EXPONENT_SPREAD = {"float16": 8, "bfloat16": 8, "float32": 8, "float64": 6}


def is_float(dtype: str) -> bool:
    return dtype in FRACTION_BITS


def input_count(collective: str, count: int, world: int) -> int:
    """Elements of each rank's input buffer; `count` is the size-defining buffer (sweep.count_for)."""
    return count // world if collective == "all_gather" else count


def output_count(collective: str, count: int, world: int) -> int:
    return count // world if collective == "reduce_scatter" else count


def integer_input(op: str, dtype: str, count: int, rank: int, world: int) -> np.ndarray:
    """Small integers whose reduction over `world` ranks is exact in `dtype`."""
    i = np.arange(count, dtype=np.int64)
    if op == "prod":
        # One rank contributes 2, the rest 1 (and rank 0 flips the sign of every other block): the product
        # is +-2 whatever the world size, never overflowing int8.
        v = np.where(i % world == rank, 2, 1)
        if rank == 0 and dtype != "uint8":
            v = np.where((i // world) % 2 == 1, -v, v)
    elif op == "avg":
        # c_i plus a term that sums to zero over the ranks: the sum is world * c_i, the average exactly c_i,
        # and a rank that returned its own input would be caught.
        v = (i * 3) % 7 - 3
        if world > 1:
            v = v + (i % world == rank) - ((i + 1) % world == rank)
    else:
        # A pattern that varies by rank and element, plus 1 on one rank per element, so that the sum never
        # equals a single rank's input everywhere (a full cycle of residues alone would cancel out).
        v = (i * 3 + rank * 5) % 7 - 3 + (i % world == rank)
    if dtype == "uint8" and op != "prod":
        v = v + 4
    return v.astype(numpy_dtype(dtype))


def random_input(op: str, dtype: str, count: int, rank: int, seed: int) -> np.ndarray:
    """Random values exact in `dtype` (see the module's docstring); in [1, 2) for prod (no underflow)."""
    rng = np.random.default_rng([seed, rank])
    p = FRACTION_BITS[dtype]
    if op == "prod":
        k = rng.integers(0, 1 << p, count, dtype=np.int64)
        return (1.0 + np.ldexp(k.astype(np.float64), -p)).astype(numpy_dtype(dtype))
    k = rng.integers(-(1 << p) + 1, 1 << p, count, dtype=np.int64)
    e = rng.integers(-EXPONENT_SPREAD[dtype], 1, count, dtype=np.int64)
    return np.ldexp(k.astype(np.float64), e - p).astype(numpy_dtype(dtype))


def _widen(a: np.ndarray, exact_type) -> np.ndarray:
    if a.dtype == np.dtype(exact_type):
        return a
    # Through int64/float64, which hold every supported dtype exactly (ml_dtypes' bfloat16 casts to those).
    wide = a.astype(np.int64) if exact_type == np.int64 else a.astype(np.float64)
    return wide.astype(exact_type)


def _reduce(arrays, op: str, world: int, exact_type):
    acc = None
    for a in arrays:
        a = _widen(a, exact_type)
        if acc is None:
            acc = a.copy()  # _widen may return the input itself
        elif op in ("sum", "avg"):
            acc += a
        elif op == "prod":
            acc *= a
        elif op == "min":
            np.minimum(acc, a, out=acc)
        elif op == "max":
            np.maximum(acc, a, out=acc)
        else:
            raise ValueError(f"op: unknown {op!r}")
    if op == "avg":
        acc = acc // world if exact_type == np.int64 else acc / world
    return acc


def reference(collective: str, op: str, input_of, count: int, rank: int, world: int, root: int, exact_type):
    """What `rank` must hold after the collective, in exact_type (int64 or longdouble), or None where the
    collective leaves nothing to check (reduce off the root). input_of(r) regenerates rank r's input."""
    if collective == "broadcast":
        return _widen(input_of(root), exact_type)
    if collective == "all_gather":
        return np.concatenate([_widen(input_of(r), exact_type) for r in range(world)])
    if collective == "all_to_all":  # block r of every rank's input, in rank order
        block = count // world
        return np.concatenate([_widen(input_of(r)[rank * block:(rank + 1) * block], exact_type)
                               for r in range(world)])
    if collective == "reduce" and rank != root:
        return None
    reduced = _reduce((input_of(r) for r in range(world)), op, world, exact_type)
    if collective == "reduce_scatter":
        block = count // world
        return reduced[rank * block:(rank + 1) * block]
    return reduced


def count_wrong(got: np.ndarray, expected_exact: np.ndarray, dtype: str) -> int:
    """Elements of got that differ from the exact expected value (itself exact in dtype by construction)."""
    kind = np.float64 if is_float(dtype) else np.int64
    return int(np.count_nonzero(got.astype(kind) != expected_exact.astype(kind)))


def max_rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / |ref| (absolute error where ref is 0)."""
    if got.size == 0:
        return 0.0
    ref = _widen(ref, np.longdouble)
    err = np.abs(_widen(got, np.longdouble) - ref)
    scale = np.abs(ref)
    rel = np.where(scale > 0, err / np.where(scale > 0, scale, 1), err)
    return float(rel.max())
