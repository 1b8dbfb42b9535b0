"""bench/spin_one_host.py's short form: one repetition of two spin values and the library's default on 2 ranks,
each setting's row with every repetition's time, and each spin's ratio to the default."""

import os
import subprocess
import sys

import pytest
from repo_paths import ROOT

pytestmark = pytest.mark.timeout(180)


def test_a_short_run_writes_a_column_per_spin_and_their_ratios(tmp_path):
    out = tmp_path / "spin.md"
    # From outside the source tree, so that the ranks import the installed pycoll.
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "spin_one_host.py"), "--worlds", "2", "--spins",
                           "0,50", "--reps", "1", "--compare", "", "--sizes", "4,1k", "--out", str(out)],
                          capture_output=True, text=True, timeout=170, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    assert "PYCOLL_SPIN_US=50 python -m pycoll bench -n N -b 4 -e 1024 -f 4" in text, text
    assert "Wrong results over every row: 0." in text, text
    header = next(line for line in text.splitlines() if line.startswith("| size |"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "size", "spin 0 us", "spin 50 us", "default (unset)", "spin 0 / default", "spin 50 / default"], header
    for size in ("4 B", "1 KiB"):
        cells = next(line for line in text.splitlines() if line.startswith(f"| {size} |")).strip("|").split("|")
        assert all(float(c.split("(")[0]) > 0 for c in cells[1:]), cells  # times and ratios, all numbers


def test_a_peer_that_is_not_installed_is_named_not_dropped(tmp_path):
    out = tmp_path / "spin.md"
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BENCH_MPICH"}  # MPICH: nowhere to be found
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "spin_one_host.py"), "--worlds", "2", "--spins",
                           "50", "--reps", "1", "--compare", "mpich", "--sizes", "4", "--out", str(out)],
                          capture_output=True, text=True, timeout=170, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    assert "Asked for but not measured (not installed here, so pycoll bench skipped them): mpich." in text, text


def test_before_runs_another_interpreters_pycoll_beside_the_default(tmp_path):
    out = tmp_path / "spin.md"
    # The same interpreter stands in for another build: what is checked is that a job runs with it, unset spin.
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "spin_one_host.py"), "--worlds", "2", "--spins", "0",
                           "--reps", "1", "--compare", "", "--sizes", "4", "--before", sys.executable, "--out",
                           str(out)], capture_output=True, text=True, timeout=170, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    assert f"PYCOLL_SPIN_US=0 {sys.executable} -m pycoll bench -n N -b 4 -e 4 -f 4" in text, text
    assert f"\n    {sys.executable} -m pycoll bench -n N -b 4 -e 4 -f 4" in text, text
    assert f"--before {sys.executable}`" in text, text
    header = next(line for line in text.splitlines() if line.startswith("| size |"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "size", "before, spin 0 us", "spin 0 us", "before (unset)", "default (unset)", "before, spin 0 / spin 0",
        "spin 0 / default", "before / default"], header
    cells = next(line for line in text.splitlines() if line.startswith("| 4 B |")).strip("|").split("|")
    assert all(float(c.split("(")[0]) > 0 for c in cells[1:]), cells
