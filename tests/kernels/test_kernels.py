"""pycoll.kernels against numpy (ml_dtypes for bfloat16), bit for bit, on the SIMD variant in use.
test_kernels_variants.py reruns this file under every other variant (PYCOLL_SIMD)."""
import os

import ml_dtypes
import numpy as np
import pytest

from pycoll import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
INTS = [np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.int64)]
DTYPES = INTS + FLOATS
OPS = ["sum", "prod", "min", "max", "avg"]
NUMPY_OP = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum, "avg": np.add}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def assert_bits_equal(got, want):
    """Bit-exact equality; NaNs only need to be NaN in both (payloads are not part of the contract)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype in FLOATS:
        with np.errstate(invalid="ignore"):
            got_nan = np.isnan(got.astype(np.float64))
            want_nan = np.isnan(want.astype(np.float64))
        np.testing.assert_array_equal(got_nan, want_nan)
        got, want = got[~got_nan], want[~want_nan]
    bits = UINT[got.dtype.itemsize]
    mismatch = np.flatnonzero(got.view(bits) != want.view(bits))
    assert mismatch.size == 0, \
        f"{mismatch.size} mismatches, first at {mismatch[0]}: {got[mismatch[0]]!r} != {want[mismatch[0]]!r}"


def random_values(rng, dtype, n):
    if dtype in INTS:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
    values = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)
    if n >= 8:  # a sprinkle of specials where there is room
        values[rng.integers(0, n, 4)] = [np.nan, np.inf, -np.inf, -0.0]
    return values.astype(dtype)


def misaligned(values, offset):
    """A copy of values living `offset` bytes past an aligned start."""
    raw = np.zeros(values.nbytes + 16, np.uint8)
    view = raw[offset:offset + values.nbytes].view(values.dtype)
    view[...] = values
    return view


def test_variant_is_the_one_asked_for():
    forced = os.environ.get("PYCOLL_SIMD")
    assert kernels.simd_name() in ("scalar", "avx2", "avx512")
    if forced:
        assert kernels.simd_name() == forced


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [0, 1, 7, 1023])
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_reduce_into_matches_numpy(dtype, op, n, offset):
    rng = np.random.default_rng([n, offset, DTYPES.index(dtype), OPS.index(op)])
    a, b = random_values(rng, dtype, n), random_values(rng, dtype, n)
    with np.errstate(all="ignore"):
        want = NUMPY_OP[op](a, b)
    dst, src = misaligned(a, offset), misaligned(b, 3 - offset)
    assert kernels.reduce_into(dst, src, op) is dst
    assert_bits_equal(dst, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["sum", "prod", "max"])
def test_large_misaligned(dtype, op):
    n = 1_000_003
    rng = np.random.default_rng(n)
    a, b = random_values(rng, dtype, n), random_values(rng, dtype, n)
    with np.errstate(all="ignore"):
        want = NUMPY_OP[op](a, b)
    got = kernels.reduce(misaligned(a, 1), misaligned(b, 2), op)
    assert_bits_equal(got, want)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_every_16_bit_pattern(dtype, op):
    """All 65536 encodings (subnormals, infinities, NaNs) against shuffled partners: the rounding and the
    NaN and signed-zero rules of numpy / ml_dtypes."""
    a = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    for seed in range(3):
        b = np.random.default_rng(seed).permutation(a)
        with np.errstate(all="ignore"):
            want = NUMPY_OP[op](a, b)
        assert_bits_equal(kernels.reduce(a, b, op), want)


SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.5, 5e-324, 1e-45, 6e-8, 1e300, 65504.0]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_special_values(dtype, op):
    with np.errstate(all="ignore"):
        s = np.array(SPECIALS).astype(dtype)
        a, b = np.repeat(s, len(s)), np.tile(s, len(s))  # every ordered pair
        want = NUMPY_OP[op](a, b)
    got = kernels.reduce(a, b, op)
    assert_bits_equal(got, want)
    either_nan = np.isnan(a.astype(np.float64)) | np.isnan(b.astype(np.float64))
    assert either_nan.any() and np.isnan(got[either_nan].astype(np.float64)).all()


def test_integer_wraparound():
    a = np.array([127, -128, 100], np.int8)
    kernels.reduce_into(a, np.array([1, -1, 100], np.int8), "sum")
    assert a.tolist() == [-128, 127, -56]
    big = np.array([2**63 - 1, -2**63], np.int64)
    kernels.reduce_into(big, np.array([2, -1], np.int64), "sum")
    assert big.tolist() == [-2**63 + 1, 2**63 - 1]
    u = np.array([200], np.uint8)
    kernels.reduce_into(u, np.array([100], np.uint8), "prod")
    assert u.tolist() == [(200 * 100) % 256]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("divisor", [1, 3, 8])
def test_scale_avg(dtype, divisor):
    a = random_values(np.random.default_rng(divisor), dtype, 1029)
    if dtype in INTS:
        wide = a.astype(np.int64)
        q = wide // divisor
        want = (q + ((wide % divisor != 0) & (wide < 0))).astype(dtype)  # truncate toward zero
    elif dtype.itemsize == 2:
        want = (a.astype(np.float32) / np.float32(divisor)).astype(dtype)
    else:
        want = a / dtype.type(divisor)
    assert_bits_equal(kernels.scale_avg(a, divisor), want)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=str)
def test_store_rounds_float32_like_numpy(dtype):
    """compensated_store of (x, 0) is the portable float32 -> 16-bit rounding: random bit patterns of every
    exponent, against numpy's / ml_dtypes' own conversion."""
    x = np.random.default_rng(7).integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    got = kernels.compensated_store(np.empty(x.size, dtype), x, np.zeros_like(x))
    with np.errstate(all="ignore"):
        assert_bits_equal(got, x.astype(dtype))


def test_reduce_out_of_place_leaves_inputs():
    a, b = np.arange(10.0), np.ones(10)
    out = kernels.reduce(a, b, "sum")
    assert out.tolist() == list(np.arange(10.0) + 1) and a.tolist() == list(np.arange(10.0))
    kernels.reduce(a, b, "max", out=b)
    assert b.tolist() == list(np.maximum(np.arange(10.0), 1))


def test_any_buffer_object():
    dst = bytearray([1, 2, 250])
    kernels.reduce_into(dst, bytes([1, 1, 10]), "sum")
    assert list(dst) == [2, 3, 4]
