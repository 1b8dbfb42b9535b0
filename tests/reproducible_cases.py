"""Data at the edges of accuracy="reproducible"'s limb choice (kernels/reproducible.h), which the tests of the
mode on the host (reproducible/test_reproducible_limbs.py) and of the device kernels compiled for the host
(vendors/test_cuda_kernel_source.py) share: contributions spanning a given number of bits, the spans around every
limb boundary, double-rounding traps, and the digests every SIMD variant must reproduce."""

import hashlib

import ml_dtypes
import numpy as np

from pycoll.tools.simulate import simulate

FRAC = {"float64": 52, "float32": 23, "float16": 10, "bfloat16": 7}
DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

WIDTHS = range(56, 62)
COUNT = 29


def limb_width(size):
    return 62 - (size - 1).bit_length()


def spanning(dtype, span, seed):
    """Two ranks' contributions whose nonzero elements span exactly `span` bits: full-precision significands
    (last bit set) from the binade 2^4 down to 2^(4 - (span - precision)), the second rank's half of them in the
    bottom binade, so that the sums have bits all over the span."""
    rng = np.random.default_rng(seed)
    frac = FRAC[dtype]
    low = 4 - (span - frac - 1)

    def values(binades):
        m = rng.integers(1 << frac, 1 << (frac + 1), COUNT) | 1
        return np.ldexp(m.astype(np.float64), binades - frac) * rng.choice([-1.0, 1.0], COUNT)

    first = values(rng.integers(low, 5, COUNT))
    first[0] = abs(first[0]) * 2.0 ** (4 - np.floor(np.log2(abs(first[0]))))  # the top binade itself
    second = np.where(rng.random(COUNT) < 0.5, values(rng.integers(low, 5, COUNT)), values(np.full(COUNT, low)))
    second[0] = values(np.full(COUNT, low))[0]  # the bottom binade itself
    out = [x.astype(DTYPES[dtype]) for x in (first, second)]
    for x, ref in zip(out, (first, second)):
        assert np.array_equal(x.astype(np.float64), ref), "the data must be exact in the format"
    return out


def padded(contributions, size, seed):
    zeros = [np.zeros_like(contributions[0])] * (size - len(contributions))
    ranks = list(contributions) + zeros
    order = np.random.default_rng(seed).permutation(size)
    return [ranks[i] for i in order]


def edges(dtype):
    """The spans around every limb boundary the world sizes above meet, and the general mode's edge."""
    general = 46 * {"float64": 3, "float32": 2, "float16": 1, "bfloat16": 2}[dtype]
    spans = {general, general + 1}
    for w in WIDTHS:
        spans |= {w, w + 1, 2 * w, 2 * w + 1}
    return sorted(s for s in spans if frac_fits(dtype, s))


def frac_fits(dtype, span):
    """The span fits the format's normal exponents (from 2^4 down)."""
    min_exp = {"float64": -1022, "float32": -126, "float16": -14, "bfloat16": -126}[dtype]
    return FRAC[dtype] + 1 <= span and 4 - (span - FRAC[dtype] - 1) >= min_exp


def double_rounding_traps(dtype):
    """Sums exactly half an ulp above a value, plus a little far below: 1 + ulp/2 + tiny, whose correct rounding
    is 1 + ulp, where rounding first at 53 (or 24) bits makes a tie that rounds to even, to 1."""
    frac = FRAC[dtype]
    t = DTYPES[dtype]
    tiny = {"float64": -100, "float32": -59, "bfloat16": -59, "float16": -24}[dtype]
    first = np.array([1.0, 1.0, -1.0, 2.0 ** 3], t)
    second = np.array([2.0 ** -(frac + 1), 2.0 ** -(frac + 1), -(2.0 ** -(frac + 1)), 2.0 ** (2 - frac)], t)
    third = np.array([2.0 ** tiny, -(2.0 ** tiny), -(2.0 ** tiny), 2.0 ** tiny], t)
    return [first, second, third]


def digests():
    """{case: sha256 of the all_reduce result}, over every dtype, one limb and two, and the general mode."""
    out = {}
    for dtype in DTYPES:
        for span in edges(dtype)[::5] if dtype != "float16" else [11, 20, 29]:
            for size in (2, 9):
                inputs = padded(spanning(dtype, span, seed=span), size, seed=size)
                result = simulate("all_reduce", inputs, accuracy="reproducible")[0]
                out[f"{dtype} span {span} n={size}"] = hashlib.sha256(result.tobytes()).hexdigest()
    return out
