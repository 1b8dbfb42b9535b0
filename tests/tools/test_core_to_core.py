"""bench/core_to_core.py, the probe that bench/mpi_peers.py runs before each run to record how fast the machine
moved data between two cores then: it measures a real round trip (two processes, each pinned to a core), leaves
nothing behind (no process, no shared-memory segment, this process's affinity as it was), and says so where it
cannot measure."""

import os
import subprocess
import sys

import pytest
from repo_paths import ROOT

SCRIPT = ROOT / "bench" / "core_to_core.py"


def _module(monkeypatch):
    # by name, from bench/, as bench/mpi_peers.py imports it: the probe's far process imports it again
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import core_to_core

    return core_to_core


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_round_trips_measure_each_window_and_restore_the_affinity(monkeypatch):
    probe = _module(monkeypatch)
    before = os.sched_getaffinity(0)
    shm_before = set(os.listdir("/dev/shm"))
    medians = probe.round_trips(seconds=0.4, nbytes=4096, every=0.1)
    assert len(medians) == 4
    # a round trip copies 4 KiB twice between two spinning processes: far less than the 50 ms that starting the
    # far process takes (which must not count as one)
    assert all(0.001 < m < 50_000 for m in medians), medians
    assert os.sched_getaffinity(0) == before
    # Its own segment only (multiprocessing's psm_ names): other jobs' segments may come and go meanwhile.
    assert {name for name in set(os.listdir("/dev/shm")) - shm_before if name.startswith("psm_")} == set()


def test_one_core_gives_nothing_to_measure():
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-P", str(SCRIPT), "--seconds", "0.2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "fewer than two cores" in done.stdout
