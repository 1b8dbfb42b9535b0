"""A torchft training job on 127.0.0.1 for tests and bench/recovery_torchft.py: torchft's lighthouse (the
`torchft_lighthouse` program of torchft's wheel) and N replica groups of one process each
(scripts/torchft_worker.py), whose JSON lines are read as they come. Use as a context manager: every process
is killed on exit."""

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from multiproc import STARTED_PIDS, free_port

WORKER = Path(__file__).parent / "scripts" / "torchft_worker.py"


def lighthouse_program():
    """The lighthouse torchft's wheel installs beside this Python, else on the PATH (None: not installed)."""
    beside = Path(sys.executable).parent / "torchft_lighthouse"
    return str(beside) if beside.exists() else shutil.which("torchft_lighthouse")


class TorchftJob:
    def __init__(self, n, pg, *, stop=100, min_replicas=2):
        """n replicas over process group `pg` ("pycoll" or "gloo"); each trains until step `stop`, then
        reports. The lighthouse uses torchft's defaults (a replica is dead after 5 s without a heartbeat) but
        for min_replicas."""
        self.procs, self.lines = [], []
        # torchft logs every quorum to stderr: to files, since a pipe nobody reads fills and stops the process
        self.logs = [tempfile.TemporaryFile(mode="w+") for _ in range(n + 1)]
        port = free_port()
        self.lighthouse = subprocess.Popen([lighthouse_program(), "--bind", f"127.0.0.1:{port}",
                                            "--min_replicas", str(min_replicas)],
                                           stdout=subprocess.DEVNULL, stderr=self.logs[n])
        try:
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            for r in range(n):
                # -P: the installed pycoll, never the source tree's
                p = subprocess.Popen([sys.executable, "-P", str(WORKER), pg, f"http://127.0.0.1:{port}", str(r),
                                      str(stop)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.logs[r], text=True)
                STARTED_PIDS.append(p.pid)
                self.procs.append(p)
                self.lines.append(queue.SimpleQueue())
                threading.Thread(target=self._read, args=(p, self.lines[-1]), daemon=True).start()
        except BaseException:
            self.__exit__()
            raise

    @staticmethod
    def _read(p, lines):
        for line in p.stdout:
            if line.startswith("{"):
                lines.put(json.loads(line))
        lines.put(None)  # it exited

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in [*self.procs, self.lighthouse]:
            if p.poll() is None:
                p.kill()
            p.wait()
        for p in self.procs:
            p.stdin.close()
        for log in self.logs:
            log.close()

    def next_line(self, r, deadline):
        """Replica r's next JSON line, by `deadline` (time.monotonic())."""
        try:
            line = self.lines[r].get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise TimeoutError(f"replica {r} printed nothing more in time") from None
        if line is None:
            self.logs[r].seek(0)
            raise RuntimeError(f"replica {r} exited {self.procs[r].wait()}: {self.logs[r].read()[-3000:]}")
        return line

    def start(self, deadline):
        """Wait for every replica's Manager, then let them all train (the first quorum holds them all)."""
        for r in range(len(self.procs)):
            assert self.next_line(r, deadline).get("ready")
        for p in self.procs:
            p.stdin.write("go\n")
            p.stdin.flush()

    def commits_until(self, r, done, deadline):
        """Replica r's committed steps (their lines) up to and including the first for which done(line)."""
        seen = []
        while not seen or not done(seen[-1]):
            seen.append(self.next_line(r, deadline))
        return seen

    def kill(self, r):
        """kill -9 of replica r; returns CLOCK_MONOTONIC just before."""
        t = time.monotonic()
        os.kill(self.procs[r].pid, signal.SIGKILL)
        return t
