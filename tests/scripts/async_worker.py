"""One rank of a non-blocking-collectives test: `python async_worker.py SCENARIO` under RANK/WORLD_SIZE/
MASTER_* env. Prints one JSON line (the last line of stdout) that the test checks; exits 0 unless the script
itself broke."""

import json
import os
import signal
import sys
import time

import numpy as np

import pycoll

scenario = sys.argv[1]
timeout = float(os.environ.get("TEST_TIMEOUT", "30"))
report = {"scenario": scenario}


def wait_for_file(path, deadline_s=None):
    """Block until another rank creates `path` (a handshake that needs no timing assumption), by default at
    most 20 s or the job's timeout if longer: on a loaded machine the other rank may be that slow to get there."""
    end = time.monotonic() + (max(20.0, timeout) if deadline_s is None else deadline_s)
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.01)


def outcome(work):
    exc = work.exception()
    return "ok" if exc is None else type(exc).__name__


comm = pycoll.init(timeout=timeout)
rank, size = comm.rank, comm.size
report["rank"] = rank
try:
    if scenario == "order":
        # Async and blocking calls mixed, with different counts, so a reordering on any rank is a
        # MismatchError or a wrong sum; blocking small all-reduces take the Cython fast path, straight to C.
        works, checks = [], []
        for i in range(40):
            n = 1 + (i * 37) % 1000
            x = np.arange(n, dtype=np.int64) * (i + 1) + rank
            want = np.arange(n, dtype=np.int64) * (i + 1) * size + size * (size - 1) // 2
            if i % 5 == 4:
                comm.all_reduce(x)  # blocking, fast path
                assert np.array_equal(x, want), i
            elif i % 7 == 3:
                out = np.empty(n * size, dtype=np.int64)
                works.append(comm.all_gather(np.full(n, rank + i, dtype=np.int64), out, async_op=True))
                checks.append((out, np.repeat(np.arange(size, dtype=np.int64) + i, n)))
            elif i % 11 == 6:
                b = np.full(n, rank * 1000 + i, dtype=np.int32)
                works.append(comm.broadcast(b, root=(i % size), async_op=True))
                checks.append((b, np.full(n, (i % size) * 1000 + i, dtype=np.int32)))
            else:
                works.append(comm.all_reduce(x, async_op=True))
                checks.append((x, want))
            if i % 13 == 12:
                comm.barrier()  # blocking: waits for every earlier Work
                assert all(w.is_completed() for w in works), i
            if rank == i % size:
                time.sleep(0.002)  # perturb which rank issues first; correctness does not depend on it
        rs = np.empty(3, dtype=np.int64)
        works.append(comm.reduce_scatter(np.arange(3 * size, dtype=np.int64), rs, async_op=True))
        checks.append((rs, size * np.arange(3 * rank, 3 * rank + 3)))
        red = np.full(4, rank + 1, dtype=np.int64)
        works.append(comm.reduce(red, root=0, async_op=True))
        checks.append((red, np.full(4, size * (size + 1) // 2 if rank == 0 else rank + 1)))
        works.append(comm.barrier(async_op=True))
        results = pycoll.wait_all(works)
        for (got, want), result in zip(checks, results):
            assert result is got and np.array_equal(got, want), (got, want)
        report["works"] = len(works)
        report["ok"] = True
    elif scenario == "callbacks":
        x = np.full(1000, rank + 1, dtype=np.int64)
        w = comm.all_reduce(x, async_op=True)
        seen = []
        w.add_done_callback(lambda work: seen.append(("first", work is w, x[0])))
        w.wait()
        w.add_done_callback(lambda work: seen.append(("late", work is w, x[0])))
        total = size * (size + 1) // 2
        assert seen == [("first", True, total), ("late", True, total)], seen
        report["ok"] = True
    elif scenario in ("wait_timeout", "interrupt_wait"):
        # Rank 1 joins the collective only after rank 0's first wait has ended without it: by its timeout
        # (wait_timeout), or by Ctrl-C, which reaches the waiting thread, not the progress thread
        # (interrupt_wait). Either way the collective keeps running and completes on a second wait.
        flag = os.environ["TEST_FLAG"]
        x = np.full(10, rank + 1, dtype=np.int64)
        first_timeout = 0.2 if scenario == "wait_timeout" else timeout
        if rank == 0:
            w = comm.all_reduce(x, async_op=True)
            try:
                sys.stdout.write(json.dumps({"ready": True}) + "\n")  # the test may send SIGINT from here on
                sys.stdout.flush()
                w.wait(timeout=first_timeout)
                report["first"] = "returned"
            except (pycoll.Timeout, KeyboardInterrupt) as exc:
                report["first"], report["first_message"] = type(exc).__name__, str(exc)
            report["completed_before"] = w.is_completed()
            open(flag, "w").close()
            assert w.wait(timeout=timeout) is x
        else:
            sys.stdout.write(json.dumps({"ready": True}) + "\n")
            sys.stdout.flush()
            wait_for_file(flag)
            comm.all_reduce(x, async_op=True).wait()
        assert np.array_equal(x, np.full(10, size * (size + 1) // 2)), x
        comm.barrier()  # the communicator still works
        report["ok"] = True
    elif scenario in ("kill", "stop"):
        victim = int(os.environ.get("TEST_VICTIM", "1"))
        comm.barrier()
        # The victim goes only once every other rank is out of the barrier (else that is what fails).
        flags = os.environ["TEST_FLAG"]
        if rank != victim:
            open(f"{flags}.{rank}", "w").close()
        else:
            for r in range(size):
                if r != victim:
                    wait_for_file(f"{flags}.{r}")
            os.kill(os.getpid(), signal.SIGKILL if scenario == "kill" else signal.SIGSTOP)
            time.sleep(timeout * 3)  # (SIGSTOP: the test resumes and kills it at the end)
        x = np.ones(1 << 16, dtype=np.float32)
        t = time.monotonic()
        works = [comm.all_reduce(x, async_op=True), comm.barrier(async_op=True)]
        report["issue_us"] = (time.monotonic() - t) * 1e6
        try:
            works[0].wait()
            report["error"] = "none"
        except pycoll.PycollError as exc:
            report.update(error=type(exc).__name__, message=str(exc), failed_rank=getattr(exc, "rank", None))
        report["detect_s"] = time.monotonic() - t
        try:
            works[1].wait(timeout=5)  # queued behind the failed one: fails with the same cause
            report["later"] = "ok"
        except pycoll.PycollError as exc:
            report["later"] = type(exc).__name__
        try:
            comm.all_reduce(x)
            report["after"] = "no error"
        except pycoll.PycollError as exc:
            report["after"] = type(exc).__name__
        report["ok"] = True
    elif scenario == "close_pending":
        xs = [np.full(1 << 21, rank, dtype=np.float32) for _ in range(30)]  # 8 MiB each
        works = [comm.all_reduce(x, async_op=True) for x in xs]
        del xs  # the communicator keeps the arrays alive for the Works
        t = time.monotonic()
        try:
            comm.close()
        except pycoll.PycollError as exc:
            report["close_error"] = type(exc).__name__
        report["close_s"] = time.monotonic() - t
        report["completed"] = all(w.is_completed() for w in works)
        report["outcomes"] = [outcome(w) for w in works]
        try:
            comm.all_reduce(np.ones(3), async_op=True)
            report["after"] = "no error"
        except pycoll.PycollError as exc:
            report["after"] = type(exc).__name__
        report["ok"] = True
    else:
        raise SystemExit(f"unknown scenario {scenario}")
finally:
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
try:
    comm.close()
except pycoll.PycollError:
    pass
