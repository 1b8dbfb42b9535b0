"""accuracy="reproducible"'s exact mode at the edges of its limb choice (kernels/reproducible.h): the number of
limbs follows the bits the data spans over every rank (span = the binades between the largest and the smallest
nonzero element, plus the format's precision) and the limb width, W = 62 - ceil(log2(world size)) bits; beyond
two limbs, or beyond the general mode's exact range, the general mode runs instead. Data spanning exactly W and
W + 1 bits, 2W and 2W + 1, and the general mode's edge must give the correctly rounded sum, with the same bytes
at every world size (each with its own W, so its own number of limbs), by every algorithm, and under every SIMD
variant of the loops."""

import json
import os

import ml_dtypes
import numpy as np
import pytest
from repo_paths import TESTS
from reproducible_cases import COUNT, DTYPES, FRAC, digests, double_rounding_traps, edges, limb_width, padded, spanning
from simd_variants import run_under_variant, supported_variants

from pycoll.tools.accuracy import correctly_rounded_sum
from pycoll.tools.simulate import simulate

SIZES = (2, 3, 5, 9, 17, 33)  # W = 61, 60, 59, 58, 57, 56


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_limb_boundaries_give_the_correctly_rounded_sum_at_every_world_size(dtype):
    for span in edges(dtype):
        contributions = spanning(dtype, span, seed=span)
        want = correctly_rounded_sum(contributions, dtype)
        for size in SIZES:
            for algorithm in ("ring", "halving_doubling") if size > 5 else ("ring", "mesh", "recursive_doubling"):
                out = simulate("all_reduce", padded(contributions, size, seed=size), algorithm=algorithm,
                               accuracy="reproducible")[0]
                assert out.tobytes() == want.tobytes(), (
                    f"span {span} bits, {size} ranks (W = {limb_width(size)}), {algorithm}: "
                    f"{np.flatnonzero(out != want)[:5]}")


@pytest.mark.parametrize("size", [2, 4, 32])
@pytest.mark.parametrize("limbs", [1, 2])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_headroom_when_every_rank_is_at_the_top(dtype, size, limbs):
    """Every rank contributes the largest significand of the top binade, at a span that fills the limbs: the
    limb sums reach size * 2^W, the most the headroom of W = 62 - ceil(log2(size)) bits was chosen for."""
    frac = FRAC[dtype]
    span = limbs * limb_width(size)
    low = 4 - (span - frac - 1)
    top = float((1 << (frac + 1)) - 1) * 2.0 ** (4 - frac)
    x = np.array([top, -top, 2.0 ** low, -2.0 ** low, 1.0], DTYPES[dtype])
    inputs = [x] * size
    want = correctly_rounded_sum(inputs, dtype)
    for algorithm in ("ring", "halving_doubling"):
        out = simulate("all_reduce", inputs, algorithm=algorithm, accuracy="reproducible")[0]
        assert out.tobytes() == want.tobytes(), (algorithm, out, want)


def test_float16_always_fits_one_limb():
    """float16's widest span, 2^15 down to its least subnormal, is 40 bits: exact in one limb at any size."""
    tiny, big = np.float16(2.0 ** -24), np.float16(2.0 ** 15)
    contributions = [np.array([big, tiny, -big, 3], np.float16), np.array([tiny, big, big, -tiny], np.float16)]
    want = correctly_rounded_sum(contributions, "float16")
    for size in (2, 64):
        out = simulate("all_reduce", padded(contributions, size, seed=1), accuracy="reproducible")[0]
        assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_no_double_rounding(dtype):
    inputs = double_rounding_traps(dtype)
    want = correctly_rounded_sum(inputs, dtype)
    assert want[0] != 1 and want[1] == 1  # the traps are set
    for size in (3, 4, 33):
        out = simulate("all_reduce", padded(inputs, size, seed=size), accuracy="reproducible")[0]
        assert out.tobytes() == want.tobytes(), (size, out, want)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_overflow_and_zeros_without_specials(dtype):
    """With no infinity or NaN in the data the exact mode runs: a sum past the format's largest finite value is
    the signed infinity, one that comes back in range is exact, and zero sums are +0.0."""
    t = DTYPES[dtype]
    big = ml_dtypes.finfo(t).max
    cols = {"overflow": ([big, big, 0], np.inf), "-overflow": ([-big, -big, 0], -np.inf),
            "back in range": ([big, big, -big], big), "zeros": ([0, 0, 0], 0.0),
            "signed zeros": ([-0.0, -0.0, -0.0], 0.0), "cancels": ([3, -3, 0], 0.0), "one": ([1, 0, 0], 1.0)}
    inputs = [np.array([c[0][r] for c in cols.values()], dtype=t) for r in range(3)]
    want = np.array([c[1] for c in cols.values()], dtype=t)
    for size in (3, 4, 9):
        out = simulate("all_reduce", padded(inputs, size, seed=size), accuracy="reproducible")[0]
        assert out.tobytes() == want.tobytes(), dict(zip(cols, out.tolist()))


@pytest.mark.parametrize("largest", [-1019, -960])  # one limb, two
def test_float64_subnormal_results(largest):
    """Sums below float64's normal range round once at the subnormal grid (the loops' long way)."""
    rng = np.random.default_rng(-largest)
    tiny, top = np.float64(5e-324), 2.0 ** -1020
    inputs = [rng.integers(-2**40, 2**40, COUNT) * tiny, rng.integers(-2, 3, COUNT) * top,
              -(rng.integers(-2, 3, COUNT) * top) + rng.integers(-9, 9, COUNT) * tiny]
    inputs[0][0] = 2.0 ** largest
    want = correctly_rounded_sum(inputs, "float64")
    for size in (3, 17):
        out = simulate("all_reduce", padded(inputs, size, seed=size), accuracy="reproducible")[0]
        assert out.tobytes() == want.tobytes()


VARIANT_DIGESTS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from reproducible_cases import digests
print("DIGESTS " + json.dumps(digests()))
"""


@pytest.mark.skipif("PYCOLL_SIMD" in os.environ, reason="already running under a forced variant")
@pytest.mark.parametrize("variant", supported_variants())
@pytest.mark.timeout(120)
def test_every_simd_variant_gives_the_same_bits(variant):
    done = run_under_variant(variant, ["-P", "-c", VARIANT_DIGESTS, str(TESTS)], 110)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    theirs = json.loads(done.stdout.split("DIGESTS ", 1)[1])
    assert theirs == digests()
