"""Compensated kernels keep IEEE special values and overflow as fast mode has them: +-inf stays +-inf, NaN stays
NaN, inf - inf is NaN, a finite sum past the largest value is +-inf with its sign, -0.0 + -0.0 is -0.0 -- for
every float dtype, every pair of special values, any number of ranks and any combine order. The compensation
never pulls an overflowed sum back into range, never pushes an in-range one out, and a huge float64 average is
still the correctly rounded mean. (test_kernels_variants.py reruns this module under every SIMD variant.)"""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from float_cases import same, specials, ulp_of_largest
from hypothesis import given, settings, strategies as st

from pycoll import kernels

DTYPES = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64)]
def largest(dtype):
    return ml_dtypes.finfo(dtype).max


def accumulate(arrays, order, combine):
    """Fold arrays with combine(acc, x) -> acc, sequentially or as a tree (a recursive-halving all-reduce's
    order)."""
    items = list(arrays)
    if order == "sequential":
        acc = items[0]
        for x in items[1:]:
            acc = combine(acc, x)
        return acc
    while len(items) > 1:
        items = [combine(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)] + (
            [items[-1]] if len(items) % 2 else [])
    return items[0]


def compensated(arrays, order, divisor=1):
    def combine(acc, x):
        kernels.compensated_combine(acc[0], acc[1], x[0], x[1])
        return acc
    s, c = accumulate([kernels.compensated_load(x) for x in arrays], order, combine)
    assert np.isfinite(c).all(), c  # the compensation of a sum that is not finite is 0, never NaN
    assert (c[~np.isfinite(s)] == 0).all()
    return kernels.compensated_store(np.empty_like(arrays[0]), s, c, divisor)


def fast_in_accumulator(arrays, order, divisor=1):
    """Fast mode's arithmetic in the type compensated sums accumulate in (float32 for the 16-bit floats, as
    their compensated pairs are), in the same order, rounded once to the dtype at the end: for float32 and
    float64 this is fast mode itself."""
    acc = kernels.accumulator_dtype(arrays[0].dtype)
    with np.errstate(all="ignore"):
        total = accumulate([x.astype(acc) for x in arrays], order, lambda a, b: kernels.reduce(a, b, "sum"))
        if divisor > 1:
            kernels.scale_avg(total, divisor)
        return total.astype(arrays[0].dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_pair_of_special_values_sums_as_in_fast_mode(dtype):
    v = specials(dtype)
    a, b = np.repeat(v, v.size), np.tile(v, v.size)  # every ordered pair, through vector bodies and tails
    with np.errstate(all="ignore"):
        fast = kernels.reduce(a, b, "sum")
    for shift in range(3):  # each pair in another lane
        x, y = np.roll(a, shift)[shift:], np.roll(b, shift)[shift:]
        same(compensated([x, y], "sequential"), np.roll(fast, shift)[shift:])
    assert np.isinf(fast[(a == largest(dtype)) & (b == largest(dtype))]).all()  # the overflow is there


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("divisor", [2, 3])
def test_averages_of_special_values_divide_what_the_sum_gives(dtype, divisor):
    """inf / n stays inf, NaN stays NaN, -0.0 / n is -0.0; an average that is finite stays finite."""
    v = specials(dtype)
    a, b = np.repeat(v, v.size), np.tile(v, v.size)
    got = compensated([a, b], "sequential", divisor)
    want = fast_in_accumulator([a, b], "sequential", divisor)
    special = ~np.isfinite(want.astype(np.float64)) | (want.astype(np.float64) == 0)
    same(got[special], want[special])
    assert np.isfinite(got[~special].astype(np.float64)).all()
    if dtype != np.float16:  # the same as fast mode itself (float16's float32 sum does not overflow at 65504)
        with np.errstate(all="ignore"):
            fast = kernels.reduce(a, b, "sum")
            kernels.scale_avg(fast, divisor)
        same(got[special], fast[special])


def pools(dtype):
    """Values whose sums in any order fast mode and compensated summation must agree on: specials with small
    integers (every finite sum exact), and specials with large values of one sign (every finite sum exact,
    two of them overflow)."""
    big = largest(dtype)
    small = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 2.0, -3.0, 0.5]
    huge = [np.inf, -np.inf, np.nan, 0.0, -0.0, float(big), 0.75 * float(big)]
    return [np.array(p, np.float64).astype(dtype) for p in (small, huge, [-x for x in huge])]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(0, 2), st.integers(2, 6), st.integers(1, 40),
       st.sampled_from(["sequential", "tree"]), st.sampled_from([1, 3]), st.data())
def test_any_ranks_and_order_agree_with_fast_mode(dtype, pool, ranks, n, order, divisor, data):
    values = pools(dtype)[pool]
    picks = data.draw(st.lists(st.integers(0, values.size - 1), min_size=ranks * n, max_size=ranks * n))
    arrays = list(values[np.array(picks)].reshape(ranks, n))
    got = compensated(arrays, order, divisor)
    want = fast_in_accumulator(arrays, order, divisor)
    if divisor == 1:
        same(got, want)
    else:  # a finite average may round differently from fast mode's two roundings; specials may not
        special = ~np.isfinite(want.astype(np.float64)) | (want.astype(np.float64) == 0)
        same(got[special], want[special])


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=str)
def test_the_compensation_never_moves_a_sum_across_the_largest_value(dtype):
    """Near the largest value M (ulp u): a sum that overflowed stays +-inf even where its compensation would
    bring the exact value back below (fast mode's inf, not a finite value); an exact sum below the rounding
    threshold M + u/2 stays finite; one at or past it is inf, as IEEE rounding of the exact sum has it."""
    big = largest(dtype)
    u = dtype.type(ulp_of_largest(dtype))

    def run(*seq):
        return compensated([np.array([x], dtype) for x in seq], "sequential")[0]

    with np.errstate(over="ignore"):
        assert run(big, -u / 4, u / 2) == np.inf  # M + u/2 overflowed first; fast: inf as well
        assert run(big, u / 2, -u / 2) == np.inf
        assert run(-big, -u / 2, u / 2) == -np.inf
    assert run(big, u / 4, u / 8) == big  # exactly M + 3u/8: rounds to M
    assert run(-big, -u / 4, -u / 8, u / 8) == -big
    assert run(big, u / 4, u / 4) == np.inf  # exactly M + u/2: the tie rounds to inf
    assert run(big, -big, big) == big
    assert np.isnan(run(big, big, -np.inf))


def test_a_huge_float64_average_is_the_correctly_rounded_mean():
    """Dekker's split of a quotient near the largest value would overflow (NaN): scaled, it is exact."""
    rng = np.random.default_rng(5)
    a = rng.uniform(1e307, 9e307, 64) * rng.choice([-1, 1], 64)
    b = rng.uniform(1e307, 9e307, 64) * np.sign(a)
    small = rng.uniform(-1e292, 1e292, 64)
    for divisor in (2, 3, 7, 100_000_007):  # the last past the masked split's 2^26
        got = compensated([a, b, small], "sequential", divisor)
        want = [float((Fraction(x) + Fraction(y) + Fraction(z)) / divisor) for x, y, z in zip(a, b, small)]
        np.testing.assert_array_equal(got, want)
