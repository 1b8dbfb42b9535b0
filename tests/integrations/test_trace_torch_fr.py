"""pycoll's records in torch's flight-recorder format: torch's own analyser
(python -m torch.distributed.flight_recorder.fr_trace) reads them and names the hung rank and the call."""

import pickle
import subprocess
import sys

import pytest
from trace_dumps import STEP, T0, call, dump, job, write

from pycoll.trace import read_dir, torch_fr

pytest.importorskip("torch.distributed.flight_recorder.fr_trace")


def fr_trace(directory):
    out = subprocess.run([sys.executable, "-P", "-m", "torch.distributed.flight_recorder.fr_trace", str(directory)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def converted(tmp_path, dumps):
    write(tmp_path / "pycoll", dumps)
    (tmp_path / "fr").mkdir()
    return torch_fr.convert(read_dir(tmp_path / "pycoll"), tmp_path / "fr")


def test_fr_trace_names_the_hung_rank_and_call(tmp_path):
    paths = converted(tmp_path, job(hang_rank=2, hang_before=49))
    assert [p.rsplit("/", 1)[1] for p in paths] == [f"torch_fr_rank_{r}" for r in range(4)]
    verdict = fr_trace(tmp_path / "fr")
    assert "Not all ranks joining collective, sequence number: 49" in verdict
    assert "missing ranks: {2}" in verdict
    assert "has errors" not in verdict  # the 49 before it all match


def test_fr_trace_finds_the_mismatched_count(tmp_path):
    converted(tmp_path, job(mismatch=(1, 7)))
    verdict = fr_trace(tmp_path / "fr")
    assert "Collective sequence number: 7 has errors" in verdict and "[[7]]" in verdict
    assert "sequence number: 6 has errors" not in verdict


def test_every_collective_of_a_clean_job_matches(tmp_path):
    """Sizes as torch expects them (all_gather's output world x count, reduce_scatter's input world x count,
    ...); rings that dropped different numbers of old calls are aligned by record id."""
    names = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "all_to_all", "gather",
             "scatter", "reduce"]
    dumps = []
    for r in range(4):
        calls = [call(s, T0 + s * STEP, T0 + s * STEP + 1000, collective=names[s % len(names)],
                      dtype="bfloat16") for s in range(r, 40)]  # rank r's ring dropped its first r calls
        calls.insert(2, call(0, T0 + 5, T0 + 6, collective="send"))  # point-to-point: left out
        dumps.append(dump(r, 4, calls))
    converted(tmp_path, dumps)
    with open(tmp_path / "fr" / "torch_fr_rank_1", "rb") as f:
        fr = pickle.load(f)
    assert fr["version"] == "2.10" and fr["pg_config"]["world"]["ranks"] == "[0, 1, 2, 3]"
    first = fr["entries"][0]
    assert first["record_id"] == 1 and first["input_dtypes"] == ["BFloat16"]
    assert {e["profiling_name"].split(":")[1] for e in fr["entries"]} == set(names)
    verdict = fr_trace(tmp_path / "fr")
    assert "has errors" not in verdict and "Not all ranks" not in verdict and "mismatch" not in verdict.lower()


@pytest.mark.timeout(120)
def test_torch_job_with_a_hung_rank(tmp_path):
    """4 ranks of the pycoll torch backend, rank 2 stalled before its 50th all_reduce: the others time out and
    dump, rank 2 dumps from its watcher; torch's fr_trace and pycoll trace both name rank 2 and that call."""
    from multiproc import Ranks

    with Ranks(4, "torch_trace_worker.py", env={"PYCOLL_TRACE_DIR": str(tmp_path)}) as job:
        reports = job.reports(deadline_s=90)
    assert {r: rep["error"] for r, rep in reports.items()} == {0: "Timeout", 1: "Timeout", 2: None, 3: "Timeout"}
    rank0 = read_dir(tmp_path)
    (dumps,) = rank0.values()
    reduces = [c for c in dumps[0].calls if c["collective"] == "all_reduce"]
    seq = reduces[49]["seq"]  # the 50th all_reduce, by its number on the communicator
    assert reduces[49]["state"] == "failed" and len(reduces) == 50
    verdict = fr_trace(tmp_path)
    assert f"Not all ranks joining collective, sequence number: {seq}\n" in verdict, verdict
    assert "missing ranks: {2}" in verdict, verdict
    out = subprocess.run([sys.executable, "-P", "-m", "pycoll", "trace", str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert f"HANG: rank 2 never entered all_reduce #{seq}, which rank(s) 0, 1, 3 entered" in out.stdout, out.stdout
