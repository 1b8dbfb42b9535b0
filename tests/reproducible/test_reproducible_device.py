"""accuracy="reproducible" on a device's memory table (native/comm/reproducible_device.c), on simulated ranks whose
transports hand the schedules the guarded test table (tests/fakes/guarded_memory.c: the host's exact-mode loops
behind counters, allocations poisoned and fenced) as a device transport hands its device's: the result has the host
path's bytes for every collective, dtype, op and world size, the summary, limbs and result are made by the table's
entries in its memory, every block comes back intact; what the device has no kernels for (the general mode) is
refused on every rank with a typed error naming why, as is a table older than the entries."""

import ml_dtypes
import numpy as np
import pytest
from fakes.guarded_memory import counts, old_table_address, run_guarded, table_address

from pycoll.errors import PeerFailure, PycollError
from pycoll.tools.accuracy import make_inputs
from pycoll.tools.simulate import simulate

FLOATS = ["float16", "bfloat16", "float32", "float64"]
COUNT = 67  # not a multiple of any world size


def _inputs(coll, dataset, world, dtype, seed):
    n = COUNT * world if coll == "reduce_scatter" else COUNT
    return make_inputs(dataset, world, n, dtype, seed=seed)


def _device_bytes_are_the_hosts(coll, inputs, **kw):
    """run_guarded (fakes/guarded_memory.py) compares the bytes with the host table's and checks every block came back
    intact; here also that the table's reproducible entries made them, on every rank."""
    world = len(inputs)
    calls = run_guarded(coll, inputs, accuracy="reproducible", **kw)
    assert calls["repro_summary"] == calls["repro_encode"] == calls["copy_to_host"] == world, calls
    decoders = 0 if inputs[0].size == 0 else 1 if coll == "reduce" else world  # off the root reduce receives none
    assert calls["repro_decode"] == decoders, calls
    assert calls["scale_avg"] == (decoders if kw.get("op") == "avg" else 0), calls
    return calls


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "reduce"])
def test_every_collective_dtype_op_and_world_size_gives_the_host_bytes(coll, dtype, world):
    for dataset in ("gaussian", "mixed"):
        inputs = _inputs(coll, dataset, world, dtype, seed=world)
        for op in ("sum", "avg"):
            kw = dict(root=world - 1) if coll == "reduce" else dict(algorithm="ring")
            _device_bytes_are_the_hosts(coll, inputs, op=op, **kw)


@pytest.mark.parametrize("coll, algorithms", [
    ("all_reduce", ["halving_doubling", "mesh", "recursive_doubling"]),
    ("reduce_scatter", ["halving_doubling", "mesh"]),
])
def test_every_algorithm_gives_the_bits_of_the_ring(coll, algorithms):
    inputs = _inputs(coll, "mixed", 4, "float32", seed=7)
    ring = simulate(coll, inputs, algorithm="ring", accuracy="reproducible")
    for algorithm in algorithms:
        _device_bytes_are_the_hosts(coll, inputs, algorithm=algorithm)
        device = simulate(coll, inputs, algorithm=algorithm, accuracy="reproducible", memory_table=table_address())
        assert all(d.tobytes() == r.tobytes() for d, r in zip(device, ring)), algorithm


def test_bits_do_not_move_with_world_size_on_the_device_table():
    """The exact mode's limbs change with the world size (W = 62 - ceil(log2 size)); the result does not."""
    base = make_inputs("mixed", 3, COUNT, "float64", seed=9)
    reference = simulate("all_reduce", base, accuracy="reproducible")[0]
    for world in (3, 5, 8):
        padded = base + [np.zeros_like(base[0])] * (world - 3)
        for out in simulate("all_reduce", padded[::-1], accuracy="reproducible", memory_table=table_address()):
            assert out.tobytes() == reference.tobytes(), world


def test_empty_and_single_rank():
    _device_bytes_are_the_hosts("all_reduce", make_inputs("mixed", 1, 7, "float32", seed=1))
    _device_bytes_are_the_hosts("all_reduce", [np.zeros(0, np.float32)] * 3)
    _device_bytes_are_the_hosts("all_reduce", [np.zeros(5, np.float16), np.full(5, -0.0, np.float16)])


def _refused(inputs, table=None):
    """Every rank's error of a reproducible all_reduce on the table, and the table's calls it made."""
    before = counts()
    with pytest.raises(PycollError) as caught:
        simulate("all_reduce", inputs, accuracy="reproducible", memory_table=table or table_address())
    after = counts()
    return caught.value.rank_errors, {entry: after[entry] - before[entry] for entry in after}


def _refusals_after_the_summary(errors, *phrases):
    """The refusals of a plan every rank drew: each rank that finished the summary's pass refuses, typed. The
    simulator ends the job at a rank's first error, so a rank still in that pass meets it as a peer's failure;
    separate processes each refuse and go on (tests/reproducible/test_nccl_reproducible.py)."""
    refusals = [err for err in errors if not isinstance(err, PeerFailure)]
    assert refusals, errors
    for err in refusals:
        assert type(err) is PycollError, err
        assert all(phrase in str(err) for phrase in phrases), err
    for err in errors:
        if isinstance(err, PeerFailure):
            assert "failed with status 2" in str(err), err  # PYCOLL_ERR_UNSUPPORTED: a peer's refusal


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_infinities_and_nan_are_refused_naming_why(dtype, special):
    """They need the general mode, which has no device kernels. One rank's special is every rank's refusal:
    every rank draws its plan from the agreed summary."""
    inputs = [np.ones(9, dtype) for _ in range(3)]
    inputs[1][4] = special
    errors, calls = _refused(inputs)
    _refusals_after_the_summary(errors, "guarded test memory runs the exact mode only", "infinity or NaN",
                                "host arrays")
    # The summary's pass ran (and its block came back); nothing was encoded.
    assert calls["repro_summary"] == 3 and calls["repro_encode"] == 0, calls
    assert calls["alloc"] == calls["free"] and calls["corrupt"] == 0, calls


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
def test_a_span_beyond_two_limbs_is_refused_naming_why(dtype):
    info = ml_dtypes.finfo(dtype)
    inputs = [np.full(5, info.tiny, dtype), np.full(5, info.max, dtype)]  # every binade of the format
    errors, calls = _refused(inputs)
    _refusals_after_the_summary(errors, "span more binades than the exact mode's two limbs")
    assert calls["repro_encode"] == 0 and calls["alloc"] == calls["free"], calls


def test_float16_never_needs_the_general_mode_when_finite():
    """Every finite float16 span fits one limb: the full range runs on the device table."""
    info = ml_dtypes.finfo(np.float16)
    inputs = [np.array([info.smallest_subnormal, info.max, -info.max, 1], np.float16),
              np.array([info.max, info.tiny, 0, -info.smallest_subnormal], np.float16)]
    _device_bytes_are_the_hosts("all_reduce", inputs)


def test_a_table_older_than_the_entries_is_refused_before_anything_is_sent():
    """Version 1 (the table before reproducible's entries) keeps the typed refusal, though this one carries the
    entries: a table's version says which of its fields exist."""
    errors, calls = _refused([np.ones(8, np.float32)] * 3, table=old_table_address())
    for err in errors:
        assert type(err) is PycollError and "table is version 1, older than the reproducible kernels" in str(err)
    assert not any(calls.values()), calls  # no entry ran, no block was taken
