"""A mixed job (backend="auto": one host rank, three CUDA ranks on the fake NCCL) loses a rank and carries on:
the survivors agree, shrink, and their next collectives are exact. Inside the NCCL island the vendor
communicator is shrunk through ncclCommShrink (the fake checks NCCL's rules: only survivors call it, with the
same excluded ranks, after the parent was revoked or with NCCL_SHRINK_ABORT), or, with a libnccl from before
2.27 (no ncclCommShrink), created afresh among the survivors, its id passed without the store."""

import functools
import os
import signal

import numpy as np
import pytest
from fakes.vendor_harness import device_array, fake_library_env, run_ranks
from multiproc import free_port, raised

DEVICES = ("host", "cuda", "cuda", "cuda")
COUNT = 1001


def _shrinking_rank(victim, port, rank, world):
    import pycoll
    kind = DEVICES[rank]
    comm = pycoll.init("auto", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       device=kind, timeout=10.0)
    x = np.ones(COUNT, np.float32)
    comm.all_reduce(device_array(kind, x))
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    error = raised(lambda: comm.all_reduce(device_array(kind, x)))
    flag = comm.agree(1)
    new = comm.shrink()
    y = np.full(COUNT, rank + 1, np.int64)
    new.all_reduce(device_array(kind, y))
    gathered = np.zeros(3 * new.size, np.int32)
    new.all_gather(device_array(kind, np.full(3, rank, np.int32)), device_array(kind, gathered))
    out = {"error": error, "flag": flag, "failed": comm.failed_ranks, "ranks": new.ranks, "rank": new.rank,
           "islands": [(i.backend, i.ranks) for i in new.islands], "sum": y, "gathered": gathered,
           "old": raised(lambda: comm.all_reduce(device_array(kind, x)))}
    new.close()
    comm.close()
    return out


def _run(victim, env):
    results = run_ranks(functools.partial(_shrinking_rank, victim, free_port()), len(DEVICES), env, timeout=80,
                        wait_for=len(DEVICES) - 1)
    survivors = [r for r in range(len(DEVICES)) if r != victim]
    assert sorted(results) == survivors
    outs = {}
    for rank, (status, value) in results.items():
        assert status == "ok", value
        outs[rank] = value
    for rank, out in outs.items():
        assert out["error"] is not None and out["error"][0] in ("PeerFailure", "CommunicatorRevoked"), out["error"]
        assert out["flag"] == 1 and out["failed"] == [victim], out
        assert out["ranks"] == survivors and out["rank"] == survivors.index(rank), out
        assert out["islands"] == [("cpu", (0,)), ("nccl", (1, 2))], out
        np.testing.assert_array_equal(out["sum"], np.full(COUNT, sum(r + 1 for r in survivors)))
        np.testing.assert_array_equal(out["gathered"], np.repeat(np.array(survivors, np.int32), 3))
        assert out["old"] is not None, out  # the communicator that lost a rank refuses collectives
    with open(env["FAKE_COLL_LOG"]) as f:
        return f.read().splitlines()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victim", [1, 3], ids=["nccl-leader", "nccl-member"])
def test_a_nccl_island_that_lost_a_rank_is_shrunk_by_ncclcommshrink(tmp_path, victim):
    env = dict(fake_library_env("nccl", tmp_path), FAKE_COLL_LOG=str(tmp_path / "log"))
    log = _run(victim, env)
    lost = victim - 1  # the dead rank's number in the island (ranks 1, 2, 3 of the job)
    shrinks = [line for line in log if line.startswith("ncclCommShrink")]
    # Each survivor of the island called it once, excluding the dead rank; nothing was refused.
    assert sorted(line.split()[1] for line in shrinks) == sorted(
        f"rank={r}" for r in range(3) if r != lost), shrinks
    assert all(f"exclude={lost} " in line and "config=null" in line for line in shrinks), shrinks
    assert not [line for line in log if "ncclInvalidUsage" in line], log
    # No second rendezvous: the island's communicator of two came from the shrink, not from an init.
    assert not [line for line in log if line.startswith("ncclCommInitRankConfig") and "nranks=2" in line], log


@pytest.mark.timeout(120)
def test_without_ncclcommshrink_the_survivors_create_the_island_communicator_afresh(tmp_path):
    env = dict(fake_library_env("nccl", tmp_path, defines=["FAKE_NCCL_NO_SHRINK"]),
               FAKE_COLL_LOG=str(tmp_path / "log"))
    log = _run(3, env)
    assert not [line for line in log if line.startswith(("ncclCommShrink", "ncclCommRevoke"))], log
    created = [line for line in log if line.startswith("ncclCommInitRankConfig") and "nranks=2" in line]
    assert sorted(line.split()[1] for line in created) == ["rank=0", "rank=1"], created
