"""Compensated (sum, comp) kernels: exact against fractions on ill-conditioned data, in any combine order."""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from pycoll import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def correctly_rounded(exact, dtype):
    """The dtype value nearest to a Fraction (ties to even), by checking the neighbours of a near guess."""
    guess = np.array([float(exact)], np.float64).astype(np.float32).astype(dtype)
    bits = guess.view(UINT[dtype.itemsize])
    candidates = []
    for step in (-1, 0, 1):
        value = (bits + bits.dtype.type(step) if step >= 0 else bits - bits.dtype.type(1)).view(dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            if np.isfinite(value.astype(np.float64))[0]:
                candidates.append(value)
    def distance(v):
        return (abs(Fraction(float(v.astype(np.float64)[0])) - exact), int(v.view(UINT[dtype.itemsize])[0]) & 1)
    return min(candidates, key=distance)[0]


def ill_conditioned_partials(rng, ranks, n, lo, hi):
    """ranks x n partials of magnitudes 10**lo..10**hi, random signs, where the largest half cancel
    exactly between ranks: the exact sums are far smaller than the partials."""
    half = ranks // 2
    mags = 10.0 ** rng.uniform(lo, hi, (half, n))
    big = mags * rng.choice([-1.0, 1.0], (half, n))
    small = 10.0 ** rng.uniform(lo, 0, (ranks - half - half // 2, n)) * rng.choice([-1.0, 1.0], (1, n))
    rows = np.concatenate([big, -big[: half // 2], small])
    return rng.permuted(rows, axis=0)


def combine_all(partials, order):
    pairs = [kernels.compensated_load(p) for p in partials]
    if order == "sequential":
        acc = pairs[0]
        for s, c in pairs[1:]:
            kernels.compensated_combine(acc[0], acc[1], s, c)
        return acc
    while len(pairs) > 1:  # a tree, as a recursive-halving all-reduce combines
        nxt = []
        for i in range(0, len(pairs) - 1, 2):
            kernels.compensated_combine(pairs[i][0], pairs[i][1], pairs[i + 1][0], pairs[i + 1][1])
            nxt.append(pairs[i])
        if len(pairs) % 2:
            nxt.append(pairs[-1])
        pairs = nxt
    return pairs[0]


@pytest.mark.parametrize("order", ["sequential", "tree"])
def test_float64_equals_fsum(order):
    rng = np.random.default_rng(1)
    partials = ill_conditioned_partials(rng, 64, 2000, -8, 8)
    s, c = combine_all(list(partials), order)
    got = kernels.compensated_store(np.empty(partials.shape[1]), s, c)
    want = np.array([math.fsum(col) for col in partials.T])
    np.testing.assert_array_equal(got, want)
    naive = partials.sum(axis=0)  # the plain sum loses it: this test can fail
    assert (naive != want).mean() > 0.5


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("divisor", [1, 3])
def test_narrow_floats_equal_correctly_rounded_sum(dtype, divisor):
    rng = np.random.default_rng(2)
    partials = ill_conditioned_partials(rng, 32, 300, -3, 3).astype(dtype)
    s, c = combine_all(list(partials), "tree")
    got = kernels.compensated_store(np.empty(partials.shape[1], dtype), s, c, divisor)
    exact = [sum(map(Fraction, col.astype(np.float64))) / divisor for col in partials.T]
    want = np.array([correctly_rounded(e, dtype) for e in exact], dtype)
    np.testing.assert_array_equal(got.view(UINT[dtype.itemsize]), want.view(UINT[dtype.itemsize]))


def test_float64_average_is_correctly_rounded():
    rng = np.random.default_rng(3)
    partials = ill_conditioned_partials(rng, 16, 500, -8, 8)
    s, c = combine_all(list(partials), "sequential")
    got = kernels.compensated_store(np.empty(partials.shape[1]), s, c, 7)
    want = np.array([float(sum(map(Fraction, col)) / 7) for col in partials.T])
    np.testing.assert_array_equal(got, want)


finite64 = hnp.arrays(np.float64, 16, elements=st.floats(-1e300, 1e300, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(finite64, finite64)
def test_combining_two_loaded_values_is_exact(a, b):
    """TwoSum is error-free: the pair from two plain values holds their exact sum."""
    s, c = kernels.compensated_load(a)
    kernels.compensated_combine(s, c, *kernels.compensated_load(b))
    for i in range(a.size):
        assert Fraction(s[i]) + Fraction(c[i]) == Fraction(a[i]) + Fraction(b[i])
        assert abs(c[i]) <= abs(s[i]) * 2.0**-53  # renormalised: comp is below half an ulp of sum


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 70)), st.data())
def test_float32_sum_matches_numpy(a, data):
    b = data.draw(hnp.arrays(np.float32, a.size))
    with np.errstate(all="ignore"):
        want = a + b
    got = kernels.reduce(a, b, "sum")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


@pytest.mark.parametrize("dtype, tiny", [(np.float64, 2.0 ** -60), (np.float32, 2.0 ** -30)])
def test_the_compiler_kept_twosums_error_term(dtype, tiny):
    """1 + tiny combined keeps tiny as the error term: lost under -ffast-math, FMA contraction or reassociation.
    67 elements: the vector body and the tail of every variant (test_kernels_variants.py reruns this under each)."""
    s, c = np.ones(67, dtype), np.zeros(67, dtype)
    kernels.compensated_combine(s, c, np.full(67, tiny, dtype), np.zeros(67, dtype))
    assert (s == 1).all() and (c == dtype(tiny)).all(), (s, c)
