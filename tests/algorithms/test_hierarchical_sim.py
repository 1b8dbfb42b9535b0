"""The hierarchical all-reduce (native/algorithms/hierarchical.c) on simulated hosts: exact on integer data for
even and uneven host shapes (ranks of a host need not be consecutive), bitwise identical on every rank, every
dtype and op, compensated accuracy, and the host map's checks."""

import math

import ml_dtypes
import numpy as np
import pytest
from sim_checks import assert_exact, assert_identical, expected, ill_conditioned, integer_inputs

from pycoll._bindings import sim as _sim
from pycoll.algorithms import ALGORITHMS
from pycoll.errors import PeerFailure, PycollError, Timeout
from pycoll.tools.simulate import simulate

# Even hosts, uneven ones (3+1, 2+1, 1+2, 3+2+1), interleaved ranks, one host, and one rank per host.
HOST_SHAPES = [
    [0, 0, 1, 1],
    [0, 0, 0, 1],
    [0, 0, 1],
    [0, 1, 1],
    [0, 0, 0, 1, 1, 2],
    ["b", "a", "b", "a", "a"],
    [0, 0, 0, 0],
    [0, 1, 2, 3],
]
SHAPE_IDS = ["2+2", "3+1", "2+1", "1+2", "3+2+1", "interleaved", "one-host", "one-per-host"]
DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", HOST_SHAPES, ids=SHAPE_IDS)
def test_int32_sum_exact_for_every_count_and_segment_size(hosts):
    size = len(hosts)
    # Counts below the ranks per host leave blocks empty; tiny segments reach the many-segment paths.
    for count in (0, 1, 2, size + 1, 1009):
        for segment_bytes in (8, 64, 1 << 19):
            inputs = integer_inputs(size, count, np.int32, "sum", seed=count)
            originals = [x.copy() for x in inputs]
            ran = []
            outs = simulate("all_reduce", inputs, algorithm="hierarchical", hosts=hosts,
                            segment_bytes=segment_bytes, algorithms_out=ran)
            assert ran == ["hierarchical"] * size
            for out in outs:
                np.testing.assert_array_equal(out, expected(inputs, np.int32, "sum"))
            assert all((a == b).all() for a, b in zip(inputs, originals)), "inputs were modified"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", HOST_SHAPES[:5], ids=SHAPE_IDS[:5])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_and_op_exact(hosts, dtype):
    size = len(hosts)
    for op in ("sum", "prod", "min", "max", "avg"):
        for accuracy in ("fast", "compensated"):
            inputs = integer_inputs(size, 203, dtype, op, seed=size)
            outs = simulate("all_reduce", inputs, op=op, algorithm="hierarchical", accuracy=accuracy, hosts=hosts,
                            segment_bytes=96)
            assert_exact(outs, inputs, dtype, op, f"{op} {accuracy}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("accuracy", ["fast", "compensated"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_random_floats_bitwise_identical_on_every_rank(accuracy, dtype):
    rng = np.random.default_rng(2)
    for hosts in HOST_SHAPES:
        size = len(hosts)
        for op in ("sum", "avg"):
            inputs = [rng.standard_normal(2003).astype(dtype) for _ in range(size)]
            outs = simulate("all_reduce", inputs, op=op, algorithm="hierarchical", accuracy=accuracy, hosts=hosts,
                            segment_bytes=256)
            assert_identical(outs)
            exact = np.sum([x.astype(np.float64) for x in inputs], axis=0) / (size if op == "avg" else 1)
            np.testing.assert_allclose(outs[0].astype(np.float64), exact, rtol=0.05, atol=0.05)


@pytest.mark.timeout(60)
def test_compensated_float32_within_one_ulp_of_fsum_where_fast_is_not():
    """The (sum, comp) pairs cross hosts unrounded: one ulp of the exact sum whatever the shape."""
    worst_fast = 0.0
    for size in range(2, 11):
        for hosts in ([r % 2 for r in range(size)], [0] * (size - 1) + [1], [r // 3 for r in range(size)]):
            inputs = ill_conditioned(size, 257, seed=size)
            exact = np.array([math.fsum(float(x[i]) for x in inputs) for i in range(257)]).astype(np.float32)
            ulp = np.spacing(np.abs(exact))
            for segment_bytes in (16, 1 << 19):
                outs = simulate("all_reduce", inputs, algorithm="hierarchical", accuracy="compensated", hosts=hosts,
                                segment_bytes=segment_bytes)
                assert_identical(outs)
                err = np.abs(outs[0].astype(np.float64) - exact.astype(np.float64)) / ulp
                assert err.max() <= 1.0, f"hosts {hosts}: {err.max()} ulp"
            fast = simulate("all_reduce", inputs, algorithm="hierarchical", hosts=hosts)[0]
            worst_fast = max(worst_fast, (np.abs(fast.astype(np.float64) - exact.astype(np.float64)) / ulp).max())
    assert worst_fast > 1.0, "the data is not ill-conditioned enough to tell the modes apart"


@pytest.mark.timeout(30)
def test_each_host_sums_first_then_the_hosts_combine():
    """Fast float32 makes the order visible: 2^24 + 1 rounds back to 2^24, -2^24 + 1 is exact. Hosts {0,1}, {2,3}
    give (2^24 + 1) + (-2^24 + 1) = 2^24 - 2^24 + 1 = 1; hosts {0,2}, {1,3} give (2^24 - 2^24) + (1 + 1) = 2. The
    host map, not the rank order, decides the schedule."""
    inputs = [np.full(8, v, np.float32) for v in (2.0 ** 24, 1.0, -2.0 ** 24, 1.0)]
    for hosts, want in (([0, 0, 1, 1], 1.0), ([0, 1, 0, 1], 2.0)):
        for out in simulate("all_reduce", inputs, algorithm="hierarchical", hosts=hosts):
            np.testing.assert_array_equal(out, np.full(8, want, np.float32))


@pytest.mark.timeout(30)
def test_without_a_host_map_it_runs_as_one_host():
    inputs = integer_inputs(5, 101, np.int64, "sum")
    for out in simulate("all_reduce", inputs, algorithm="hierarchical"):
        np.testing.assert_array_equal(out, expected(inputs, np.int64, "sum"))


@pytest.mark.timeout(30)
def test_a_host_map_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="hosts: 2 entries for 3 ranks"):
        simulate("all_reduce", [np.ones(4)] * 3, algorithm="hierarchical", hosts=[0, 1])


@pytest.mark.timeout(30)
def test_an_out_of_range_host_id_is_refused_by_the_communicator():
    from pycoll._bindings.abi import COLLECTIVES
    from pycoll.algorithms import ACCURACIES, ALGORITHMS
    from pycoll.dtypes import dtype_id, op_id

    x = np.ones(4, np.float32)
    call = (COLLECTIVES["all_reduce"], x.ctypes.data, x.ctypes.data, 4, dtype_id(x.dtype), op_id("sum"),
            ALGORITHMS["hierarchical"], ACCURACIES["fast"], -1)
    status, _, ranks = _sim.run([call, call], 10.0, 0, False, [0, 7])
    assert status != 0
    assert "hosts: rank 1's host is 7, expected 0..1" in ranks[0][2]


@pytest.mark.timeout(30)
def test_a_disagreeing_algorithm_is_a_mismatch_not_a_wrong_sum():
    with pytest.raises(PycollError, match="hierarchical"):
        simulate("all_reduce", [np.ones(64, np.float32)] * 4, algorithm=["hierarchical", "ring", "ring", "ring"],
                 hosts=[0, 0, 1, 1], timeout=10)


NAMES = {ident: name for name, ident in ALGORITHMS.items()}
SIZES_BYTES = [4, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]


def test_auto_on_one_host_never_picks_hierarchical_and_chooses_as_before():
    for size in range(2, 9):
        for nbytes in SIZES_BYTES:
            flat = _sim.choose_all_reduce(size, nbytes)
            assert _sim.choose_all_reduce_hosts(size, 1, size, nbytes) == flat
            assert NAMES[flat] != "hierarchical"
            # One rank per host: hierarchical would be the ring over the hosts.
            assert NAMES[_sim.choose_all_reduce_hosts(size, size, 1, nbytes)] != "hierarchical"


def test_auto_across_hosts_picks_hierarchical_for_large_buffers_when_the_network_is_slower():
    picks = {n: NAMES[_sim.choose_all_reduce_hosts(4, 2, 2, n)] for n in SIZES_BYTES}
    assert picks[4] != "hierarchical"  # latency-bound: fewer steps win
    assert picks[16 << 20] == picks[256 << 20] == "hierarchical"
    # The prediction follows the inter-host link: 10x slower network, 10x the time for large buffers.
    hier = ALGORITHMS["hierarchical"]
    fast_net = _sim.predict_all_reduce_hosts_s(hier, 4, 2, 2, 256 << 20, inter=(30e-6, 1 / 1.25e9))
    slow_net = _sim.predict_all_reduce_hosts_s(hier, 4, 2, 2, 256 << 20, inter=(30e-6, 1 / 1.25e8))
    assert 5 < slow_net / fast_net < 10
    # A network as fast as the host: nothing to save, the flat ring sends the least.
    same = _sim.default_cost_model()
    assert NAMES[_sim.choose_all_reduce_hosts(4, 2, 2, 256 << 20, same, inter=(same[0], same[1]))] == "ring"


@pytest.mark.timeout(30)
def test_auto_runs_hierarchical_when_the_host_map_says_so():
    inputs = integer_inputs(4, 1 << 18, np.int32, "sum")
    want = NAMES[_sim.choose_all_reduce_hosts(4, 2, 2, 4 << 18)]
    assert want == "hierarchical"
    for hosts, expect in (([0, 0, 1, 1], want), (None, NAMES[_sim.choose_all_reduce(4, 4 << 18)])):
        ran = []
        for out in simulate("all_reduce", inputs, algorithm="auto", hosts=hosts, algorithms_out=ran):
            np.testing.assert_array_equal(out, expected(inputs, np.int32, "sum"))
        assert ran == [expect] * 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", [[0, 0, 1, 1], [0, 0, 0, 1], [0, 1, 1]], ids=["2+2", "3+1", "1+2"])
@pytest.mark.parametrize("accuracy", ["fast", "compensated"])
def test_data_goes_only_through_the_memory_table(hosts, accuracy):
    """Through the group views too: the guarded test table gives the host table's bits, gets every block back
    intact, and was used (the pieces' partials live in its memory)."""
    from fakes.guarded_memory import run_guarded

    from pycoll.tools.accuracy import make_inputs

    inputs = make_inputs("mixed", len(hosts), 1001, "float16", seed=13)
    for op in ("sum", "avg"):
        calls = run_guarded("all_reduce", inputs, op=op, algorithm="hierarchical", accuracy=accuracy, hosts=hosts,
                            segment_bytes=512)
        if accuracy == "compensated":
            assert calls["compensated_store"] > 0 and calls["alloc"] > 0, calls


@pytest.mark.timeout(30)
def test_a_crashed_rank_on_another_host_is_named_by_every_rank():
    """A failure seen by a group view's parent stops the schedule on the view; every rank names the dead one."""
    with pytest.raises(PycollError) as info:
        simulate(["all_reduce", "all_reduce", "all_reduce", "crash"], [np.ones(1000, np.float32)] * 4,
                 algorithm="hierarchical", hosts=[0, 0, 1, 1], timeout=20)
    peers = [e for r, e in enumerate(info.value.rank_errors) if r != 3]
    assert all(isinstance(e, PeerFailure) and "rank 3" in str(e) for e in peers), peers


@pytest.mark.timeout(30)
def test_a_missing_rank_times_out_at_the_deadline():
    with pytest.raises(Timeout):
        simulate(["all_reduce", "all_reduce", None, "all_reduce"], [np.ones(1000, np.float32)] * 4,
                 algorithm="hierarchical", hosts=[0, 1, 0, 1], timeout=1.0)


# Hosts of equal size run the pipeline (hierarchical_pipeline.c) once the buffer holds at least four chunks, a
# chunk being a segment times the ranks (a cross-host message is one segment): 2 x 2, 3 x 2, 2 x 3, 4 x 2 and an
# interleaved 2 x 2, each at the count just below four chunks (phase after phase), at four chunks, and at counts
# that split into uneven chunks, blocks and parts.
EVEN_SHAPES = [[0, 0, 1, 1], [0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1], [0, 1, 2, 3, 0, 1, 2, 3], [1, 0, 1, 0]]
EVEN_IDS = ["2x2", "3x2", "2x3", "4x2-interleaved", "2x2-interleaved"]
SEGMENT = 8  # bytes: two int32 or float32 per cross-host message, so small buffers already make many chunks


def pipeline_counts(hosts):
    chunk = SEGMENT // 4 * len(hosts)  # elements: segment x ranks per host x hosts
    return (4 * chunk - 1, 4 * chunk, 4 * chunk + 3, 1009)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", EVEN_SHAPES, ids=EVEN_IDS)
def test_pipelined_chunks_exact_for_every_op(hosts):
    size = len(hosts)
    for count in pipeline_counts(hosts):
        for op in ("sum", "avg", "max", "prod"):
            for dtype in (np.int32, np.float32):
                inputs = integer_inputs(size, count, dtype, op, seed=count)
                originals = [x.copy() for x in inputs]
                outs = simulate("all_reduce", inputs, op=op, algorithm="hierarchical", hosts=hosts,
                                segment_bytes=SEGMENT)
                assert_exact(outs, inputs, dtype, op, f"{count} elements, {op}")
                assert all((a == b).all() for a, b in zip(inputs, originals)), "inputs were modified"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", EVEN_SHAPES, ids=EVEN_IDS)
def test_pipelined_random_floats_bitwise_identical_and_close(hosts):
    rng = np.random.default_rng(len(hosts))
    for count in pipeline_counts(hosts):
        for op in ("sum", "avg"):
            for accuracy in ("fast", "compensated"):
                inputs = [rng.standard_normal(count).astype(np.float32) for _ in hosts]
                outs = simulate("all_reduce", inputs, op=op, algorithm="hierarchical", accuracy=accuracy,
                                hosts=hosts, segment_bytes=SEGMENT)
                assert_identical(outs)
                exact = np.sum([x.astype(np.float64) for x in inputs], axis=0) / (len(hosts) if op == "avg" else 1)
                np.testing.assert_allclose(outs[0].astype(np.float64), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", EVEN_SHAPES, ids=EVEN_IDS)
def test_pipelined_compensated_within_one_ulp_of_fsum(hosts):
    """Compensated, the pipeline's chunks (a 16-byte segment: one float32 (sum, comp) partial per rank of the
    host) cross hosts as partials and are rounded once: one ulp of the exact sum, as the phases in a row give."""
    count = 1009
    inputs = ill_conditioned(len(hosts), count, seed=len(hosts))
    exact = np.array([math.fsum(float(x[i]) for x in inputs) for i in range(count)]).astype(np.float32)
    outs = simulate("all_reduce", inputs, algorithm="hierarchical", accuracy="compensated", hosts=hosts,
                    segment_bytes=16)
    assert_identical(outs)
    err = np.abs(outs[0].astype(np.float64) - exact.astype(np.float64)) / np.spacing(np.abs(exact))
    assert err.max() <= 1.0, f"{err.max()} ulp"


@pytest.mark.timeout(30)
def test_pipelined_chunks_still_sum_each_host_first():
    """test_each_host_sums_first_then_the_hosts_combine on a buffer of sixteen chunks."""
    inputs = [np.full(128, v, np.float32) for v in (2.0 ** 24, 1.0, -2.0 ** 24, 1.0)]
    for hosts, want in (([0, 0, 1, 1], 1.0), ([0, 1, 0, 1], 2.0)):
        for out in simulate("all_reduce", inputs, algorithm="hierarchical", hosts=hosts, segment_bytes=SEGMENT):
            np.testing.assert_array_equal(out, np.full(128, want, np.float32))


@pytest.mark.timeout(30)
def test_pipelined_data_goes_only_through_the_memory_table():
    from fakes.guarded_memory import run_guarded

    from pycoll.tools.accuracy import make_inputs

    inputs = make_inputs("mixed", 6, 1001, "float32", seed=5)
    for op in ("sum", "avg"):
        for accuracy in ("fast", "compensated"):
            calls = run_guarded("all_reduce", inputs, op=op, algorithm="hierarchical", accuracy=accuracy,
                                hosts=[0, 0, 1, 1, 2, 2], segment_bytes=4 * SEGMENT)
            if accuracy == "compensated":
                assert calls["compensated_store"] > 0 and calls["copy"] > 0, calls  # the regrouped partials


@pytest.mark.timeout(30)
def test_a_crash_in_the_pipeline_is_named_by_every_rank():
    with pytest.raises(PycollError) as info:
        simulate(["all_reduce", "all_reduce", "all_reduce", "all_reduce", "crash", "all_reduce"],
                 [np.ones(4096, np.float32)] * 6, algorithm="hierarchical", hosts=[0, 0, 1, 1, 2, 2],
                 segment_bytes=SEGMENT, timeout=20)
    peers = [e for r, e in enumerate(info.value.rank_errors) if r != 4]
    assert all(isinstance(e, PeerFailure) and "rank 4" in str(e) for e in peers), peers


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts", EVEN_SHAPES[:3] + HOST_SHAPES[1:2] + HOST_SHAPES[7:8],
                         ids=EVEN_IDS[:3] + ["3+1", "one-per-host"])
def test_out_of_place_reads_the_input_where_it_lies(hosts):
    """Where the host's reduce-scatter runs, the hierarchical all-reduce reads the input where it lies (the
    pipeline and the phases one after the other); a rank alone on its host copies it first. Every element of a
    result that starts as 0xA5 bytes is written, the input left as it was."""
    size = len(hosts)
    for count in pipeline_counts(hosts)[1:]:
        for accuracy in ("fast", "compensated"):
            for op, dtype in (("sum", np.int32), ("avg", np.float32)):
                inputs = integer_inputs(size, count, dtype, op, seed=count)
                originals = [x.copy() for x in inputs]
                outs = simulate("all_reduce", inputs, op=op, algorithm="hierarchical", accuracy=accuracy,
                                hosts=hosts, segment_bytes=SEGMENT, out_of_place=True)
                assert_exact(outs, inputs, dtype, op, f"{count} elements, {op} {accuracy}")
                assert all((a == b).all() for a, b in zip(inputs, originals)), "inputs were modified"
