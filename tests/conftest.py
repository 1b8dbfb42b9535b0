"""The test run ends with every process it started: on Ctrl-C within a few seconds, whatever a test was
waiting for, and at the end of the session.

Tests start rank processes (tests/multiproc.py's Ranks), launchers whose ranks are grandchildren, and threads
blocked in pycoll waits. After Ctrl-C, a launcher that subprocess killed leaves its ranks orphaned, and
interpreter exit joins every non-daemon thread, each until its own deadline. So every process started here
carries this session's token in its environment (found in /proc even once orphaned) and is killed at the end,
and an interrupted session exits at most EXIT_GRACE_S after pytest reports the interrupt.

It also holds the fixtures that tests of more than one folder use (tests/README.md); a folder's own are in that
folder's conftest.py."""

import os
import secrets
import signal
import sys
import threading

import pytest
from c_programs import build_example
from multiproc import STARTED_PIDS, segments_of
from netns_hosts import HostsUnavailable, namespace_hosts

SESSION_VAR = "PYCOLL_TEST_SESSION"  # PYCOLL_TEST_*: never warned about as an unknown setting
EXIT_GRACE_S = 3.0  # for pytest's summary and ordinary exit; then the process ends regardless
INTERRUPTED_EXIT = 2  # pytest's exit status for an interrupted run

_token = secrets.token_hex(8)
os.environ[SESSION_VAR] = _token  # set on import: before any test starts a process


def _parents():
    """pid -> parent pid of every process visible in /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass  # gone meanwhile
    return parents


def _carries_token(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{SESSION_VAR}={_token}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def session_processes():
    """Every other live process this session started: its descendants, and processes carrying its token
    (orphans of a killed launcher)."""
    parents, me = _parents(), os.getpid()
    found, todo = set(), [me]
    while todo:
        parent = todo.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found]
        found.update(children)
        todo += children
    found.update(pid for pid in parents if pid not in found and _carries_token(pid))
    found.discard(me)
    return found


def kill_session_processes():
    for pid in session_processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _exit_after_grace():
    threading.Event().wait(EXIT_GRACE_S)
    kill_session_processes()  # any started while the test's own clean-up ran
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(INTERRUPTED_EXIT)


def pytest_keyboard_interrupt(excinfo):
    kill_session_processes()
    threading.Thread(target=_exit_after_grace, name="exit after Ctrl-C", daemon=True).start()


def pytest_sessionfinish(session, exitstatus):
    kill_session_processes()


@pytest.fixture
def no_segment_left():
    """Whatever the test does to its ranks, none of the segments they (or this process) created is left in
    /dev/shm afterwards. Only this test's own: another job's segments coming or going do not fail it."""
    first, own_before = len(STARTED_PIDS), segments_of([os.getpid()])
    yield
    assert segments_of([os.getpid(), *STARTED_PIDS[first:]]) - own_before == set()


@pytest.fixture
def hosts(request):
    """Network-namespace hosts (tests/netns_hosts.py), request.param of them, for the tests marked netns;
    skipped, saying why, where they cannot be made (no root, no iproute2)."""
    try:
        with namespace_hosts(request.param) as names:
            yield names
    except HostsUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """examples/c_allreduce.c built as a user builds it (c_programs.build_example)."""
    return build_example(tmp_path_factory)
