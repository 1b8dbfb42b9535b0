"""How a wait over shared memory and TCP at once (native/transport/routed_transport.c) passes the time once its
spin is over: while it waits only for ranks on other hosts it sleeps on the TCP transport's events, which end
the sleep when a message arrives, not in fixed naps that each end after the message came. Counted with strace
(no timing): a rank that waits half a second for a late peer across the network makes a few sleeping calls,
not thousands of naps. Hosts faked as in test_comm_routed.py."""

import shutil
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


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to count the waiting rank's sleeps")
def test_wait_for_another_host_sleeps_until_its_message_not_in_naps(tmp_path, monkeypatch):
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)  # the default, cpu: shared memory + TCP
    trace = tmp_path / "rank2.strace"
    # Ranks 0, 1 on one host, rank 2 on another: rank 2 reaches both over TCP. No spin: every idle pass sleeps.
    wrap = {2: ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=" + ",".join(SLEEPS)]}
    with Ranks(3, "comm_worker.py", "late", env={"TEST_RANKS_PER_FAKE_HOST": "2", "PYCOLL_SPIN_US": "0",
                                                 "TEST_LATE_S": "0.5"},
               wrap=lambda r: wrap.get(r, [])) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    assert reports[2]["transport"] == "shm+tcp", reports[2]
    counts = sleeping_calls(trace)
    # Half a second of 50 us naps is thousands of nanosleep calls; sleeping on the TCP events until the next
    # interrupt check (every 100 ms) or the message is a handful. The bootstrap's own waits add a few more.
    assert counts["nanosleep"] + counts["clock_nanosleep"] < 100, counts
