"""pycoll.kernels on complex64 and complex128: sum, avg and prod against NumPy bit for bit, compensated sums part
by part, and min and max refused by name. test_kernels_variants.py reruns this file under every SIMD variant
(sum runs the real type's vector kernels on twice the count)."""
import numpy as np
import pytest

from pycoll import kernels

COMPLEX = [np.dtype(np.complex64), np.dtype(np.complex128)]
SIZES = [0, 1, 2, 7, 31, 64, 1000]


def parts(x):
    """The bits of a complex array, (real, imaginary) pairs as unsigned integers: compared bit for bit."""
    return x.view(np.uint32 if x.dtype == np.complex64 else np.uint64)


def assert_bits_equal(got, want):
    mismatch = np.flatnonzero(got != want)
    assert mismatch.size == 0, f"{mismatch.size} mismatched parts, first at {mismatch[0]}"


def shifted(values, offset):
    """A copy of values `offset` bytes past an aligned start (kernels take buffers at any address)."""
    raw = np.zeros(values.nbytes + 16, np.uint8)
    view = raw[offset:offset + values.nbytes].view(values.dtype)
    view[...] = values
    return view


def random_complex(rng, dtype, n):
    part = np.dtype(dtype).char.lower()
    values = rng.standard_normal(2 * n) * 10.0 ** rng.uniform(-3, 3, 2 * n)
    return values.astype(part).view(dtype)


def schoolbook(a, b):
    """(ac - bd) + (ad + bc)i with every product and sum rounded in the part type."""
    out = np.empty_like(a)
    out.real = a.real * b.real - a.imag * b.imag
    out.imag = a.real * b.imag + a.imag * b.real
    return out


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_sum_is_numpys_add(dtype, n):
    rng = np.random.default_rng(n)
    a, b = random_complex(rng, dtype, n), random_complex(rng, dtype, n)
    assert_bits_equal(parts(kernels.reduce(a, b, "sum")), parts(a + b))
    dst = a.copy()
    kernels.reduce_into(dst, b, "avg")  # avg only sums here; the collective divides once at the end
    assert_bits_equal(parts(dst), parts(a + b))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_prod_of_exact_products_is_numpys(dtype, n):
    """Gaussian integers multiply exactly, so NumPy's product (which may fuse a multiply-add) is the same."""
    rng = np.random.default_rng(100 + n)
    a = (rng.integers(-50, 50, n) + 1j * rng.integers(-50, 50, n)).astype(dtype)
    b = (rng.integers(-50, 50, n) + 1j * rng.integers(-50, 50, n)).astype(dtype)
    assert_bits_equal(parts(kernels.reduce(a, b, "prod")), parts(a * b))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_prod_rounds_each_product(dtype):
    rng = np.random.default_rng(7)
    a, b = random_complex(rng, dtype, 999), random_complex(rng, dtype, 999)
    assert_bits_equal(parts(kernels.reduce(a, b, "prod")), parts(schoolbook(a, b)))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("offset", [1, 4, 8])
def test_misaligned_buffers(dtype, offset):
    rng = np.random.default_rng(offset)
    a = shifted(random_complex(rng, dtype, 101), offset)
    b = shifted(random_complex(rng, dtype, 101), offset + 1)
    assert_bits_equal(parts(kernels.reduce(a, b, "sum")), parts(a + b))
    assert_bits_equal(parts(kernels.reduce(a, b, "prod")), parts(schoolbook(a, b)))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("divisor", [1, 3, 4])
def test_scale_avg_divides_both_parts(dtype, divisor):
    rng = np.random.default_rng(divisor)
    x = random_complex(rng, dtype, 257)
    want = x.copy()
    want.real, want.imag = x.real / x.real.dtype.type(divisor), x.imag / x.real.dtype.type(divisor)
    assert_bits_equal(parts(kernels.scale_avg(x, divisor)), parts(want))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_compensated_sum_is_part_by_part(dtype):
    """The pair of a complex array is the real pairs of its parts: 1 + tiny + (-1) keeps tiny in both parts."""
    part = np.dtype(dtype.char.lower())
    tiny = np.finfo(part).eps / 8
    assert kernels.accumulator_dtype(dtype) == dtype
    vals = [np.full(33, complex(v, -v), dtype) for v in (1.0, tiny, -1.0)]
    s, c = kernels.compensated_load(vals[0])
    for v in vals[1:]:
        vs, vc = kernels.compensated_load(v)
        kernels.compensated_combine(s, c, vs, vc)
    out = np.empty(33, dtype)
    kernels.compensated_store(out, s, c)
    assert_bits_equal(parts(out), parts(np.full(33, complex(tiny, -tiny), dtype)))
    kernels.compensated_store(out, s, c, divisor=2)
    assert_bits_equal(parts(out), parts(np.full(33, complex(tiny / 2, -tiny / 2), dtype)))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("op", ["min", "max"])
def test_min_and_max_are_refused_by_name(dtype, op):
    a = np.ones(4, dtype)
    with pytest.raises(TypeError, match=f"op {op} on dtype {dtype.name}"):
        kernels.reduce(a, a, op)
