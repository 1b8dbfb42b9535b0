"""Element-wise reduction kernels on host arrays: the building blocks of pycoll's collectives.

Arrays are numpy arrays (bfloat16 through ml_dtypes) or anything with the buffer protocol; they are used in
place, never copied, and must be C-contiguous with matching dtype and size. The SIMD variant (AVX-512, AVX2 or
the portable scalar one) is chosen from the CPU at first use; PYCOLL_SIMD=scalar|avx2|avx512 forces one.
"""

import numpy as np

from pycoll._bindings import kernels as _kernels
from pycoll.dtypes import COMPENSATED_DTYPES, DTYPE_INFO, DTYPES, dtype_id, op_id

__all__ = ["reduce_into", "reduce", "scale_avg", "compensated_load", "compensated_combine", "compensated_store",
           "accumulator_dtype", "simd_name"]

# Each compensated dtype's accumulator (the C dtype table's), and the ids of those accumulators.
_ACCUMULATORS = {name: np.dtype(DTYPE_INFO[name].accumulator) for name in COMPENSATED_DTYPES}
_PAIR_IDS = {dtype: DTYPES[dtype.name] for dtype in set(_ACCUMULATORS.values())}


def _array(x, name, writable=False):
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(memoryview(x))
        except TypeError:
            raise TypeError(f"{name} must be an array or support the buffer protocol, "
                            f"got {type(x).__name__}") from None
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if writable and not x.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return x


def _same(x, ref, name, ref_name):
    if x.dtype != ref.dtype:
        raise ValueError(f"dtype mismatch: {name} is {x.dtype}, {ref_name} is {ref.dtype}")
    if x.size != ref.size:
        raise ValueError(f"length mismatch: {name} has {x.size} elements, {ref_name} has {ref.size}")


def reduce_into(dst, src, op="sum"):
    """dst = op(dst, src) element-wise, in place; returns dst.

    op is "sum", "prod", "min", "max" or "avg". "avg" only sums here: a collective divides once at the end
    (scale_avg). Integers wrap like numpy; min/max propagate NaN like np.minimum/np.maximum; float16 and
    bfloat16 are combined in float32 and rounded once. complex64 and complex128 take sum, avg and prod (the schoolbook
    product, (ac - bd) + (ad + bc)i, each product rounded); min and max raise TypeError: complex numbers have no
    order.
    """
    # Fast path for numpy arrays of one dtype (small reductions are dominated by this call's overhead);
    # the buffer layer rejects bad layouts, and the checked path below then says precisely what is wrong.
    if type(dst) is np.ndarray and type(src) is np.ndarray and dst.dtype == src.dtype:
        try:
            _kernels.reduce(dst, dst, src, dtype_id(dst.dtype), op_id(op))
            return dst
        except ValueError:
            pass
    d = _array(dst, "dst", writable=True)
    s = _array(src, "src")
    _same(s, d, "src", "dst")
    _kernels.reduce(d, d, s, dtype_id(d.dtype), op_id(op))
    return dst


def reduce(a, b, op="sum", out=None):
    """op(a, b) element-wise into out (a new array when None, else may be a or b); returns out."""
    x = _array(a, "a")
    y = _array(b, "b")
    _same(y, x, "b", "a")
    if out is None:
        out = np.empty_like(x)
    o = _array(out, "out", writable=True)
    _same(o, x, "out", "a")
    _kernels.reduce(o, x, y, dtype_id(x.dtype), op_id(op))
    return out


def scale_avg(buf, divisor):
    """buf /= divisor in place (the end of an average); integers truncate toward zero. Returns buf."""
    if isinstance(divisor, bool) or not isinstance(divisor, (int, np.integer)) or divisor < 1:
        raise ValueError(f"divisor must be an integer >= 1, got {divisor!r}")
    b = _array(buf, "buf", writable=True)
    _kernels.scale_avg(b, dtype_id(b.dtype), int(divisor))
    return buf


def accumulator_dtype(dtype):
    """The numpy dtype compensated pairs of `dtype` are kept in (float32, float64, or the complex dtype itself)."""
    dtype_id(dtype)
    name = np.dtype(dtype).name
    if name not in _ACCUMULATORS:
        raise TypeError(f"compensated summation needs a float or complex dtype, got {name}")
    return _ACCUMULATORS[name]


def compensated_load(src):
    """A compensated pair (sum, comp) for src: sum = src in the accumulator type, comp = 0."""
    s = _array(src, "src")
    acc = accumulator_dtype(s.dtype)
    pair = (np.empty(s.shape, acc), np.empty(s.shape, acc))
    _kernels.compensated_load(pair[0], pair[1], s, dtype_id(s.dtype))
    return pair


def compensated_combine(dst_sum, dst_comp, src_sum, src_comp):
    """(dst_sum, dst_comp) += (src_sum, src_comp) with TwoSum, in place; all float32 or all float64."""
    if (type(dst_sum) is np.ndarray and type(src_sum) is np.ndarray and type(dst_comp) is np.ndarray
            and type(src_comp) is np.ndarray and dst_sum.dtype == dst_comp.dtype == src_sum.dtype
            == src_comp.dtype and dst_sum.dtype in _PAIR_IDS):
        try:
            _kernels.compensated_combine(dst_sum, dst_comp, src_sum, src_comp, _PAIR_IDS[dst_sum.dtype])
            return
        except ValueError:
            pass  # the checked path below says precisely what is wrong
    ds = _array(dst_sum, "dst_sum", writable=True)
    dc = _array(dst_comp, "dst_comp", writable=True)
    ss = _array(src_sum, "src_sum")
    sc = _array(src_comp, "src_comp")
    for x, name in ((dc, "dst_comp"), (ss, "src_sum"), (sc, "src_comp")):
        _same(x, ds, name, "dst_sum")
    if ds.dtype.name not in ("float32", "float64"):
        raise TypeError(f"compensated pairs are float32 or float64, got {ds.dtype}")
    _kernels.compensated_combine(ds, dc, ss, sc, DTYPES[ds.dtype.name])


def compensated_store(dst, sum, comp, divisor=1):
    """dst = dtype((sum + comp) / divisor), rounded once to dst's dtype; returns dst."""
    if isinstance(divisor, bool) or not isinstance(divisor, (int, np.integer)) or divisor < 1:
        raise ValueError(f"divisor must be an integer >= 1, got {divisor!r}")
    d = _array(dst, "dst", writable=True)
    s = _array(sum, "sum")
    c = _array(comp, "comp")
    acc = accumulator_dtype(d.dtype)
    for x, name in ((s, "sum"), (c, "comp")):
        if x.dtype != acc:
            raise ValueError(f"dtype mismatch: {name} is {x.dtype}, expected {acc} for dst of {d.dtype}")
        if x.size != d.size:
            raise ValueError(f"length mismatch: {name} has {x.size} elements, dst has {d.size}")
    _kernels.compensated_store(d, s, c, dtype_id(d.dtype), int(divisor))
    return dst


def simd_name():
    """The kernel variant in use: "avx512", "avx2" or "scalar"."""
    return _kernels.simd_name()
