"""accuracy="reproducible" on simulated ranks (pycoll.tools.simulate runs the production dispatch): the bytes of the
result do not move with the world size (zero contributions added), the rank order, the algorithm or the segment
size; the error against the exact sum is at most 1 ulp; special values give what the docs promise; what the
mode does not cover is refused with a typed error."""

import math

import ml_dtypes
import numpy as np
import pytest
from algorithm_table import ALL_REDUCE_SIM_SCHEDULES as ALGORITHMS
from fakes.guarded_memory import old_table_address

from pycoll.errors import PycollError
from pycoll.tools.accuracy import correctly_rounded_sum, make_inputs, ulp_distance
from pycoll.tools.simulate import simulate

FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
COUNT = 67  # not a multiple of any world size or vector width


def padded(contributions, size, seed):
    """The contributions spread over `size` ranks in a seeded order, the other ranks contributing zeros."""
    zeros = [np.zeros_like(contributions[0])] * (size - len(contributions))
    ranks = list(contributions) + zeros
    order = np.random.default_rng(seed).permutation(size)
    return [ranks[i] for i in order]


def run(coll, inputs, algorithm="ring", **kw):
    hosts = [r // 2 for r in range(len(inputs))] if algorithm == "hierarchical" else None
    if coll == "reduce_scatter":
        return simulate(coll, inputs, algorithm=algorithm, accuracy="reproducible", hosts=hosts, **kw)
    if coll == "reduce":
        root = len(inputs) - 1
        return [simulate(coll, inputs, accuracy="reproducible", root=root, **kw)[root]]
    return simulate(coll, inputs, algorithm=algorithm, accuracy="reproducible", hosts=hosts, **kw)


def assert_same_bytes(outs, reference, what):
    for r, out in enumerate(outs):
        assert out.tobytes() == reference.tobytes(), f"{what}: rank {r} differs"


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dataset", ["gaussian", "mixed"])
def test_all_reduce_bits_do_not_move_with_world_size_order_or_algorithm(dtype, dataset):
    base = make_inputs(dataset, 5, COUNT, np.dtype(dtype).name, seed=3)
    reference = run("all_reduce", base)[0]
    for size in (5, 6, 8, 13, 32, 64):
        for algorithm in ALGORITHMS if size <= 13 else ["ring", "halving_doubling"]:
            outs = run("all_reduce", padded(base, size, seed=size), algorithm)
            assert_same_bytes(outs, reference, f"{size} ranks, {algorithm}")


def test_one_contribution_gives_itself_at_every_world_size():
    x = make_inputs("mixed", 1, COUNT, "float32", seed=4)
    for size in range(1, 65, 7):
        outs = run("all_reduce", padded(x, size, seed=size), "ring")
        assert_same_bytes(outs, x[0], f"{size} ranks")


@pytest.mark.parametrize("segment_bytes", [64, 1000, 4096, None])
def test_segment_size_does_not_move_the_bits(segment_bytes):
    base = make_inputs("mixed", 4, 4099, "float64", seed=5)
    reference = run("all_reduce", base)[0]
    for algorithm in ["ring", "halving_doubling"]:
        outs = run("all_reduce", padded(base, 7, seed=1), algorithm, segment_bytes=segment_bytes)
        assert_same_bytes(outs, reference, f"segment {segment_bytes}, {algorithm}")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_reduce_scatter_and_reduce_give_the_all_reduce_bits(dtype):
    name = np.dtype(dtype).name
    for size in (1, 3, 4, 8):
        contributions = make_inputs("mixed", size, size * 11, name, seed=size)
        full = run("all_reduce", contributions)[0]
        for algorithm in ["ring", "halving_doubling", "mesh"]:
            outs = run("reduce_scatter", list(reversed(contributions)), algorithm)
            assert_same_bytes([np.concatenate(outs)], full, f"reduce_scatter over {size}, {algorithm}")
        assert_same_bytes(run("reduce", contributions[::-1]), full, f"reduce over {size}")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dataset", ["gaussian", "mixed"])
def test_error_is_at_most_one_ulp_of_the_exact_sum(dtype, dataset):
    name = np.dtype(dtype).name
    for size in (2, 7, 16):
        inputs = make_inputs(dataset, size, 2000, name, seed=size)
        out = run("all_reduce", inputs)[0]
        dist = ulp_distance(out, correctly_rounded_sum(inputs, name))
        assert dist.max() <= 1, f"{size} ranks: {dist.max()} ulps"


def test_float64_against_fractions():
    """An independent exact reference: Python's Fractions of every contribution, rounded by float()."""
    from fractions import Fraction
    rng = np.random.default_rng(9)
    inputs = [rng.choice([-1, 1], 40) * 10.0 ** rng.uniform(-8, 8, 40) for _ in range(6)]
    inputs.append(-inputs[0] * (1 + 1e-9))  # cancellation
    out = run("all_reduce", inputs, "mesh")[0]
    exact = [float(sum(Fraction(float(x[i])) for x in inputs)) for i in range(40)]
    assert out.tolist() == exact  # correctly rounded: every conversion was exact here


def test_avg_is_the_sum_divided_once():
    inputs = make_inputs("gaussian", 4, COUNT, "float32", seed=6)
    total = run("all_reduce", inputs)[0]
    for algorithm in ALGORITHMS:
        outs = run("all_reduce", inputs[::-1], algorithm, op="avg")
        assert_same_bytes(outs, (total / np.float32(4)).astype(np.float32), f"avg, {algorithm}")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_special_values(dtype):
    inf, nan = dtype(np.inf), dtype(np.nan)
    big = ml_dtypes.finfo(dtype).max
    cols = {  # element: (contributions of ranks 0..3, expected)
        "+inf": ([inf, 1, 0, -2], np.inf), "-inf": ([-inf, -inf, 5, 0], -np.inf),
        "inf-inf": ([inf, 0, -inf, 1], np.nan), "nan": ([nan, 1, inf, 0], np.nan),
        "overflow": ([big, big, 0, 0], np.inf), "-overflow": ([-big, -big, -big, big], -np.inf),
        "max back in range": ([big, big, -big, 0], big), "zeros": ([0, 0, 0, 0], 0.0),
        "signed zeros": ([-0.0, -0.0, -0.0, -0.0], 0.0), "cancels": ([3, -3, 0.5, -0.5], 0.0),
    }
    inputs = [np.array([c[0][r] for c in cols.values()], dtype=dtype) for r in range(4)]
    want = np.array([c[1] for c in cols.values()], dtype=dtype)
    for order in (inputs, inputs[::-1], inputs[1:] + inputs[:1]):
        for algorithm in ["ring", "mesh"]:
            out = run("all_reduce", order, algorithm)[0]
            assert out.tobytes() == want.tobytes(), dict(zip(cols, out.tolist()))  # +0.0 for zero sums


def test_subnormal_sums_round_once():
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    inputs = [np.array([tiny, tiny * 3, -tiny], np.float32), np.array([tiny, 0, tiny * 2], np.float32)]
    assert run("all_reduce", inputs)[0].tolist() == [float(tiny * 2), float(tiny * 3), float(tiny)]


# Binades of a small sum whose bits all lie in the limbs of a binade-0 element, yet above the lowest limb.
SMALL_BINADES = {np.float32: (-45, -43), np.float64: (-84, -60)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_a_small_sum_left_by_cancellation_keeps_all_its_bits(dtype):
    """Large contributions cancel and leave a sum far below the element's binade: every bit of it is exact in the
    limbs, so the result must be it exactly (rounding at the large values' precision would cut its low bits)."""
    rng = np.random.default_rng(12)
    small = (rng.uniform(1, 2, 50) * 2.0 ** rng.integers(*SMALL_BINADES[dtype], 50)).astype(dtype)
    big = np.full(50, 1, dtype)
    for algorithm in ["ring", "mesh"]:
        out = run("all_reduce", [big, small, -big], algorithm)[0]
        assert out.tobytes() == small.tobytes(), algorithm


@pytest.mark.parametrize("call, match", [
    (dict(coll="all_reduce", op="max"), "op max"),
    (dict(coll="all_reduce", op="prod"), "op prod"),
    (dict(coll="reduce_scatter_v", counts=[3, 2, 3]), "reduce_scatter_v is not supported"),
    (dict(coll="all_reduce", dtype=np.int32), "dtype int32"),
    (dict(coll="all_reduce", old_device_table=True), "older than the reproducible kernels"),
])
def test_refusals_are_typed_and_leave_nothing_sent(call, match):
    call = dict(call)
    dtype = call.pop("dtype", np.float32)
    coll = call.pop("coll")
    if call.pop("old_device_table", False):  # a device table from before reproducible's entries
        call["memory_table"] = old_table_address()
    inputs = [np.ones(8, dtype)] * 3
    with pytest.raises(PycollError) as caught:
        simulate(coll, inputs, accuracy="reproducible", **call)
    for err in caught.value.rank_errors:  # every rank refused it itself, before sending anything
        assert type(err) is PycollError and match in str(err), err


def test_exponent_pass_is_an_internal_call():
    """The exponent all_reduce is numbered apart from the user's calls: a rank that runs fast meets a rank that
    runs reproducible as a disagreement, not as a silently wrong sum."""
    inputs = [np.ones(8, np.float32)] * 2
    with pytest.raises(PycollError):
        simulate("all_reduce", inputs, accuracy=["reproducible", "fast"], timeout=5.0)


def test_fsum_reference_agrees_on_gaussian_float64():
    inputs = make_inputs("gaussian", 9, 500, "float64", seed=2)
    out = run("all_reduce", inputs, "recursive_doubling")[0]
    exact = [math.fsum(float(x[i]) for x in inputs) for i in range(500)]
    assert out.tolist() == exact


def test_hccl_refuses_reproducible_naming_what_to_do():
    """HCCL's collectives run by HCCL's own schedules, and pycoll has no kernels for its memory: no reproducible
    form there. (NCCL's CUDA memory runs pycoll's: tests/reproducible/test_nccl_reproducible.py.)"""
    from types import SimpleNamespace

    from pycoll.comm import Communicator
    from pycoll.plugins.hccl import HcclBackend
    assert "reproducible" not in HcclBackend.accuracies
    with pytest.raises(ValueError, match="use backend 'nccl' with CUDA arrays, or 'cpu', 'shm' or 'tcp' with host"):
        Communicator._accuracy(SimpleNamespace(_backend=HcclBackend, backend="hccl"), "reproducible")
