"""pycoll trace: merging dumps into hangs, stragglers and mismatches, the per-rank time, the Perfetto trace (its
schema checked here), the PNG, and clear errors on a missing or garbled directory."""

import json
import os
import resource
import subprocess
import sys

import pytest
import trace_dumps
from trace_dumps import check_trace_event_schema, job, write

from pycoll.trace import analysis, dumps, perfetto, read_dir


def trace(*args):
    """`pycoll trace ...` as a user runs it, on the installed pycoll."""
    return subprocess.run([sys.executable, "-P", "-m", "pycoll", "trace", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_hang_names_the_rank_and_the_call(tmp_path):
    write(tmp_path, job(hang_rank=2, hang_before=49))
    (report,) = analysis.analyze(read_dir(tmp_path))
    assert [(h.rank, h.seq, h.entered, h.last_seq) for h in report.hangs] == [(2, 49, [0, 1, 3], 48)]
    out = trace(tmp_path)
    assert out.returncode == 1, out.stderr
    assert "HANG: rank 2 never entered all_reduce #49, which rank(s) 0, 1, 3 entered; its last call was #48" \
        in out.stdout


def test_straggler_named_with_its_lag(tmp_path):
    write(tmp_path, job(straggler=3))
    (report,) = analysis.analyze(read_dir(tmp_path))
    assert {s.rank for s in report.stragglers} == {3} and len(report.stragglers) == 60
    assert all(s.lag_ns == trace_dumps.LATE for s in report.stragglers)
    out = trace(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 3 entered last 60 time(s)" in out.stdout and "no hang, mismatch" in out.stdout
    # the others waited on rank 3: the breakdown names it
    times = {t.rank: t for t in analysis.rank_times(read_dir(tmp_path))}
    assert max(times[0].waiting_on, key=times[0].waiting_on.get) == 3
    assert times[3].waiting_ns == 0 and times[0].gap_ns + times[0].in_collectives_ns == times[0].span_ns


def test_mismatch_names_both_sides(tmp_path):
    write(tmp_path, job(mismatch=(1, 7)))
    (report,) = analysis.analyze(read_dir(tmp_path))
    (m,) = report.mismatches
    assert m.seq == 7 and sorted(m.sides.values()) == [[0, 2, 3], [1]]
    out = trace(tmp_path)
    assert out.returncode == 1 and "MISMATCH at #7" in out.stdout and "count=7" in out.stdout


def test_missing_dump_and_several_communicators(tmp_path):
    world = job(uid="aa01")
    half = [trace_dumps.dump(r, 2, job(world=2, n=5)[r]["calls"], uid="bb02", name="half", parent_ranks=[0, 2])
            for r in range(2)]
    write(tmp_path, world[:3] + half)
    reports = analysis.analyze(read_dir(tmp_path))
    assert [(r.uid, r.world, r.missing) for r in reports] == [("aa01", 4, [3]), ("bb02", 2, [])]
    out = trace(tmp_path)
    assert out.returncode == 1 and "NO DUMP from rank(s) 3" in out.stdout and "communicator bb02 (half)" in out.stdout


@pytest.mark.parametrize("garble, says", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: json.dumps({**d, "format": "other"}), "not a pycoll trace dump"),
    (lambda d: json.dumps({**d, "version": 99}), "dump version 99"),
    (lambda d: json.dumps({**d, "calls": [{**d["calls"][0], "state": "weird"}]}), "call 0: state 'weird'"),
    (lambda d: json.dumps({**d, "calls": [{**d["calls"][0], "seq": "1"}]}), "call 0: 'seq' is '1'"),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "world"}), "the dump has no 'world'"),
])
def test_garbled_dump_names_the_file(tmp_path, garble, says):
    write(tmp_path, job(n=3))
    path = tmp_path / "pycoll-trace-c0ffee-rank1.json"
    path.write_text(garble(json.loads(path.read_text())))
    with pytest.raises(dumps.TraceFormatError, match=says) as info:
        read_dir(tmp_path)
    assert info.value.path == str(path)
    out = trace(tmp_path)
    assert out.returncode == 2 and str(path) in out.stderr and says.split("'")[0] in out.stderr


def test_missing_or_empty_directory(tmp_path):
    with pytest.raises(dumps.TraceFormatError, match="no such directory"):
        read_dir(tmp_path / "nope")
    with pytest.raises(dumps.TraceFormatError, match="holds no pycoll trace dump"):
        read_dir(tmp_path)
    out = trace(tmp_path / "nope")
    assert out.returncode == 2 and "no such directory" in out.stderr


def test_perfetto_trace_schema_and_content(tmp_path):
    write(tmp_path / "d", job(hang_rank=2, hang_before=49, straggler=3))
    out = trace(tmp_path / "d", "--perfetto", tmp_path / "t.json")
    assert out.returncode == 1, out.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    check_trace_event_schema(doc)
    calls = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(calls) == 3 * 50 + 49 and {e["pid"] for e in calls} == {0, 1, 2, 3}
    assert {e["args"]["state"] for e in calls if e["args"]["seq"] == 49} == {"running"}
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert any(e["pid"] == 2 and e["name"].startswith("hang: never entered all_reduce #49") for e in marks)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names[2].startswith("rank 2")


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    write(tmp_path / "d", job(hang_rank=2, hang_before=49, mismatch=(1, 7)))
    out = trace(tmp_path / "d", "--plot", tmp_path / "t.png")
    assert out.returncode == 1, out.stderr
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ten_thousand_calls_in_seconds(tmp_path):
    """4 ranks x 10,000 calls: merge, report, Perfetto and PNG together in seconds."""
    pytest.importorskip("matplotlib")
    write(tmp_path / "d", job(n=10_000, straggler=1))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = trace(tmp_path / "d", "--perfetto", tmp_path / "t.json", "--plot", tmp_path / "t.png")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert out.returncode == 0, out.stderr
    check_trace_event_schema(json.loads((tmp_path / "t.json").read_text()))
    assert os.path.getsize(tmp_path / "t.png") > 0
    # CPU time, which other jobs on a shared machine do not stretch as they stretch the wall clock
    took = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert took < 10, f"took {took:.1f} s of CPU"


def test_perfetto_events_of_running_calls_end_at_the_dump(tmp_path):
    write(tmp_path, job(hang_rank=2, hang_before=3, n=5))
    comms = read_dir(tmp_path)
    events = perfetto.events(comms, analysis.analyze(comms))
    (running,) = [e for e in events if e["ph"] == "X" and e["pid"] == 0 and e["args"]["seq"] == 3]
    dumped = comms["c0ffee"][0].data["dumped_unix_ns"]
    assert running["ts"] + running["dur"] == pytest.approx((dumped - perfetto.origin_ns(comms)) / 1e3)


def test_a_rank_without_a_dump_is_named_where_the_others_wait(tmp_path):
    dumps_ = job(hang_rank=2, hang_before=49)
    write(tmp_path / "d", dumps_[:2] + dumps_[3:])
    (report,) = analysis.analyze(read_dir(tmp_path / "d"))
    assert [(h.rank, h.seq, h.dumped) for h in report.hangs] == [(2, 49, False)]
    out = trace(tmp_path / "d", "--perfetto", tmp_path / "t.json")
    assert out.returncode == 1 and "HANG: rank 2 never entered all_reduce #49" in out.stdout
    doc = json.loads((tmp_path / "t.json").read_text())
    check_trace_event_schema(doc)
    assert any(e["ph"] == "i" and e["pid"] == 2 for e in doc["traceEvents"])


def test_bench_keeps_the_trace_of_its_run(tmp_path):
    out = subprocess.run([sys.executable, "-P", "-m", "pycoll", "bench", "-n", "2", "-b", "8", "-e", "8", "--iters",
                          "3", "--warmup", "1", "--trace", str(tmp_path / "t")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"pycoll trace {tmp_path / 't'}" in out.stdout
    comms = read_dir(tmp_path / "t")
    world = [dumps_ for dumps_ in comms.values() if dumps_[0].data["world"] == 2]
    assert world and [d.rank for d in world[0]] == [0, 1]
    assert {d.data["reason"] for d in world[0]} == {"close"}
    assert any(c["collective"] == "all_reduce" and c["state"] == "completed" for c in world[0][0].calls)
    assert trace(tmp_path / "t").returncode == 0
