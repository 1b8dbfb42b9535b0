"""The rendezvous store's warnings: none for the normal close of healthy jobs, however many init/close cycles a
process runs, and a genuine repeated warning rate-limited for the whole process, not per store (each init makes
a new store). Real processes on 127.0.0.1."""

import subprocess
import sys

import pytest
from multiproc import Ranks

CYCLES = 40  # the old per-store warning showed about once in three cycles


@pytest.mark.timeout(300)
def test_healthy_init_close_cycles_log_no_store_warning():
    with Ranks(2, "rdv_worker.py", "cycles", env={"TEST_CYCLES": str(CYCLES)}, timeout=20) as ranks:
        reports = ranks.reports(deadline_s=240)
    assert all(rep["cycles"] == CYCLES for rep in reports.values()), reports
    dropped = [line for text in ranks.stderr.values() for line in text.splitlines() if "dropping connection" in line]
    assert dropped == [], f"{len(dropped)} warnings over {CYCLES} healthy cycles, e.g. {dropped[:3]}"


# Three stores, one after another in one process, each sent a stranger's junk: one warning, not three.
_JUNK_TO_THREE_STORES = """
import logging, socket, time
from pycoll.rendezvous.tcp_store import TCPStore
logging.basicConfig(level=logging.WARNING, format="%(message)s")
for _ in range(3):
    store = TCPStore("127.0.0.1", 0, is_server=True, timeout=5.0, secret=b"s3cret")
    with socket.create_connection(("127.0.0.1", store.port)) as junk:
        junk.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n" + bytes(64))
        junk.settimeout(5.0)
        assert junk.recv(1) == b""  # the server dropped it
    store.close()
"""


@pytest.mark.timeout(60)
def test_a_repeated_store_warning_is_rate_limited_per_process_not_per_store():
    result = subprocess.run([sys.executable, "-P", "-c", _JUNK_TO_THREE_STORES], capture_output=True, text=True,
                            timeout=50)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "dropping connection" in line]
    assert len(warnings) == 1 and "bad magic" in warnings[0], result.stderr
