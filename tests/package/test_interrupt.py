"""Ctrl-C ends a test run within a few seconds, and with it every process the run started (tests/conftest.py),
whatever the interrupted test was waiting for."""

import os
import signal
import subprocess
import sys
import time

import pytest
from multiproc import SCRIPTS, sigint_at_default

SESSION = SCRIPTS / "interrupted_session.py"
PROMPT_S = 8.0  # "a few seconds": conftest's grace (3 s) and a loaded machine's slowness


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def _wait_for(path, proc, deadline_s):
    end = time.monotonic() + deadline_s
    while not path.exists():
        assert proc.poll() is None, f"the session ended before it was ready: {proc.communicate()[0]}"
        assert time.monotonic() < end, f"the session was not ready within {deadline_s} s"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_ctrl_c_ends_the_run_and_its_rank_processes_within_seconds(tmp_path):
    # Its own session, so that the SIGINT goes to its process group only, as a terminal sends Ctrl-C.
    proc = subprocess.Popen([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                             str(SESSION)], env=dict(os.environ, TEST_OUT=str(tmp_path)), cwd=SESSION.parents[2],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=sigint_at_default)
    try:
        _wait_for(tmp_path / "ready", proc, 60.0)
        ranks = [int(pid) for f in tmp_path.glob("*.pids") for pid in f.read_text().split()]
        assert len(ranks) == 4 and all(_alive(pid) for pid in ranks), ranks  # two ranks and their children
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=PROMPT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"pytest still ran {PROMPT_S} s after Ctrl-C")
        took = time.monotonic() - start
        left = [pid for pid in ranks if _alive(pid)]
        assert not left, f"processes of the run still alive after Ctrl-C: {left}"
        assert "KeyboardInterrupt" in output and took < PROMPT_S, (took, output)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in tmp_path.glob("*.pids"):
            for pid in f.read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
