"""Starts N local ranks of a program: the launcher behind ``pycoll run`` (pycoll.cli.run), ``pycoll bench`` and
``pycoll tune``, and anything else in pycoll that needs a job of its own (accuracy studies).

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT, PYCOLL_JOB_ID,
PYCOLL_SECRET (random per job, so only this job's ranks can join its store and mesh) and PYCOLL_BACKEND when
given. Every line a rank prints is prefixed with "[rank K] ". Each rank runs in its own process group, so the
launcher can signal a rank together with anything it started: Ctrl-C / SIGTERM / SIGHUP are forwarded to every
group; when a rank fails the others get SIGTERM, then SIGKILL after a grace period; the launcher exits with the
code of the rank that failed first (128 + N for a death by signal N). On Linux the ranks are also killed if the
launcher itself is killed outright (PR_SET_PDEATHSIG). Once every rank has exited, the launcher removes what
its ranks left in /dev/shm: a shared-memory segment of a rank killed during set-up whose host had no surviving
rank to remove it (the bootstrap names segments "pycoll-<pid>-<rank>-<random>", native/bootstrap/init_segments.c).
"""

import contextlib
import ctypes
import os
import secrets
import selectors
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

_POLL_INTERVAL = 0.02
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TIMEOUT_EXIT_CODE = 124  # as timeout(1)
_PR_SET_PDEATHSIG = 1
_SHM_DIR = "/dev/shm"


def launch_module(module, nproc, args=(), **kwargs):
    """Runs pycoll's own ``python -m module args`` as ``nproc`` ranks (see launch). PYTHONSAFEPATH keeps the
    working directory off the ranks' import path, so a source checkout's uncompiled pycoll/ folder cannot
    shadow the installed package when started from the repository root."""
    extra_env = dict(kwargs.pop("extra_env", None) or {}, PYTHONSAFEPATH="1")
    return launch([sys.executable, "-m", module, *args], nproc, extra_env=extra_env, **kwargs)


def launch(command, nproc, *, backend=None, master_port=None, timeout=None, grace_period=5.0, extra_env=None,
           stdout=None):
    """Runs ``command`` as ``nproc`` local ranks until all exit; returns the job's exit code (see module doc).
    Usable by other subcommands (e.g. a benchmark that starts its own ranks). ``stdout``: a binary stream for
    what the ranks print to their standard output (default this process's; a caller whose own stdout is a
    report can send it to stderr)."""
    base_env = dict(os.environ)
    base_env.update(extra_env or {})
    base_env.update({
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port or _free_port()),
        "PYCOLL_JOB_ID": secrets.token_hex(8),
        "PYCOLL_SECRET": secrets.token_hex(32),
        "PYTHONUNBUFFERED": "1",
    })
    if backend:
        base_env["PYCOLL_BACKEND"] = backend
    if nproc > 1 and "OMP_NUM_THREADS" not in base_env:
        # As torchrun: each rank's OpenMP (torch's, numpy's BLAS) would start a thread per core, nproc times over.
        base_env["OMP_NUM_THREADS"] = "1"
        sys.stderr.write("pycoll run: OMP_NUM_THREADS was unset; each rank gets 1 (set it to tune)\n")
    envs = [dict(base_env, RANK=str(r), LOCAL_RANK=str(r)) for r in range(nproc)]
    return _Job(command, envs, timeout, grace_period, stdout).run()


class _Job:
    def __init__(self, command, envs, timeout, grace_period, stdout=None):
        self._command, self._envs = command, envs
        self._stdout = stdout
        self._timeout, self._grace_period = timeout, grace_period
        self._procs = []
        self._readers = []
        self._exited = []  # ranks in the order they exited
        self._checked = 0  # how many of them _check_failures has looked at
        self._output_lock = threading.RLock()  # re-entrant: the signal handler reports from the main thread
        self._exit_code = None  # decided by the first event that ends the job
        self._stop_deadline = None  # SIGKILL whatever is still running at this time

    def run(self):
        previous_handlers = self._install_signal_handlers()
        try:
            self._start()
            self._supervise()
        finally:
            self._kill_remaining()
            _remove_segments_of([proc.pid for proc in self._procs])
            for reader in self._readers:
                reader.join(timeout=5.0)
            _restore_signal_handlers(previous_handlers)
        return self._exit_code

    def _start(self):
        sys.stdout.flush()
        sys.stderr.flush()
        # Spawn every rank before starting any reader thread: preexec_fn is only safe in a single-threaded parent.
        for env in self._envs:
            self._procs.append(subprocess.Popen(
                self._command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_die_with_parent()))
        for rank, proc in enumerate(self._procs):
            prefix = f"[rank {rank}] ".encode()
            for pipe, sink in ((proc.stdout, self._stdout or sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
                reader = threading.Thread(target=self._pump, args=(pipe, prefix, sink), daemon=True,
                                          name=f"pycoll-run-output-{rank}")
                reader.start()
                self._readers.append(reader)

    def _pump(self, pipe, prefix, sink):
        writable = True
        with pipe:
            for line in iter(pipe.readline, b""):
                if not writable:
                    continue  # keep draining, so that the rank never blocks on a full pipe
                if not line.endswith(b"\n"):
                    line += b"\n"
                with self._output_lock:
                    try:
                        sink.write(prefix + line)
                        sink.flush()
                    except OSError:  # e.g. the launcher's output was piped into `head`
                        writable = False

    def _supervise(self):
        job_deadline = None if self._timeout is None else time.monotonic() + self._timeout
        exits = _ExitOrder(self._procs)
        try:
            self._supervise_until_all_exit(exits, job_deadline)
            self._exited += exits.wait(0.0)  # every exit is seen before the last look
        finally:
            exits.close()
        if self._exit_code is None:
            self._check_failures()
        if self._exit_code is None:
            self._exit_code = 0

    def _supervise_until_all_exit(self, exits, job_deadline):
        while not exits.all_seen():
            self._exited += exits.wait(_POLL_INTERVAL)
            now = time.monotonic()
            if self._exit_code is None:
                self._check_failures()
            if self._exit_code is None and job_deadline is not None and now >= job_deadline:
                self._report(f"the job ran past --timeout {self._timeout:g} s; stopping every rank")
                self._stop(_TIMEOUT_EXIT_CODE)
            if self._stop_deadline is not None and now >= self._stop_deadline:
                self._signal_all(signal.SIGKILL)
                self._stop_deadline = None

    def _check_failures(self):
        # The ranks in the order they exited, not in rank order: once one rank fails its peers fail too within
        # milliseconds (PeerFailure), often inside one polling interval, and the rank to name is the one that
        # failed first.
        while self._checked < len(self._exited):
            rank = self._exited[self._checked]
            self._checked += 1
            code = self._procs[rank].wait()
            if code == 0:
                continue
            if code < 0:
                self._report(f"rank {rank} was killed by {_signal_name(-code)}; stopping the other ranks")
                self._stop(128 - code)
            else:
                self._report(f"rank {rank} exited with code {code}; stopping the other ranks")
                self._stop(code)
            return

    def _stop(self, exit_code, signum=signal.SIGTERM):
        self._exit_code = exit_code
        self._signal_all(signum)
        self._stop_deadline = time.monotonic() + self._grace_period

    def _on_signal(self, signum, _frame):
        if self._exit_code is None:
            self._report(f"received {_signal_name(signum)}; forwarding it to every rank")
            self._stop(128 + signum, signum)
        else:
            self._signal_all(signum)

    def _signal_all(self, signum):
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signum)

    def _kill_remaining(self):
        # Whatever a rank started in its process group dies with it, even after the rank itself has exited.
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _report(self, message):
        with self._output_lock:
            sys.stderr.write(f"pycoll run: {message}\n")
            sys.stderr.flush()

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {signum: signal.signal(signum, self._on_signal) for signum in _FORWARDED_SIGNALS}


class _ExitOrder:
    """Ranks in the order they exit: one pidfd per rank in an epoll set, whose ready list mostly keeps the order
    in which the kernel signalled the exits, however late this process gets to look (a polling loop, or a
    thread per rank on a busy machine, loses the order of exits milliseconds apart; tests/tools/test_run_cli.py
    checks that the first is named). Without pidfds (not Linux, or a kernel before 5.3): the exited ranks of each
    pass, in rank order."""

    def __init__(self, procs):
        self._procs = procs
        self._selector = selectors.EpollSelector() if hasattr(os, "pidfd_open") else None
        self._unseen = set(range(len(procs)))
        if self._selector is not None:
            try:
                for rank, proc in enumerate(procs):
                    self._selector.register(os.pidfd_open(proc.pid), selectors.EVENT_READ, rank)
            except OSError:
                self.close()
                self._selector = None

    def all_seen(self):
        """Whether every rank's exit has been returned by wait(). With pidfds nothing else reaps a rank before
        then: a rank reaped early (Popen.poll) could be reported after ranks that exited later, as this kernel
        may order the pidfds' readiness by reaping. Without them, poll() every rank (not any() over a generator,
        which stops at the first running one)."""
        if self._selector is None:
            return [proc.poll() for proc in self._procs].count(None) == 0
        return not self._unseen

    def wait(self, timeout):
        """The ranks that exited since the last call, first exit first, waiting up to timeout s for one."""
        if self._selector is None:
            time.sleep(timeout)
            ranks = [r for r in sorted(self._unseen) if self._procs[r].poll() is not None]
        else:
            ranks = []
            for key, _ in self._selector.select(timeout):
                self._selector.unregister(key.fileobj)
                os.close(key.fileobj)
                ranks.append(key.data)
        self._unseen.difference_update(ranks)
        return ranks

    def close(self):
        if self._selector is not None:
            for key in list(self._selector.get_map().values()):
                os.close(key.fileobj)
            self._selector.close()


def _remove_segments_of(pids):
    """Removes the bootstrap's segments of these (exited) processes from /dev/shm: by their pid, only files and
    links of this user. A live process of another job that got one of these pids back within the moment since
    its rank exited would lose a segment it has not shared yet: its set-up fails, and nothing else."""
    prefixes = tuple(f"pycoll-{pid}-" for pid in pids)
    try:
        names = [n for n in os.listdir(_SHM_DIR) if n.startswith(prefixes)]
    except OSError:  # no /dev/shm here: no segments either
        return
    for name in names:
        path = os.path.join(_SHM_DIR, name)
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if info.st_uid == os.geteuid() and not stat.S_ISDIR(info.st_mode):
                os.unlink(path)


def _restore_signal_handlers(previous):
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _die_with_parent():
    """A preexec_fn asking Linux to SIGKILL the child when the launcher dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only calls it

    def set_parent_death_signal():
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return set_parent_death_signal


def _signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
