"""Processes that cannot form one job are told why at once, not at the deadline (real processes on 127.0.0.1):
two processes started as the same rank under pycoll.init(), and a unique id of another job under init_rank."""

import pytest
from multiproc import Ranks

DEADLINE = 30.0  # each rank's init timeout: what the old code waited out
PROMPT = 5.0  # "at once": well under the deadline, with room for a loaded machine


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_rank_started_twice_is_a_duplicate_rank_error_at_once(world_size):
    # Processes 0, 1 and 2 with RANK 0, 1, 1: at world size 2 the third is an extra process (the job itself can
    # form without it), at world size 3 rank 2 is missing and the job cannot form.
    # The job stays open a while, as a real one does: a process that comes after it closed finds no job at all.
    with Ranks(3, "rdv_worker.py", "late", timeout=DEADLINE, env={"TEST_HOLD": "3"},
               rank_env=lambda r: {"RANK": str(min(r, 1)), "WORLD_SIZE": str(world_size)}) as ranks:
        reports = ranks.reports(deadline_s=DEADLINE + 30)
    print({r: (rep.get("error"), round(rep["init_s"], 2)) for r, rep in reports.items()})
    duplicates = [r for r, rep in reports.items() if rep.get("error") == "DuplicateRank"]
    assert any(r in duplicates for r in (1, 2)), reports
    for rank, rep in reports.items():
        assert rep.get("ok") or rank in duplicates, (rank, rep)
        assert rep["init_s"] < PROMPT, (rank, rep)
    for rank in duplicates:
        message = reports[rank]["message"]
        assert "rank 1 was started twice" in message and reports[rank]["failed_rank"] == 1, message
        assert all(f"pid {ranks.procs[r].pid}" in message for r in (1, 2)), message
    if world_size == 3:  # rank 2 never comes: no rank may form the job
        assert duplicates == [0, 1, 2], reports


ID_JOB, ID_END = 28, 28 + 16 + 32  # the job and secret bytes of a unique id (native/bootstrap/unique_id.c)

# The root of a job: makes its id, hands it over (hex on stdout), and waits for its other rank.
_ROOT = """
import pycoll, sys
unique_id = pycoll.get_unique_id("lo")
print(unique_id.hex(), flush=True)
try:
    pycoll.init_rank(unique_id, 0, 2, timeout=30.0, ifname="lo")
except pycoll.PycollError:
    pass
"""
# A rank whose id names another job at the root's very address (a stale id, its port since reused).
_JOINER = """
import json, os, sys, time
import pycoll
unique_id = bytes.fromhex(sys.argv[1])
start = time.monotonic()
try:
    pycoll.init_rank(unique_id, 1, 2, timeout=30.0, ifname="lo")
    print(json.dumps({"error": None}))
except pycoll.PycollError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - start}))
"""


@pytest.mark.timeout(90)
def test_a_unique_id_of_another_job_is_an_authentication_error_at_once():
    import json
    import os
    import subprocess
    import sys

    root = subprocess.Popen([sys.executable, "-P", "-c", _ROOT], stdout=subprocess.PIPE, text=True)
    try:
        unique_id = bytes.fromhex(root.stdout.readline().strip())
        other_job = unique_id[:ID_JOB] + os.urandom(ID_END - ID_JOB) + unique_id[ID_END:]
        joiner = subprocess.run([sys.executable, "-P", "-c", _JOINER, other_job.hex()], capture_output=True, text=True,
                                timeout=DEADLINE + 30)
    finally:
        root.kill()
        root.wait()
        root.stdout.close()
    report = json.loads(joiner.stdout.strip().splitlines()[-1])
    print(report)
    assert report["error"] == "AuthenticationError", (report, joiner.stderr)
    assert "answers for another job" in report["message"] and "stale" in report["message"], report
    assert other_job[ID_JOB:ID_JOB + 8].hex() in report["message"], report  # the joiner's own job, named
    assert unique_id[ID_JOB:ID_JOB + 8].hex() not in report["message"], report  # nothing of the root's job
    assert report["seconds"] < PROMPT, report
