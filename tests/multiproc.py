"""Start real rank processes on 127.0.0.1 for multi-process tests, and always clean them up."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


def raised(fn, errors=Exception):
    """None where fn() returns, else what it raised as (class name, message): a rank's outcome, in a form its
    report can carry to the test."""
    try:
        fn()
    except errors as exc:
        return type(exc).__name__, str(exc)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SHM_DIR = "/dev/shm"
# The pid of every rank process Ranks started, in order. The bootstrap names a segment after the process that
# created it ("pycoll-<pid>-<rank>-<random>"), so a test finds its own segments by its ranks' pids: other jobs
# on the machine create and remove theirs meanwhile.
STARTED_PIDS = []


def sigint_at_default():
    """preexec_fn for a process a test sends SIGINT, as a terminal's Ctrl-C: SIGINT back at its default action
    before the exec, so that Python installs its KeyboardInterrupt handler there. A pytest started with SIGINT
    ignored (`pytest &` from a script) would otherwise pass the ignoring on to every child, where SIGINT then does
    nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def segments_of(pids):
    """The names in /dev/shm of the segments that processes `pids` created."""
    prefixes = tuple(f"pycoll-{pid}-" for pid in pids)
    return {name for name in os.listdir(SHM_DIR) if name.startswith(prefixes)}


class Ranks:
    """N processes of one job. Use as a context manager: every process is killed on exit."""

    def __init__(self, n, script, *args, env=None, timeout=30.0, master_addr="127.0.0.1", wrap=None,
                 rank_env=None, interruptible=False):
        """wrap(rank) -> command prefix, e.g. ["ip", "netns", "exec", "host1"] to run a rank on another host;
        rank_env(rank) -> extra environment for that rank only; interruptible: the ranks get SIGINT at its
        default (sigint_at_default), for a test that sends them one."""
        port = self.port = free_port()
        self.procs = []
        self.stderr = {}
        try:
            for rank in range(n):
                child_env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                                 MASTER_ADDR=master_addr, MASTER_PORT=str(port), TEST_TIMEOUT=str(timeout),
                                 PYTHONUNBUFFERED="1", **(env or {}))
                child_env.update(rank_env(rank) if rank_env else {})
                prefix = wrap(rank) if wrap else []
                self.procs.append(subprocess.Popen([*prefix, sys.executable, str(SCRIPTS / script), *args],
                                                   env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                   text=True,
                                                   preexec_fn=sigint_at_default if interruptible else None))
                STARTED_PIDS.append(self.procs[-1].pid)
        except BaseException:  # Ctrl-C or a failed start midway: the ranks already started go too
            self.__exit__()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
            p.wait()
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()

    def wait_ready(self, ranks, deadline_s=30.0):
        """Read each rank's first JSON line ({"ready": true})."""
        for r in ranks:
            line = self.procs[r].stdout.readline()
            assert line, f"rank {r} exited before getting ready: {self.procs[r].stderr.read()}"
            assert json.loads(line).get("ready"), line

    def reports(self, ranks=None, deadline_s=60.0):
        """The last JSON line of each rank (after it exits), as dicts; asserts clean exits."""
        out = {}
        end = time.monotonic() + deadline_s
        for r in ranks if ranks is not None else range(len(self.procs)):
            p = self.procs[r]
            stdout, stderr = p.communicate(timeout=max(0.1, end - time.monotonic()))
            self.stderr[r] = stderr
            lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
            assert p.returncode == 0 and lines, f"rank {r} exited {p.returncode}: {stdout}\n{stderr}"
            out[r] = json.loads(lines[-1])
        return out


def backend_fixture(names):
    """A fixture `backend` that runs each test once per backend in `names`, with PYCOLL_BACKEND set for the
    ranks it starts. In a test module: backend = backend_fixture(["tcp", "shm"])."""
    @pytest.fixture(params=names)
    def backend(request, monkeypatch):
        monkeypatch.setenv("PYCOLL_BACKEND", request.param)
        return request.param
    return backend


def assert_all_ok(reports):
    """Every rank's report says "ok" (the first that does not is shown)."""
    for rep in reports.values():
        assert rep.get("ok"), rep


def scenario_reports(n, script, scenario, timeout=30.0, ranks=None):
    """Run `script scenario` on n ranks and return the reports of `ranks` (default: all)."""
    with Ranks(n, script, scenario, timeout=timeout) as job:
        return job.reports(ranks=ranks, deadline_s=120)


def scenario_runner(script):
    """run(n, scenario, timeout=30.0, ranks=None): scenario_reports of `script`, for a module whose tests all
    start the same worker script. In a test module: run = scenario_runner("p2p_worker.py")."""
    def run(n, scenario, timeout=30.0, ranks=None):
        return scenario_reports(n, script, scenario, timeout, ranks)
    return run


def scenario_module(script, backends):
    """For a module whose tests all start the same worker script, each test once per backend: the fixture
    `backend` (backend_fixture) and run (scenario_runner). In a test module:
    backend, run = scenario_module("p2p_worker.py", ["tcp", "shm"])."""
    return backend_fixture(backends), scenario_runner(script)


def close_at_once(comms):
    """Closes the communicators of ranks that run as threads of one process at once, as separate processes
    would: a close waits (up to its linger) for the other ranks' goodbyes, so one after another would wait out
    each linger. Entries that are not communicators (a rank's exception) are skipped."""
    import threading

    import pycoll

    threads = [threading.Thread(target=c.close) for c in comms if isinstance(c, pycoll.Communicator)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def survivor_sum(n, dead):
    """What the survivors' all-reduce of (their old rank + 1) gives, with the ranks in `dead` gone."""
    return float(sum(r + 1 for r in range(n) if r not in dead))


def kill_mid_loop(job, n, victim):
    """SIGKILLs rank `victim` of job (n ranks that report ready, then loop over collectives) well inside its
    loop; returns when it was killed (time.time()) and the survivors' reports."""
    job.wait_ready(range(n))
    time.sleep(0.3)  # well inside the loop of all-reduces
    killed_at = time.time()
    os.kill(job.procs[victim].pid, signal.SIGKILL)
    return killed_at, job.reports([r for r in range(n) if r != victim], deadline_s=40)
