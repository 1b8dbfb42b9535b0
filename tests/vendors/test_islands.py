"""backend="auto" across islands, in real processes on this machine: host ranks, fake-NCCL ranks and fake-HCCL
ranks in one job (tests/fakes: the fakes' "device" memory is host memory, copied through the fakes' cudaMemcpy
and aclrtMemcpy). Integers must be exact, compensated floats within 1 ulp of the exact sum, every rank's result
bitwise the same; refusals and mismatches are raised on every rank alike, and a killed rank reaches every other
rank as PeerFailure within the deadline."""

import functools
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from fakes.vendor_harness import device_array, fakes_fixture, run_ranks, run_ranks_ok
from multiproc import free_port, raised
from repo_paths import ROOT

fakes = fakes_fixture()

COUNT = 1001
# Islands whose ranks interleave (island ranks are not contiguous in the job), each of two ranks.
SIX = ("cuda", "host", "npu", "cuda", "host", "npu")
THREE = ("host", "cuda", "cuda")
HIERARCHICAL = {"PYCOLL_ISLANDS_CROSSING": "hierarchical"}


@pytest.fixture
def env(fakes, tmp_path):
    return {**fakes("nccl"), **fakes("hccl"), "FAKE_COLL_DIR": str(tmp_path)}


def _init(devices, port, rank, world, timeout=20.0):
    import pycoll
    return pycoll.init("auto", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       device=devices[rank], timeout=timeout)


def _ints(rank, count, dtype, low=-20, high=20):
    return (np.arange(count, dtype=np.int64) * (rank + 3) % (high - low) + low).astype(dtype)


def _floats(rank, count, dtype):
    """Values over many decades of both signs (fewer for float16): a sum that loses digits in any plain order."""
    rng = np.random.default_rng(rank)
    decades = 3 if np.dtype(dtype).itemsize == 2 else 7
    return (rng.standard_normal(count) * 10.0 ** rng.integers(-3, decades, count)).astype(dtype)


def _collectives_rank(devices, port, rank, world):
    """Every supported collective on this rank's kind of array; what each returned, and what was refused."""
    comm = _init(devices, port, rank, world)
    kind = devices[rank]

    def on_device(arr):
        return device_array(kind, arr)

    out = {"islands": str(comm.islands), "island_ranks": [i.ranks for i in comm.islands]}
    for name, dtype, op in (("sum", np.int32, "sum"), ("max", np.int64, "max"), ("min", np.int8, "min"),
                            ("avg", np.int32, "avg"), ("prod", np.int32, "prod")):
        x = _ints(rank, COUNT, dtype, *((1, 3) if op == "prod" else ()))
        comm.all_reduce(on_device(x), op)
        out[f"all_reduce/{name}"] = x
    x, y = _ints(rank, COUNT, np.int64), np.zeros(COUNT, np.int64)
    comm.all_reduce(on_device(x), out=on_device(y))
    out["all_reduce/out"], out["all_reduce/x_kept"] = y, x
    for op in ("sum", "avg"):
        x, y = _ints(rank, 7 * world, np.int32), np.zeros(7, np.int32)
        comm.reduce_scatter(on_device(x), on_device(y), op)
        out[f"reduce_scatter/{op}"] = y
    for dtype in (np.int32, np.float64):
        x, y = _ints(rank, 5, dtype), np.zeros(5 * world, dtype)
        comm.all_gather(on_device(x), on_device(y))
        out[f"all_gather/{np.dtype(dtype).name}"] = y
    for root in (0, 4, 5):
        x = _ints(rank, COUNT, np.int64)
        comm.broadcast(on_device(x), root=root)
        out[f"broadcast/{root}"] = x
    x = _ints(rank, COUNT, np.int32)
    comm.reduce(on_device(x), root=5)
    out["reduce/5"] = x
    comm.barrier()
    for dtype in (np.float16, np.float32, np.float64):
        x = _floats(rank, COUNT, dtype)
        comm.all_reduce(on_device(x), accuracy="compensated")
        out[f"compensated/all_reduce/{np.dtype(dtype).name}"] = x
    x, y = _floats(rank, 3 * world, np.float32), np.zeros(3, np.float32)
    comm.reduce_scatter(on_device(x), on_device(y), accuracy="compensated")
    out["compensated/reduce_scatter"] = y
    x = _floats(rank, COUNT, np.float32)
    comm.reduce(on_device(x), root=2, accuracy="compensated")
    out["compensated/reduce/2"] = x
    x = _ints(rank, COUNT, np.int32)
    comm.all_reduce(on_device(x), async_op=True).wait()
    out["async"] = x
    _host_staged_collectives(comm, rank, world, on_device, out)
    # Refused before any data moves, on every rank alike: HCCL reduces no float64 and no uint8; and what does
    # not run across islands yet.
    out["refused/float64"] = raised(lambda: comm.all_reduce(on_device(np.ones(4, np.float64))))
    out["refused/uint8"] = raised(lambda: comm.all_reduce(on_device(np.ones(4, np.uint8)), "max"))
    out["refused/split"] = raised(lambda: comm.split(0))
    x = _ints(rank, 4, np.int32)
    comm.all_reduce(on_device(x))  # still usable
    out["after_refusals"] = x
    comm.close()
    return out


# The counts= forms' blocks: uneven, one rank's empty.
COUNTS = (3, 0, 2, 5, 1, 4)


def _host_staged_collectives(comm, rank, world, on_device, out):
    """What runs host-staged flat across islands: all_to_all, gather, scatter, the counts= forms, send/recv (a
    ring: blocking, then an async exchange); then ranks that disagree on the counts."""
    x, y = _ints(rank, 4 * world, np.int32), np.zeros(4 * world, np.int32)
    comm.all_to_all(on_device(x), on_device(y))
    out["all_to_all"] = y
    root = 4
    y = np.zeros(3 * world, np.int64) if rank == root else None
    comm.gather(on_device(_ints(rank, 3, np.int64)), on_device(y) if y is not None else None, root=root)
    out["gather/4"] = y if y is not None else np.zeros(0)
    x, y = (_ints(rank, 2 * world, np.int8) if rank == 2 else None), np.zeros(2, np.int8)
    comm.scatter(on_device(x) if x is not None else None, on_device(y), root=2)
    out["scatter/2"] = y
    y = np.zeros(sum(COUNTS), np.int32)
    comm.all_gather(on_device(_ints(rank, COUNTS[rank], np.int32)), on_device(y), counts=COUNTS)
    out["all_gather_v"] = y
    y = np.zeros(COUNTS[rank], np.int64)
    comm.reduce_scatter(on_device(_ints(rank, sum(COUNTS), np.int64)), on_device(y), "max", counts=COUNTS)
    out["reduce_scatter_v/max"] = y
    right, left = (rank + 1) % world, (rank - 1) % world
    y = np.zeros(5, np.int64)
    if rank % 2:
        comm.recv(on_device(y), left, tag=7)
        comm.send(on_device(_ints(rank, 5, np.int64)), right, tag=7)
    else:
        comm.send(on_device(_ints(rank, 5, np.int64)), right, tag=7)
        comm.recv(on_device(y), left, tag=7)
    out["send/recv"] = y
    y = np.zeros(5, np.int64)
    works = [comm.recv(on_device(y), right, async_op=True), comm.send(on_device(_ints(rank, 5, np.int64)), left,
                                                                      async_op=True)]
    for work in works:
        work.wait()
    out["send/recv/async"] = y
    mine = (2, 1) + COUNTS[2:] if rank == 3 else COUNTS  # rank 3's own block is the same length in both
    out["mismatch/counts"] = raised(lambda: comm.all_gather(
        on_device(_ints(rank, mine[rank], np.int32)), on_device(np.zeros(sum(mine), np.int32)), counts=mine))


def _check_host_staged(outs, world):
    ranks = range(world)
    for rank in ranks:
        got = outs[rank]
        np.testing.assert_array_equal(got["all_to_all"], np.concatenate(
            [_ints(r, 4 * world, np.int32)[rank * 4:(rank + 1) * 4] for r in ranks]))
        np.testing.assert_array_equal(got["scatter/2"], _ints(2, 2 * world, np.int8)[rank * 2:(rank + 1) * 2])
        np.testing.assert_array_equal(got["all_gather_v"], np.concatenate([_ints(r, COUNTS[r], np.int32)
                                                                           for r in ranks]))
        first = sum(COUNTS[:rank])
        np.testing.assert_array_equal(got["reduce_scatter_v/max"], np.max(
            [_ints(r, sum(COUNTS), np.int64)[first:first + COUNTS[rank]] for r in ranks], axis=0))
        np.testing.assert_array_equal(got["send/recv"], _ints((rank - 1) % world, 5, np.int64))
        np.testing.assert_array_equal(got["send/recv/async"], _ints((rank + 1) % world, 5, np.int64))
        kind, message = got["mismatch/counts"]
        assert kind == "MismatchError" and "rank 3" in message and "counts" in message, got["mismatch/counts"]
    np.testing.assert_array_equal(outs[4]["gather/4"], np.concatenate([_ints(r, 3, np.int64) for r in ranks]))


def _exact_sums(arrays):
    """Per element: the exact sum (math.fsum), rounded once to float64."""
    return np.array([math.fsum(column) for column in np.stack([a.astype(np.float64) for a in arrays]).T])


def _within_one_ulp(got, arrays):
    exact = _exact_sums(arrays)
    nearest = exact.astype(got.dtype)
    return np.all(np.abs(got.astype(np.float64) - exact) <= np.spacing(np.abs(nearest)).astype(np.float64))


def _trunc_div(total, n):
    return np.where(total < 0, -(np.abs(total) // n), total // n)


def _check_collectives(outs, devices):
    world = len(devices)
    ranks = range(world)
    for rank in ranks:
        assert outs[rank]["islands"] == outs[0]["islands"]
    for key in outs[0]:
        if isinstance(outs[0][key], np.ndarray):
            for rank in ranks:  # every rank bitwise the same (but what each rank keeps of its own)
                if not key.startswith(("reduce", "compensated/reduce", "all_reduce/x_kept", "all_to_all",
                                       "gather", "scatter", "send/recv")):
                    assert outs[rank][key].tobytes() == outs[0][key].tobytes(), (key, rank)
    ints = {dtype: [_ints(r, COUNT, dtype).astype(np.int64) for r in ranks] for dtype in (np.int32, np.int64)}
    got = outs[0]
    np.testing.assert_array_equal(got["all_reduce/sum"], sum(ints[np.int32]).astype(np.int32))
    np.testing.assert_array_equal(got["all_reduce/max"], np.max(ints[np.int64], axis=0))
    np.testing.assert_array_equal(got["all_reduce/min"], np.min([_ints(r, COUNT, np.int8) for r in ranks], axis=0))
    np.testing.assert_array_equal(got["all_reduce/avg"], _trunc_div(sum(ints[np.int32]), world))
    np.testing.assert_array_equal(got["all_reduce/prod"],
                                  np.prod([_ints(r, COUNT, np.int64, 1, 3) for r in ranks], axis=0))
    np.testing.assert_array_equal(got["all_reduce/out"], sum(ints[np.int64]))
    for rank in ranks:
        np.testing.assert_array_equal(outs[rank]["all_reduce/x_kept"], ints[np.int64][rank])
        whole = sum(_ints(r, 7 * world, np.int64) for r in ranks)[rank * 7:(rank + 1) * 7]
        np.testing.assert_array_equal(outs[rank]["reduce_scatter/sum"], whole)
        np.testing.assert_array_equal(outs[rank]["reduce_scatter/avg"], _trunc_div(whole, world))
    for dtype in ("int32", "float64"):
        np.testing.assert_array_equal(got[f"all_gather/{dtype}"],
                                      np.concatenate([_ints(r, 5, dtype) for r in ranks]))
    for root in (0, 4, 5):
        np.testing.assert_array_equal(got[f"broadcast/{root}"], ints[np.int64][root])
    np.testing.assert_array_equal(outs[5]["reduce/5"], sum(ints[np.int32]))
    for rank in range(5):
        np.testing.assert_array_equal(outs[rank]["reduce/5"], ints[np.int32][rank])  # off the root: unchanged
    for dtype in ("float16", "float32", "float64"):
        assert _within_one_ulp(got[f"compensated/all_reduce/{dtype}"], [_floats(r, COUNT, dtype) for r in ranks])
    for rank in ranks:
        whole = [_floats(r, 3 * world, np.float32)[rank * 3:(rank + 1) * 3] for r in ranks]
        assert _within_one_ulp(outs[rank]["compensated/reduce_scatter"], whole)
    assert _within_one_ulp(outs[2]["compensated/reduce/2"], [_floats(r, COUNT, np.float32) for r in ranks])
    np.testing.assert_array_equal(got["async"], sum(ints[np.int32]))
    np.testing.assert_array_equal(got["after_refusals"], sum(_ints(r, 4, np.int64) for r in ranks))
    _check_host_staged(outs, world)


@pytest.mark.timeout(90)
def test_two_nccl_two_hccl_two_host_ranks_run_every_collective_exactly(env):
    outs = run_ranks_ok(functools.partial(_collectives_rank, SIX, free_port()), len(SIX), env, timeout=80)
    assert outs[0]["island_ranks"] == [(0, 3), (1, 4), (2, 5)]
    assert "nccl (cuda memory) on host 0, ranks [0,3]" in outs[0]["islands"]
    assert "hccl (npu memory) on host 0, ranks [2,5]" in outs[0]["islands"]
    _check_collectives(outs, SIX)
    for rank, out in enumerate(outs):
        assert out["refused/float64"][0] == "TypeError" and "HCCL" in out["refused/float64"][1], out
        assert out["refused/uint8"][0] == "TypeError" and "uint8" in out["refused/uint8"][1], out
        assert out["refused/split"][0] == "NotImplementedError", out
        assert "across islands" in out["refused/split"][1], out


def _crossing_rank(devices, port, rank, world):
    """Fast-mode reductions across islands as PYCOLL_ISLANDS_CROSSING says; what ran, and what this rank's model
    picks for a small and a large call."""
    comm = _init(devices, port, rank, world)
    on_device = functools.partial(device_array, devices[rank])
    out = {}
    for op, dtype in (("sum", np.int32), ("avg", np.int32), ("max", np.int64)):
        x = _ints(rank, COUNT, dtype)
        comm.all_reduce(on_device(x), op)
        out[f"all_reduce/{op}"] = (x, comm.last_algorithm)
    x = _ints(rank, COUNT, np.int64)
    comm.reduce(on_device(x), root=4)
    out["reduce/4"] = (x, comm.last_algorithm)
    y = np.zeros(7, np.int32)
    comm.reduce_scatter(on_device(_ints(rank, 7 * world, np.int32)), on_device(y), "min")
    out["reduce_scatter/min"] = (y, comm.last_algorithm)
    model = comm._engine.crossing
    out["model"] = (model, model.choose(COUNT * 4), model.choose(COUNT * 8), model.choose(7 * world * 4))
    comm.close()
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("crossing", ["hierarchical", "host-staged", "auto"])
def test_a_fast_reduction_crosses_islands_as_the_setting_or_the_model_says_exactly_and_alike_on_every_rank(
        env, crossing):
    outs = run_ranks_ok(functools.partial(_crossing_rank, SIX, free_port()), len(SIX),
                        {**env, "PYCOLL_ISLANDS_CROSSING": crossing}, timeout=80)
    world, ranks = len(SIX), range(len(SIX))
    model, small, large, scattered = outs[0]["model"]
    assert model.forced == crossing
    assert all(out["model"] == outs[0]["model"] for out in outs)  # one model, one choice on every rank
    expected = {"all_reduce/sum": small, "all_reduce/avg": small, "all_reduce/max": large, "reduce/4": large,
                "reduce_scatter/min": scattered}
    if crossing != "auto":
        assert set(expected.values()) == {crossing}
    for rank in ranks:
        for key, ran in expected.items():
            assert outs[rank][key][1] == ran, (rank, key, outs[rank][key][1])
    ints32 = [_ints(r, COUNT, np.int32).astype(np.int64) for r in ranks]
    ints64 = [_ints(r, COUNT, np.int64) for r in ranks]
    for rank in ranks:
        np.testing.assert_array_equal(outs[rank]["all_reduce/sum"][0], sum(ints32))
        np.testing.assert_array_equal(outs[rank]["all_reduce/avg"][0], _trunc_div(sum(ints32), world))
        np.testing.assert_array_equal(outs[rank]["all_reduce/max"][0], np.max(ints64, axis=0))
        np.testing.assert_array_equal(outs[rank]["reduce_scatter/min"][0], np.min(
            [_ints(r, 7 * world, np.int32)[rank * 7:(rank + 1) * 7] for r in ranks], axis=0))
    np.testing.assert_array_equal(outs[4]["reduce/4"][0], sum(ints64))


def test_the_crossing_model_picks_host_staged_for_small_calls_and_hierarchical_for_large_ones():
    from pycoll.islands.crossing import CrossingModel
    gib = float(1 << 30)
    # Three islands of two: two of devices staging at 10 GiB/s, one of host ranks; host memory at 10 GiB/s.
    model = CrossingModel(((2, "cuda", 10 * gib), (2, "host", math.inf), (2, "npu", 10 * gib)), 10 * gib, 4 << 20)
    sizes = [1 << k for k in range(8, 31)]
    for staging in (10 * gib, gib / 10):  # over PCIe; and copies a hundred times slower
        model = model._replace(islands=tuple((size, memory, staging if memory != "host" else math.inf)
                                             for size, memory, _ in model.islands))
        choices = [model.choose(n) for n in sizes]
        assert choices[0] == "host-staged"  # two vendor steps saved
        assert choices[-1] == "hierarchical"  # three islands' bytes through host memory, not six ranks'
        crossover = choices.index("hierarchical")
        assert set(choices[crossover:]) == {"hierarchical"}, (staging, list(zip(sizes, choices)))
    for forced in ("hierarchical", "host-staged"):
        assert model._replace(forced=forced).choose(1024) == model._replace(forced=forced).choose(64 << 20) == forced


def _disagreeing_crossing_rank(devices, port, rank, world):
    os.environ["PYCOLL_ISLANDS_CROSSING"] = "host-staged" if rank == 2 else "hierarchical"
    return raised(lambda: _init(devices, port, rank, world))


@pytest.mark.timeout(60)
def test_ranks_setting_different_crossings_get_value_error_on_every_rank(env):
    results = run_ranks_ok(functools.partial(_disagreeing_crossing_rank, THREE, free_port()), 3, env, timeout=50)
    for kind, message in results:
        assert kind == "ValueError" and "PYCOLL_ISLANDS_CROSSING" in message and "rank 2" in message, message


def _small_mix_rank(devices, port, rank, world):
    """One host rank and two NCCL ranks: no HCCL, so float64 reduces; then ranks that disagree on a count."""
    comm = _init(devices, port, rank, world)
    kind = devices[rank]
    x = _floats(rank, COUNT, np.float64)
    comm.all_reduce(device_array(kind, x))
    leaders = comm._engine.leaders  # on leaders: the communicator the step between islands ran on
    crossing = (leaders.transport, leaders.native.last_algorithm) if leaders is not None else None
    assert comm.last_algorithm == "hierarchical"
    # Past one staging segment: the leaders' all-reduce runs in segments, pipelined with the copies (the last
    # one partial); avg divides each segment.
    from pycoll.islands.schedules import STAGING_SEGMENT_BYTES
    large = _ints(rank, 2 * STAGING_SEGMENT_BYTES // 4 + 12345, np.int32)
    comm.all_reduce(device_array(kind, large), "avg")
    y = _ints(rank, 6, np.int32)
    gathered = np.zeros(6 * world, np.int32)
    comm.all_gather(device_array(kind, y), device_array(kind, gathered))
    mismatch = raised(lambda: comm.all_reduce(device_array(kind, np.ones(8 if rank != 2 else 4, np.int32))))
    z = np.full(3, rank + 1, np.int32)
    comm.all_reduce(device_array(kind, z))  # the mismatch was caught before any data moved
    comm.close()
    return {"float64": x, "gathered": gathered, "mismatch": mismatch, "after": z, "crossing": crossing, "large": large,
            "islands": [(i.backend, i.ranks) for i in comm.islands]}


@pytest.mark.timeout(60)
def test_one_host_and_two_nccl_ranks_and_a_mismatch_on_every_rank(env):
    # Hierarchical whatever the crossing model would pick: the step between islands is what it looks at.
    outs = run_ranks_ok(functools.partial(_small_mix_rank, THREE, free_port()), 3, {**env, **HIERARCHICAL},
                        timeout=50)
    assert outs[0]["islands"] == [("cpu", (0,)), ("nccl", (1, 2))]
    # The leaders (ranks 0 and 1) have a host communicator of their own, which on one host runs the shared-memory
    # transport's own collectives (a split of the job's would run pycoll's generic schedules); rank 2 has none.
    assert [out["crossing"] for out in outs] == [("shm", "shm_slots"), ("shm", "shm_slots"), None]
    for out in outs:
        assert out["float64"].tobytes() == outs[0]["float64"].tobytes()
        np.testing.assert_array_equal(out["gathered"], np.concatenate([_ints(r, 6, np.int32) for r in range(3)]))
        kind, message = out["mismatch"]
        assert kind == "MismatchError", out["mismatch"]
        assert "8 elements" in message and "rank 2" in message and "4 elements" in message, message
        np.testing.assert_array_equal(out["after"], np.full(3, 6))
        count = len(out["large"])
        np.testing.assert_array_equal(out["large"], _trunc_div(sum(_ints(r, count, np.int64) for r in range(3)), 3))
    np.testing.assert_allclose(outs[0]["float64"], sum(_floats(r, COUNT, np.float64) for r in range(3)),
                               rtol=1e-12, atol=1e-9)


def _killed_rank(devices, port, victim, rank, world):
    comm = _init(devices, port, rank, world, timeout=8.0)
    x = np.ones(COUNT, np.float32)
    comm.all_reduce(device_array(devices[rank], x))
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    error = raised(lambda: comm.all_reduce(device_array(devices[rank], x)))
    return error, time.monotonic() - start


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [3, 2, 4], ids=["nccl-member", "hccl-leader", "host-member"])
def test_a_killed_rank_reaches_every_island_as_peer_failure(env, victim):
    results = run_ranks(functools.partial(_killed_rank, SIX, free_port(), victim), len(SIX), env, timeout=40,
                        wait_for=len(SIX) - 1)
    assert victim not in results
    for rank, (status, value) in results.items():
        assert status == "ok", value
        (kind, message), elapsed = value
        assert kind == "PeerFailure", (rank, kind, message)
        assert elapsed < 8.0, (rank, elapsed)


def _killed_in_vendor_step_rank(devices, port, victim, rank, world):
    """The victim passes the call's check, then dies inside its island's first step: its island peers are then
    waiting inside their vendor's collective, which only the deadline would end."""
    comm = _init(devices, port, rank, world, timeout=TIMEOUT_S)
    x = np.ones(COUNT, np.float32)
    comm.all_reduce(device_array(devices[rank], x))
    if rank == victim:
        inner = comm._engine.inner

        def dying(call, async_op=False):
            time.sleep(0.5)  # the peers are inside their vendor's wait by now
            os.kill(os.getpid(), signal.SIGKILL)

        inner.run = dying
    start = time.monotonic()
    error = raised(lambda: comm.all_reduce(device_array(devices[rank], x)))
    return error, time.monotonic() - start


TIMEOUT_S = 20.0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("victim", [3, 2], ids=["nccl-member", "hccl-leader"])
def test_a_rank_killed_inside_a_vendor_step_reaches_every_rank_as_peer_failure_long_before_the_deadline(
        env, victim):
    # Hierarchical whatever the crossing model would pick: the island's vendor step is where the victim dies.
    results = run_ranks(functools.partial(_killed_in_vendor_step_rank, SIX, free_port(), victim), len(SIX),
                        {**env, **HIERARCHICAL}, timeout=60, wait_for=len(SIX) - 1)
    assert victim not in results
    for rank, (status, value) in results.items():
        assert status == "ok", value
        (kind, message), elapsed = value
        assert kind == "PeerFailure", (rank, kind, message)
        assert elapsed < TIMEOUT_S / 4, (rank, elapsed, message)


@pytest.mark.timeout(90)
def test_the_readme_mixed_example_runs_on_the_fakes_and_says_which_islands_it_formed(env, tmp_path):
    example = ROOT / "examples" / "mixed_islands.py"
    done = subprocess.run([sys.executable, "-m", "pycoll", "run", "-n", "6", str(example)], cwd=tmp_path,
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "6 ranks formed 3 islands" in done.stdout, done.stdout
    assert "nccl (cuda memory) on host 0, ranks [0,1]" in done.stdout, done.stdout
    for rank, kind in enumerate(("cuda", "cuda", "npu", "npu", "host", "host")):
        assert f"rank {rank} ({kind}, " in done.stdout and "-> [21.0, 21.0, 21.0, 21.0]" in done.stdout, done.stdout
