"""backend="auto" where every rank brings host memory: two hosts (faked with PYCOLL_HOSTID, shared memory within
each, TCP between) form two host islands, and with no vendor anywhere each call runs on the job's host
communicator as backend="cpu" runs it -- the same algorithm, the same bits, a mismatch reported by that
communicator on every rank, a killed rank reported to every survivor -- without the islands' per-call steps.
PYCOLL_ISLANDS_CROSSING, where set, still runs the islands' schedules."""

import functools
import os
import signal
import time

import numpy as np
import pytest
from fakes.vendor_harness import run_ranks, run_ranks_ok
from multiproc import free_port, raised

RANKS_PER_HOST = 2
WORLD = 4
COUNT = 1001


def _init(backend, port, rank, world, timeout=20.0):
    import pycoll

    os.environ["PYCOLL_HOSTID"] = f"fake-host-{rank // RANKS_PER_HOST}"
    return pycoll.init(backend, rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       timeout=timeout)


def _floats(rank, count):
    rng = np.random.default_rng(rank)
    return (rng.standard_normal(count) * 10.0 ** rng.integers(-3, 7, count)).astype(np.float32)


def _calls(comm, rank, world):
    """Each call's result (a copy) and the algorithm it ran, in call order."""
    ran = []

    def record(name, result):
        ran.append((name, np.array(result, copy=True), comm.last_algorithm))

    for count in (3, COUNT, 300_001):  # recursive doubling, halving-doubling, the hierarchical all-reduce
        x = _floats(rank, count)
        comm.all_reduce(x)
        record(f"all_reduce/{count}", x)
    x = _floats(rank, COUNT)
    comm.all_reduce(x, accuracy="compensated")
    record("all_reduce/compensated", x)
    x, y = np.arange(7 * world, dtype=np.int32) * (rank + 1), np.zeros(7, np.int32)
    comm.reduce_scatter(x, y)
    record("reduce_scatter", y)
    x, y = np.full(5, rank, np.int64), np.zeros(5 * world, np.int64)
    comm.all_gather(x, y)
    record("all_gather", y)
    x = np.arange(COUNT, dtype=np.float64) * (rank + 1)
    comm.broadcast(x, root=3)
    record("broadcast/3", x)
    x = np.full(4, rank + 1, np.int32)
    comm.all_reduce(x, async_op=True).wait()
    record("async", x)
    # A ring of messages: each receive posted first, in the background, then the blocking send.
    got = np.zeros(6, np.int64)
    work = comm.recv(got, (rank - 1) % world, tag=7, async_op=True)
    comm.send(np.full(6, rank, np.int64), (rank + 1) % world, tag=7)
    work.wait()
    ran.append(("recv", got.copy(), None))
    # Sub-communicators: by host (shared memory only), and across hosts (ranks 0 and 2, 1 and 3: TCP only).
    local, across = comm.split_by_host(), comm.split(rank % 2, key=rank)
    for name, sub in (("split_by_host", local), ("split", across)):
        x = np.full(5, rank + 1, np.int32)
        sub.all_reduce(x)
        ran.append((name, x, (tuple(sub.ranks), sub.hosts)))
    return ran


def _auto_beside_cpu_rank(ports, rank, world):
    """The same calls on backend="auto" and then on backend="cpu", over the same faked hosts."""
    auto = _init("auto", ports[0], rank, world)
    islands = [(island.backend, island.memory, island.ranks) for island in auto.islands]
    on_auto = _calls(auto, rank, world)
    auto.close()
    cpu = _init("cpu", ports[1], rank, world)
    on_cpu = _calls(cpu, rank, world)
    cpu.close()
    return islands, on_auto, on_cpu


@pytest.mark.timeout(120)
def test_host_islands_run_each_call_as_the_cpu_backend_does():
    outs = run_ranks_ok(functools.partial(_auto_beside_cpu_rank, (free_port(), free_port())), WORLD, {}, timeout=100)
    assert outs[0][0] == [("cpu", "host", (0, 1)), ("cpu", "host", (2, 3))]
    for islands, on_auto, on_cpu in outs:
        assert islands == outs[0][0]
        assert [name for name, _, _ in on_auto] == [name for name, _, _ in on_cpu]
        for (name, got, algorithm), (_, want, cpu_algorithm) in zip(on_auto, on_cpu):
            # The cpu backend's own choice (the islands' steps would say "host-staged" or "hierarchical" for
            # every call here), and its bits.
            assert algorithm == cpu_algorithm, (name, algorithm, cpu_algorithm)
            assert got.tobytes() == want.tobytes(), name
    names = {name: algorithm for name, _, algorithm in outs[0][1]}
    assert names[f"all_reduce/{300_001}"] == "hierarchical"  # the cpu backend's host-aware schedule ran
    assert names["all_reduce/3"] != "host-staged"
    for rank, (_, on_auto, _) in enumerate(outs):
        ran = {name: (result, what) for name, result, what in on_auto}
        np.testing.assert_array_equal(ran["recv"][0], np.full(6, (rank - 1) % WORLD))
        host = rank // RANKS_PER_HOST
        mates = tuple(range(host * RANKS_PER_HOST, (host + 1) * RANKS_PER_HOST))
        assert ran["split_by_host"][1] == (mates, 1), ran["split_by_host"]
        np.testing.assert_array_equal(ran["split_by_host"][0], np.full(5, sum(r + 1 for r in mates)))
        peers = tuple(r for r in range(WORLD) if r % 2 == rank % 2)
        assert ran["split"][1] == (peers, 2), ran["split"]
        np.testing.assert_array_equal(ran["split"][0], np.full(5, sum(r + 1 for r in peers)))
    # Exact where exact: the all-gather and the integer reduce-scatter.
    np.testing.assert_array_equal(outs[1][1][5][1], np.repeat(np.arange(WORLD), 5))
    want = (np.arange(7 * WORLD, dtype=np.int32) * sum(r + 1 for r in range(WORLD)))[7:14]
    np.testing.assert_array_equal(outs[1][1][4][1], want)


def _mismatch_rank(port, rank, world):
    comm = _init("auto", port, rank, world, timeout=10.0)

    def barrier_then_mismatch():
        # The barrier keeps the mismatch out of a slower rank's init; a rank still inside the barrier when it is
        # found gets it there (as on backend="cpu": the job's communicator reports it to every rank at once).
        comm.barrier()
        comm.all_reduce(np.ones(8 if rank != 2 else 4, np.int32))

    start = time.monotonic()
    error = raised(barrier_then_mismatch)
    return error, time.monotonic() - start


@pytest.mark.timeout(60)
def test_a_mismatch_is_reported_on_every_rank_long_before_the_deadline():
    for kind_message, elapsed in run_ranks_ok(functools.partial(_mismatch_rank, free_port()), WORLD, {}, timeout=50):
        kind, message = kind_message
        assert kind == "MismatchError", kind_message
        assert "rank 2" in message and "x 4" in message and "x 8" in message, message
        assert elapsed < 5.0, (elapsed, message)


def _forced_crossing_rank(port, rank, world):
    comm = _init("auto", port, rank, world)
    x = np.full(COUNT, rank + 1, np.int32)
    comm.all_reduce(x)
    algorithm = comm.last_algorithm
    comm.close()
    return x, algorithm


@pytest.mark.timeout(60)
def test_a_crossing_set_in_the_environment_still_runs_the_islands_steps():
    outs = run_ranks_ok(functools.partial(_forced_crossing_rank, free_port()), WORLD,
                        {"PYCOLL_ISLANDS_CROSSING": "hierarchical"}, timeout=50)
    for x, algorithm in outs:
        assert algorithm == "hierarchical", algorithm  # the islands' schedule: the cpu backend picks another here
        np.testing.assert_array_equal(x, np.full(COUNT, sum(r + 1 for r in range(WORLD))))


def _killed_rank(port, victim, rank, world):
    comm = _init("auto", port, rank, world, timeout=8.0)
    x = np.ones(COUNT, np.float32)
    start = time.monotonic()
    if rank == victim:
        comm.all_reduce(x)
        os.kill(os.getpid(), signal.SIGKILL)
    # A survivor still inside the first call when the victim dies learns of it there, the others in the second.
    error = raised(lambda: (comm.all_reduce(x), comm.all_reduce(x)))
    elapsed = time.monotonic() - start
    flag = comm.agree(1)
    new = comm.shrink()
    y = np.full(COUNT, rank + 1, np.int64)
    new.all_reduce(y)
    out = {"error": error, "elapsed": elapsed, "flag": flag, "failed": comm.failed_ranks, "ranks": new.ranks,
           "islands": [(island.memory, island.ranks) for island in new.islands], "sum": y,
           "algorithm": new.last_algorithm}
    new.close()
    comm.close()
    return out


@pytest.mark.timeout(90)
def test_a_killed_rank_reaches_every_survivor_and_the_survivors_shrink_and_carry_on():
    victim = 3
    results = run_ranks(functools.partial(_killed_rank, free_port(), victim), WORLD, {}, timeout=70,
                        wait_for=WORLD - 1)
    survivors = [r for r in range(WORLD) if r != victim]
    assert sorted(results) == survivors
    for rank, (status, out) in results.items():
        assert status == "ok", out
        assert out["error"] is not None and out["error"][0] in ("PeerFailure", "CommunicatorRevoked"), out["error"]
        assert out["elapsed"] < 8.0, out
        assert out["flag"] == 1 and out["failed"] == [victim], out
        assert out["ranks"] == survivors, out
        # Host 1 kept one rank: still two host islands, and still no islands' steps.
        assert out["islands"] == [("host", (0, 1)), ("host", (2,))], out
        assert out["algorithm"] != "host-staged", out
        np.testing.assert_array_equal(out["sum"], np.full(COUNT, sum(r + 1 for r in survivors)))
