"""How waits pass the time once their spin is over: they sleep on what ends the sleep when the message arrives --
the TCP transport's events, or over shared memory the rank's doorbell, which the peer rings when it publishes
(native/transport/shm_doorbell.h) -- not in fixed naps that each end after the message came. Counted with
strace (no timing): a rank that waits half a second for a late peer makes no nanosleep calls. The wait over
shared memory and TCP at once (native/transport/routed_transport.c; hosts faked as in test_comm_routed.py), over
shared memory alone, and a receive on the progress thread (native/comm/progress.c) over TCP; and, counted by
the library, that a peer's publication is what ends a sleep."""

import shutil
import subprocess
from pathlib import Path

import pytest
from multiproc import Ranks

pytestmark = pytest.mark.timeout(120)

SLEEPS = ("nanosleep", "clock_nanosleep", "ppoll", "epoll_wait", "epoll_pwait", "poll")


def sleeping_calls(trace):
    """{system call: count} of strace -f -o output."""
    counts = dict.fromkeys(SLEEPS, 0)
    for line in Path(trace).read_text().splitlines():
        fields = line.split(None, 1)
        call = fields[1].split("(", 1)[0] if len(fields) == 2 else ""
        if call in counts:
            counts[call] += 1
    return counts


def traced_job(tmp_path, n, script, scenario, traced, env):
    """Run the job with rank `traced` under strace; returns (reports, its sleeping calls)."""
    trace = tmp_path / f"rank{traced}.strace"
    wrap = {traced: ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=" + ",".join(SLEEPS)]}
    # No spin: every idle pass sleeps.
    with Ranks(n, script, scenario, env={"PYCOLL_SPIN_US": "0", "TEST_LATE_S": "0.5", **env},
               wrap=lambda r: wrap.get(r, [])) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    return reports, sleeping_calls(trace)


def naps(counts):
    # Half a second of 50 us naps is thousands of nanosleep calls; sleeping on the TCP events, none (the
    # bootstrap's own waits may add a few).
    return counts["nanosleep"] + counts["clock_nanosleep"]


def strace_works():
    """strace is installed and may trace here (containers often forbid ptrace)."""
    return shutil.which("strace") is not None and subprocess.run(
        ["strace", "-qq", "-o", "/dev/null", "true"], capture_output=True, timeout=30).returncode == 0


needs_strace = pytest.mark.skipif(not strace_works(), reason="needs strace, allowed to trace, to count a rank's sleeps")


@needs_strace
def test_wait_for_another_host_sleeps_until_its_message_not_in_naps(tmp_path, monkeypatch):
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)  # the default, cpu: shared memory + TCP
    # Ranks 0, 1 on one host, rank 2 on another: rank 2 reaches both over TCP.
    reports, counts = traced_job(tmp_path, 3, "comm_worker.py", "late", 2, {"TEST_RANKS_PER_FAKE_HOST": "2"})
    assert reports[2]["transport"] == "shm+tcp", reports[2]
    assert naps(counts) < 20, counts


@needs_strace
@pytest.mark.parametrize("backend", ["tcp", "shm"])
def test_receive_on_the_progress_thread_sleeps_until_its_message_not_in_naps(tmp_path, monkeypatch, backend):
    # Over TCP it sleeps on the transport's events; over shared memory on the doorbell, which the sender rings.
    monkeypatch.setenv("PYCOLL_BACKEND", backend)
    _, counts = traced_job(tmp_path, 2, "p2p_worker.py", "late_recv", 1, {})
    assert naps(counts) < 20, counts


@needs_strace
@pytest.mark.parametrize("fake_hosts", [False, True], ids=["one_host", "shm_within_tcp_between"])
def test_wait_on_shared_memory_sleeps_until_rung_not_in_naps(tmp_path, monkeypatch, fake_hosts):
    # Rank 1 waits half a second for rank 0, on its own host: over shared memory alone (the native barrier), or
    # over the shared-memory child of shm+tcp with only that child's requests pending. It sleeps on its
    # doorbell (futex waits of at most 1 ms, ended by rank 0's ring), not in naps.
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)
    n, env = (4, {"TEST_RANKS_PER_FAKE_HOST": "2"}) if fake_hosts else (2, {})
    reports, counts = traced_job(tmp_path, n, "comm_worker.py", "late", 1, env)
    assert reports[1]["transport"] == ("shm+tcp" if fake_hosts else "shm"), reports[1]
    # Naps over shared memory alone were nanosleeps; over shm+tcp, ppoll on the TCP child's events with a nap's
    # timeout, which no local message ends.
    assert naps(counts) + counts["ppoll"] < 20, counts


@pytest.mark.parametrize("algorithm", ["auto", "ring"])
def test_a_peers_publication_ends_a_shared_memory_sleep(monkeypatch, algorithm):
    # No spin: every wait sleeps at once. A peer that publishes (a ring index, a collective's flag) rings the
    # sleeper's doorbell, so most sleeps end at once rather than at their bound; without the ring every one
    # would run to it. Counted by the library (pycoll_test_shm_sleeps), not timed.
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)
    with Ranks(2, "comm_worker.py", "sleeps", env={"PYCOLL_SPIN_US": "0", "TEST_ALGORITHM": algorithm}) as ranks:
        reports = ranks.reports()
    for rep in reports.values():
        assert rep.get("ok"), reports
        assert rep["transport"] == "shm", rep
        assert rep["sleeps"] > 0, rep
        assert rep["rung"] >= rep["sleeps"] // 2, rep
