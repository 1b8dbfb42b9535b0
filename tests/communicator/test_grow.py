"""Growing a job (docs/fault_tolerance.md), with real processes on 127.0.0.1: 3 ranks grow to 4 with a new process
that joins by unique id, or by the launcher's variables and the rendezvous store; 4 ranks lose one (kill -9),
shrink to 3 and grow back to 4 with a replacement (how long its join took is printed: run with -s); bad input
and a member or the members missing end in typed errors within their deadlines."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from multiproc import SCRIPTS, Ranks, backend_fixture

import pycoll

backend = backend_fixture(["cpu", "tcp"])
pytestmark = pytest.mark.timeout(90)
TRANSPORT = {"cpu": "shm", "tcp": "tcp"}  # what the grown job on one host runs over


def start_joiner(job, *args, timeout=20, env=None):
    """The new process: grow_joiner.py with the job's launcher variables (rank 3 of 4)."""
    child_env = dict(os.environ, RANK="3", WORLD_SIZE="4", LOCAL_RANK="3", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(job.port), TEST_TIMEOUT=str(timeout), **(env or {}))
    return subprocess.Popen([sys.executable, str(SCRIPTS / "grow_joiner.py"), *args], env=child_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def joiner_report(proc, deadline_s=60):
    stdout, stderr = proc.communicate(timeout=deadline_s)
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    assert lines, f"the new process exited {proc.returncode}: {stdout}\n{stderr}"
    return json.loads(lines[-1])


def check_grown(members, joined, backend):
    for r, rep in members.items():
        assert rep.get("ok"), (r, rep)
    assert joined.get("ok"), joined
    for rep in [*members.values(), joined]:
        assert rep["sum"] == 10.0 and rep["transport"] == TRANSPORT[backend], rep
    assert sorted(rep["rank"] for rep in [*members.values(), joined]) == [0, 1, 2, 3]
    assert joined["rank"] == 3 and joined["size"] == 4


def test_three_ranks_grow_to_four_with_a_new_process(backend, tmp_path, no_segment_left):
    id_file = tmp_path / "grow_id"
    with Ranks(3, "grow_worker.py", "grow", env={"GROW_ID_FILE": str(id_file)}) as job:
        joiner = start_joiner(job, str(id_file), "3", "4")
        try:
            joined = joiner_report(joiner)
        finally:
            joiner.kill()
        members = job.reports()
    check_grown(members, joined, backend)
    assert [members[r]["rank"] for r in range(3)] == [0, 1, 2]  # the members keep their ranks


def test_a_relaunched_process_joins_by_the_launchers_variables(tmp_path, no_segment_left):
    with Ranks(3, "grow_worker.py", "store") as job:
        joiner = start_joiner(job, "-")
        try:
            joined = joiner_report(joiner)
        finally:
            joiner.kill()
        members = job.reports()
    check_grown(members, joined, "cpu")


def test_a_killed_rank_is_replaced_shrink_then_grow(backend, tmp_path, no_segment_left):
    id_file = tmp_path / "grow_id"
    victim = 1
    with Ranks(4, "grow_worker.py", "replace", env={"GROW_ID_FILE": str(id_file)}) as job:
        job.wait_ready(range(4))
        time.sleep(0.3)
        killed_at = time.time()
        os.kill(job.procs[victim].pid, signal.SIGKILL)
        joiner = start_joiner(job, str(id_file), "3", "4")
        try:
            joined = joiner_report(joiner)
        finally:
            joiner.kill()
        members = job.reports([0, 2, 3])
    check_grown(members, joined, backend)
    for r, rep in members.items():
        assert rep["failed_rank"] == victim and rep["ranks"] == [0, 2, 3], (r, rep)
    assert [members[r]["rank"] for r in (0, 2, 3)] == [0, 1, 2]  # the survivors, in their old order
    back = max(rep["done"] for rep in members.values()) - killed_at
    print(f"\n{backend}: the replacement's pycoll.join took {joined['join_s'] * 1e3:.0f} ms; from the kill -9 to "
          f"the grown job's collectives done (the replacement's start included): {back * 1e3:.0f} ms")
    assert joined["join_s"] < 10.0  # generous: the machine is shared; the measured time is printed above


def test_grow_refuses_a_size_it_cannot_grow_to():
    comm = pycoll.init_rank(pycoll.get_unique_id(toward="127.0.0.1"), 0, 1, backend="tcp", timeout=5)
    try:
        for size in (1, 0, -3):
            with pytest.raises(ValueError, match="world_size must be larger than this communicator's size 1"):
                comm.grow(size)
        with pytest.raises(TypeError, match="world_size"):
            comm.grow(2.0)
        with pytest.raises(ValueError, match="unique_id must be 128 bytes"):
            comm.grow(2, unique_id=b"short")
        with pytest.raises(pycoll.PycollError, match="has none .*pass unique_id"):
            comm.grow(2, timeout=2)  # no id and no rendezvous store (init_rank)
    finally:
        comm.close()


def test_join_refuses_bad_input():
    uid = pycoll.get_unique_id(toward="127.0.0.1")
    with pytest.raises(ValueError, match="not a pycoll unique id"):
        pycoll.join(os.urandom(len(uid)), 1, 2, timeout=2)
    with pytest.raises(ValueError, match="rank 0 is always a member"):
        pycoll.join(uid, 0, 2, timeout=2)
    with pytest.raises(ValueError, match=r"rank must be in \[1, world_size=2\)"):
        pycoll.join(uid, 2, 2, timeout=2)
    with pytest.raises(TypeError, match="unique_id must be bytes"):
        pycoll.join("id", 1, 2, timeout=2)


def test_a_joiner_whose_members_never_come_times_out_saying_so():
    # An id whose maker (this process) never takes part: the new process waits for members that never come.
    uid = pycoll.get_unique_id(toward="127.0.0.1")
    code = ("import sys, pycoll\ntry:\n    pycoll.join(bytes.fromhex(sys.argv[1]), 3, 4, timeout=1.5)\n"
            "except pycoll.Timeout as exc:\n    print('Timeout:', exc)\n")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-P", "-c", code, uid.hex()], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 15, "join outlived its deadline"
    assert "Timeout: pycoll.join as rank 3 of 4" in out.stdout, out.stdout + out.stderr
    assert "comm.grow(4)" in out.stdout, out.stdout


def test_a_member_missing_from_the_grow_is_named(tmp_path, no_segment_left):
    id_file = tmp_path / "grow_id"
    with Ranks(3, "grow_worker.py", "missing", env={"GROW_ID_FILE": str(id_file)}) as job:
        joiner = start_joiner(job, str(id_file), "3", "4", timeout=3)
        try:
            joined = joiner_report(joiner)
        finally:
            joiner.kill()
        members = job.reports()
    for r in (0, 1):  # within the grow's deadline (3 s), not the communicator's (20 s), naming the missing rank
        assert members[r]["error"] == "Timeout" and "rank 2" in members[r]["message"], members[r]
    assert joined["error"] in ("Timeout", "PeerFailure") and not joined["ok"], joined
