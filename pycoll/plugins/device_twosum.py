"""Compensated-sum arithmetic on device arrays, for any array module `xp`: numpy on host memory (the fake vendor
libraries' "device" memory), CuPy on a GPU. The same math as libpycoll's C kernels (native/kernels/
compensated.c), so a device ring gives the C ring's bits:

    pair = math.load(plain)           # [sum | comp] in the accumulator type: float16/bfloat16 widen to float32
    math.combine(pair, other)         # pair += other, both (sum, comp) pairs, TwoSum-exact
    math.store(out, pair, divisor)    # (sum + comp) / divisor, rounded once into out's type

bfloat16 arrays are handled as their raw uint16 bits (CuPy has no bfloat16 type).

Why this stays exact: every step below is one xp operation on whole arrays, so numpy and CuPy each run it as a
separate rounding (no reassociation, no fused multiply-add across steps). The CuPy combine is one
ElementwiseKernel instead (it runs at every ring step); it spells out each rounding with the CUDA
round-to-nearest intrinsics, which the compiler never contracts or reorders.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PairMath", "ACCUMULATOR"]

# pycoll dtype id -> (xp dtype of the plain values, accumulator dtype); bfloat16 as raw bits.
ACCUMULATOR = {
    4: (np.float16, np.float32),
    5: (np.uint16, np.float32),
    6: (np.float32, np.float32),
    7: (np.float64, np.float64),
}
_BFLOAT16 = 5
_FLOAT16 = 4

_COMBINE_CUDA = r"""
T s = add_rn(ds, ss);
T bb = sub_rn(s, ds);
T e = add_rn(sub_rn(ds, sub_rn(s, bb)), sub_rn(ss, bb));
T c = add_rn(add_rn(dc, sc), e);
T t = add_rn(s, c);
T bb2 = sub_rn(t, s);
dc = add_rn(sub_rn(s, sub_rn(t, bb2)), sub_rn(c, bb2));
ds = t;
"""

_ROUNDING_CUDA = r"""
__device__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
"""


def _two_sum(a, b):
    """Knuth's TwoSum: s = fl(a + b) and err with s + err == a + b exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _combine_arrays(ds, dc, ss, sc):
    """(ds, dc) += (ss, sc), in place: the C kernel's combine, one array operation per rounding."""
    s, e = _two_sum(ds, ss)
    c = (dc + sc) + e
    t, e2 = _two_sum(s, c)
    ds[...] = t
    dc[...] = e2


def _two_product(a, b):
    """Dekker's exact product p + err == a * b, float64, without FMA."""
    split = 134217729.0  # 2^27 + 1
    p = a * b
    ta = split * a
    ah = ta - (ta - a)
    al = a - ah
    tb = split * b
    bh = tb - (tb - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _divide_pair(s, c, d):
    """(s + c) / d in float64 as (value, tail), the remainder folded back in (double-double style)."""
    q = s / d
    p, pe = _two_product(q, d)
    r = ((s - p) - pe) + c
    return _two_sum(q, r / d)


class PairMath:
    """load / combine / store of (sum, comp) pairs with array module xp (numpy or cupy)."""

    def __init__(self, xp):
        self.xp = xp
        self._kernel = None
        if xp.__name__ == "cupy":
            self._kernel = xp.ElementwiseKernel("T ss, T sc", "T ds, T dc", _COMBINE_CUDA, "pycoll_twosum_combine",
                                                preamble=_ROUNDING_CUDA)

    def load(self, plain, dtype):
        """A fresh [sum | comp] pair array of plain's values (pycoll dtype id `dtype`), comp = 0."""
        xp = self.xp
        acc = ACCUMULATOR[dtype][1]
        n = plain.size
        pair = xp.zeros(2 * n, dtype=acc)
        if dtype == _BFLOAT16:
            pair[:n] = (plain.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)
        else:
            pair[:n] = plain
        return pair

    def combine(self, pair, other):
        """pair += other, element-wise, both [sum | comp] pairs of one length."""
        n = pair.size // 2
        if self._kernel is not None:
            self._kernel(other[:n], other[n:], pair[:n], pair[n:])
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN propagate, as in the C kernels
                _combine_arrays(pair[:n], pair[n:], other[:n], other[n:])

    def store(self, out, pair, dtype, divisor=1):
        """out = (sum + comp) / divisor, rounded once into out's type (pycoll dtype id `dtype`)."""
        xp = self.xp
        n = pair.size // 2
        s, c = pair[:n], pair[n:]
        with np.errstate(over="ignore", invalid="ignore"):
            if dtype == 7:
                out[...] = s + c if divisor == 1 else _divide_pair(s, c, float(divisor))[0]
                return
            if dtype == 6 and divisor == 1:
                out[...] = s + c
                return
            s64, c64 = s.astype(xp.float64), c.astype(xp.float64)
            x, tail = _two_sum(s64, c64) if divisor == 1 else _divide_pair(s64, c64, float(divisor))
            if dtype == 6:
                out[...] = x.astype(xp.float32)
                return
            odd = self._round_to_odd_f32(x, tail)
            out[...] = odd.astype(xp.float16) if dtype == _FLOAT16 else self._f32_to_bf16_bits(odd)

    def _round_to_odd_f32(self, x, tail):
        """float32 of the exact x + tail, its last bit set whenever inexact: rounding it once more to 16 bits
        (to nearest even) equals rounding x + tail directly, as 24 >= 11 + 2 bits (no double rounding)."""
        xp = self.xp
        f = x.astype(xp.float32)
        back = f.astype(xp.float64)
        below = xp.where(back != x, x - back, tail)  # where the exact value lies from f
        bits = f.view(xp.uint32)
        one = xp.uint32(1)
        inexact = (below != 0) & ((bits & one) == 0) & ~xp.isnan(x)
        away_from_zero = (below > 0) == (f > 0)
        stepped = xp.where(away_from_zero, bits + one, bits - one)
        smallest = xp.where(below < 0, xp.uint32(0x80000001), one)  # from zero: the nearest subnormal
        bits = xp.where(inexact, xp.where(f == 0, smallest, stepped), bits)
        return bits.view(xp.float32)

    def _f32_to_bf16_bits(self, f):
        """bfloat16 bits of float32 values, rounded to nearest even; NaN stays a quiet NaN."""
        xp = self.xp
        u = f.view(xp.uint32)
        rounded = (u + xp.uint32(0x7FFF) + ((u >> xp.uint32(16)) & xp.uint32(1))) >> xp.uint32(16)
        return xp.where(xp.isnan(f), xp.uint32(0x7FC0), rounded).astype(xp.uint16)
