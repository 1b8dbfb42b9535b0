"""The flight recorder (native/comm/flight_recorder.c): each communicator's record of its last calls, dumped as
JSON (docs/api.md's format) on a signal -- also by a rank stuck in a wait --, on a pycoll error, at close when
asked, and read from Python with trace_records(). Real rank processes on 127.0.0.1."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from multiproc import Ranks
from trace_dumps import check_trace_event_schema

pytestmark = pytest.mark.timeout(90)


def dumps(directory):
    """{rank: the dump} of every dump file in `directory` that is complete (they are written whole)."""
    out = {}
    for path in glob.glob(os.path.join(directory, "pycoll-trace-*-rank*.json")):
        with open(path) as f:
            dump = json.load(f)
        out[dump["rank"]] = dump
    return out


def pycoll_trace(*args):
    """`pycoll trace ...` as a user runs it, on the installed pycoll."""
    return subprocess.run([sys.executable, "-P", "-m", "pycoll", "trace", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def by_seq(dump):
    return {call["seq"]: call for call in dump["calls"]}


def stuck_in_50(dump):
    call = by_seq(dump).get(50)
    return call is not None and call["state"] == "running" and call["end_unix_ns"] is None


def test_a_signal_dumps_every_rank_naming_the_call_the_stalled_rank_never_entered(tmp_path):
    env = {"PYCOLL_TRACE_DIR": str(tmp_path), "PYCOLL_BACKEND": "shm"}
    with Ranks(4, "trace_worker.py", "stall", env=env, timeout=60) as job:
        assert json.loads(job.procs[2].stdout.readline()) == {"stalling": True}
        found = {}
        end = time.monotonic() + 30
        while not (len(found) == 4 and all(stuck_in_50(found[r]) for r in (0, 1, 3))):
            assert time.monotonic() < end, {r: d["calls"][-1:] for r, d in found.items()}
            for p in job.procs:
                os.kill(p.pid, signal.SIGUSR2)
            time.sleep(0.3)
            found = dumps(tmp_path)
        for r in (0, 1, 3):
            assert found[r]["reason"] == "signal" and found[r]["world"] == 4
            assert all(c["state"] == "completed" for s, c in by_seq(found[r]).items() if s != 50)
        stalled = found[2]["calls"]
        assert [c["seq"] for c in stalled] == list(range(1, 50)), "rank 2 never entered seq 50"
        assert all(c["state"] == "completed" and c["collective"] == "all_reduce" for c in stalled)
        assert len({d["comm_uid"] for d in found.values()}) == 1

        # pycoll trace, on these real dumps, names the rank and the call
        report = pycoll_trace(tmp_path)
        assert report.returncode == 1, report.stdout + report.stderr
        assert "HANG: rank 2 never entered all_reduce #50, which rank(s) 0, 1, 3 entered" in report.stdout

        # A rank stuck in its wait (GIL released, inside C) writes its file within a second of the signal.
        path = os.path.join(tmp_path, f"pycoll-trace-{found[0]['comm_uid']}-rank0.json")
        os.unlink(path)
        sent = time.monotonic()
        os.kill(job.procs[0].pid, signal.SIGUSR2)
        while not os.path.exists(path):
            assert time.monotonic() - sent < 1.0, "no dump within a second of the signal"
            time.sleep(0.01)
        assert stuck_in_50(dumps(tmp_path)[0])


def test_an_error_dumps_the_failing_call_on_every_rank(tmp_path):
    env = {"PYCOLL_TRACE_DIR": str(tmp_path), "PYCOLL_BACKEND": "tcp"}
    with Ranks(2, "trace_worker.py", "mismatch", env=env) as job:
        reports = job.reports()
    found = dumps(tmp_path)
    assert sorted(found) == [0, 1]
    for r in (0, 1):
        assert reports[r]["outcome"] == "MismatchError", reports[r]
        assert found[r]["reason"] == "error"
        last = found[r]["calls"][-1]
        assert last["seq"] == 4 and last["state"] == "failed" and last["end_unix_ns"] is not None, last
        assert last["collective"] == ("all_reduce" if r == 0 else "broadcast")
        assert "#4 all_reduce" in last["error"] and "#4 broadcast" in last["error"], last["error"]  # seq as errors
        assert [c["state"] for c in found[r]["calls"][:3]] == ["completed"] * 3


def test_the_ring_keeps_exactly_the_last_n_and_close_dumps_when_asked(tmp_path):
    env = {"PYCOLL_TRACE_BUFFER": "6", "PYCOLL_TRACE_DIR": str(tmp_path), "PYCOLL_TRACE_ON_CLOSE": "1"}
    with Ranks(2, "trace_worker.py", "ring", env=env) as job:
        reports = job.reports()
    found = dumps(tmp_path)
    for r in (0, 1):
        assert reports[r]["seqs"] == list(range(15, 21))
        assert found[r]["reason"] == "close"
        assert (found[r]["capacity"], found[r]["dropped"]) == (6, 14)
        assert [c["seq"] for c in found[r]["calls"]] == list(range(15, 21))


def test_no_buffer_records_nothing():
    with Ranks(2, "trace_worker.py", "ring", env={"PYCOLL_TRACE_BUFFER": "0"}) as job:
        reports = job.reports()
    assert reports[0]["seqs"] == [] and reports[1]["seqs"] == []


def test_an_async_record_ends_when_its_work_completes():
    env = {"PYCOLL_TRACE_DIR": ""}
    with Ranks(2, "trace_worker.py", "async", env=env) as job:
        report = job.reports()[0]
    queued, done = report["queued"], report["done"]
    assert queued["async"] is True and queued["state"] == "running" and queued["end_unix_ns"] is None
    assert done["seq"] == queued["seq"] == 1 and done["state"] == "completed"
    assert done["end_unix_ns"] - done["start_unix_ns"] > 300_000_000  # rank 1 joined 0.5 s late
    assert done["wait_peer"] == 1 and done["wait_ns"] > 300_000_000
    assert "PYCOLL_TRACE_DIR" in report["no_dir"]


def test_a_ten_thousand_call_job_opens_as_a_perfetto_trace_and_a_png(tmp_path):
    """A real job of 10,000 all-reduces, every call kept and dumped at close: pycoll trace merges it into a
    Perfetto trace with one event per call and rank (schema checked) and a PNG timeline. Two ranks, so that a
    loaded 2-core machine runs it in seconds (tests/tools/test_trace_tool.py merges 4 ranks' 10,000 calls)."""
    pytest.importorskip("matplotlib")
    env = {"PYCOLL_TRACE_DIR": str(tmp_path / "d"), "PYCOLL_TRACE_ON_CLOSE": "1", "PYCOLL_TRACE_BUFFER": "10000",
           "PYCOLL_BACKEND": "shm", "TRACE_CALLS": "10000"}
    with Ranks(2, "trace_worker.py", "many", env=env, timeout=80) as job:
        job.reports()
    out = pycoll_trace(tmp_path / "d", "--perfetto", tmp_path / "t.json", "--plot", tmp_path / "t.png")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    check_trace_event_schema(doc)
    calls = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(calls) == 2 * 10_000 and {e["pid"] for e in calls} == {0, 1}
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
