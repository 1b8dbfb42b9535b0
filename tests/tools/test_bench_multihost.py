"""bench/multihost.py's short form: a table from one small run across namespace hosts, a tiny job of each peer
that is installed here (bench/multihost_peers.py) with its numbers checked, and nothing left behind (namespaces,
veths, ranks) when it finishes or is stopped by SIGTERM mid-run. Needs root and iproute2."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_paths import ROOT

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

SCRIPT = ROOT / "bench" / "multihost.py"
sys.path.insert(0, str(ROOT / "bench"))
import multihost_peers  # noqa: E402


def bench(*args, stderr=subprocess.DEVNULL):
    return subprocess.Popen([sys.executable, "-P", str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=stderr,
                            text=True, cwd="/")


def namespaces_of(pid):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"pcmh{pid % 100000}-")]


def children_of(pid):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


@pytest.fixture(autouse=True)
def root_only():
    if os.geteuid() != 0:
        pytest.skip("needs root to make network namespaces")


def test_a_small_run_writes_its_table_and_removes_its_hosts(tmp_path):
    out = tmp_path / "multihost.md"
    proc = bench("--layouts", "2x1", "--libs", "default,tcp", "--reps", "1", "--max-mib", "0", "--out", str(out))
    stdout, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, stdout
    text = out.read_text()
    assert "## 2 hosts x 1 rank" in text and "Wrong results over every call: default 0, tcp 0." in text, text
    assert "cpu/tcp" in text and "tcp/tcp" in text, text  # what each ran, as the ranks reported it
    row = next(line for line in text.splitlines() if line.startswith("| 4 B |"))
    assert len(row.split("|")) == 6, row  # size, default, tcp, ratio (no peer: "-")
    assert namespaces_of(proc.pid) == []


def test_spins_run_one_job_each_and_mtu_reaches_the_veths(tmp_path):
    """--spins 0,50: a column per PYCOLL_SPIN_US value, each job's ranks reporting the spin they polled;
    --mtu 9000: every veth at that MTU, as read back from a host; --accuracy compensated: the ranks' calls ask
    for it and say so (results still exact)."""
    out = tmp_path / "multihost.md"
    proc = bench("--layouts", "2x1", "--libs", "default", "--spins", "0,50", "--mtu", "9000", "--reps", "1",
                 "--sizes", "4", "--accuracy", "compensated", "--out", str(out))
    stdout, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, stdout
    text = out.read_text()
    assert ("default@0: cpu/tcp, spin 0 us, accuracy compensated; "
            "default@50: cpu/tcp, spin 50 us, accuracy compensated.") in text, text
    assert "Wrong results over every call: default@0 0, default@50 0." in text, text
    assert "MTU 9000 (read back from host 0's eth0)" in text, text
    assert "--spins 0,50 --mtu 9000 --accuracy compensated" in text, text
    header = next(line for line in text.splitlines() if line.startswith("| size |"))
    assert "default@0 (us) | default@50 (us)" in header, header
    assert namespaces_of(proc.pid) == []


def test_sigterm_mid_run_removes_namespaces_and_ranks(tmp_path):
    proc = bench("--layouts", "2x2", "--libs", "default", "--reps", "3", "--out", str(tmp_path / "x.md"))
    try:
        assert "rep 1/3" in proc.stdout.readline()  # the hosts exist and the first job is starting
        ranks, deadline = [], time.monotonic() + 60
        while len(ranks) < 4 and time.monotonic() < deadline:
            ranks = children_of(proc.pid)
            time.sleep(0.05)
        assert len(ranks) == 4, ranks
        assert namespaces_of(proc.pid), "no namespaces while the run goes"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert namespaces_of(proc.pid) == []
    assert [pid for pid in ranks if Path(f"/proc/{pid}").exists()] == [], "ranks left running"


@pytest.mark.peers
# Busy-polling Open MPI runs the same launcher and worker as the yielding one (only an MCA setting differs) and
# takes longest on shared cores: it runs with -m stress.
@pytest.mark.parametrize("peer", [pytest.param(p, marks=pytest.mark.stress) if p == "openmpi" else p
                                  for p in multihost_peers.PEERS])
def test_each_installed_peer_runs_across_the_hosts_with_exact_results(tmp_path, peer):
    why = multihost_peers.unavailable(peer)
    if why:
        pytest.skip(f"{peer} is not installed here: {why}")
    out = tmp_path / "multihost.md"
    # 2 hosts x 2 ranks: the peer's launcher places two ranks on each host, one pair per namespace.
    proc = bench("--layouts", "2x2", "--libs", f"default,{peer}", "--reps", "1", "--sizes", "4,64k",
                 "--out", str(out), stderr=subprocess.STDOUT)
    stdout, _ = proc.communicate(timeout=170)
    assert proc.returncode == 0, stdout  # it exits non-zero if a peer sent less across the links than it must
    text = out.read_text()
    assert f"Wrong results over every call: default 0, {peer} 0." in text, text
    header = next(line for line in text.splitlines() if line.startswith("| size |")).split("|")
    assert header[3].strip() == f"{peer} (us)", header
    for size in ("4 B", "64 KiB"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {size} |")).split("|")
        assert float(row[3].split("(")[0]) > 0, row  # the peer's median, a number
        assert float(row[4]) >= 0, row  # default / best peer, a number: the peer is a peer (it may round to 0.00)
    assert namespaces_of(proc.pid) == []


def test_the_links_own_ceiling_is_measured_per_ring_and_nic_count():
    """bench/link_bound.py: plain TCP round a ring of two and three hosts over one and two shaped NICs, a row each
    with what a ring all-reduce moves per host and a share of the rate that a working link gives (well above
    nothing, not above the veth's burst allowance)."""
    out = subprocess.run([sys.executable, "-P", str(ROOT / "bench" / "link_bound.py"), "--mib", "8", "--reps", "1",
                          "--hosts", "2,3"], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 5 and cells[0].isdigit():
            rows[(int(cells[0]), int(cells[1]))] = cells
    assert sorted(rows) == [(2, 1), (2, 2), (3, 1), (3, 2)], out.stdout
    for (hosts, _), cells in rows.items():
        assert float(cells[2]) == pytest.approx(2 * (hosts - 1) / hosts * 8, abs=0.5), cells  # MiB each way
        share = int(cells[4].rstrip("%"))
        assert 30 <= share <= 130, cells


def test_the_table_names_the_algorithm_each_size_ran_and_what_a_call_cost_the_cpu(tmp_path):
    from pycoll.algorithms import ALGORITHMS

    out = tmp_path / "multihost.md"  # --append to a file not there yet begins it
    proc = bench("--layouts", "2x1", "--libs", "default,auto", "--reps", "1", "--sizes", "4,1m", "--out", str(out),
                 "--append")
    stdout, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, stdout
    text = out.read_text()
    line = next(line for line in text.splitlines() if line.startswith("Algorithm per size"))
    # backend="auto" on host memory only runs the cpu backend's algorithms, as the default does.
    for lib in ("default", "auto"):
        spans = line.partition(f"{lib}: ")[2].partition(";")[0].rstrip(".").split(", ")
        assert spans and spans[0].startswith("4 B") and spans[-1].split("-")[-1].startswith("1 MiB"), line
        assert all(span.split()[-1] in ALGORITHMS for span in spans), line  # names the ranks reported, not "None"
    header = next(line for line in text.splitlines() if "(% of link)" in line)
    assert "default (CPU ms per call)" in header, header
    row = next(line for line in text.splitlines() if line.startswith("| 1 MiB |") and "%" in line)
    column = [cell.strip() for cell in header.split("|")].index("default (CPU ms per call)")
    assert float(row.split("|")[column]) > 0, row  # a 1 MiB all-reduce costs its busiest rank some CPU time


def test_plot_draws_every_layout_and_the_section_shows_it(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "results" / "multihost.md", tmp_path / "figures" / "multihost.png"
    out.parent.mkdir()
    proc = bench("--layouts", "2x1", "--libs", "default,tcp", "--reps", "1", "--sizes", "4,64k", "--out", str(out),
                 "--plot", str(png))
    stdout, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "](../figures/multihost.png)" in out.read_text()  # relative to the results file, so it shows there
    assert namespaces_of(proc.pid) == []
