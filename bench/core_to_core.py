"""How fast this machine moves data between two cores right now, without pycoll: two processes, each pinned to a
core of its own, pass 64 KiB back and forth through shared memory (each copies what the other wrote, then
writes its own), and the median round trip is printed, once per quarter second.

On a virtual machine the answer can change from one second to the next: the host moves the guest's cores, and
the same copy then takes several times as long. Every collective on one host rides on this path, so a
benchmark whose runs straddle such a change measures the machine, not the library. bench/mpi_peers.py runs this
probe before each of its runs and reports what it saw beside its tables.

    python bench/core_to_core.py [--seconds 2] [--bytes 65536]
"""

import argparse
import multiprocessing
import os
import statistics
import time
from multiprocessing import shared_memory

import numpy as np

_FLAG_BYTES = 64  # one cache line: the turn counter


def _arrays(shm, nbytes):
    flag = np.ndarray((2,), np.int64, shm.buf[:16])  # the turn, and the far side's "ready"
    a = np.ndarray((nbytes,), np.uint8, shm.buf[_FLAG_BYTES:_FLAG_BYTES + nbytes])
    b = np.ndarray((nbytes,), np.uint8, shm.buf[_FLAG_BYTES + nbytes:_FLAG_BYTES + 2 * nbytes])
    return flag, a, b


def _pin(cpu):
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


_STOP = -1


def _answer(name, nbytes, cpu):
    """The far side: wait for the turn, copy what the near side wrote, write back, pass the turn; until _STOP."""
    _pin(cpu)
    shm = shared_memory.SharedMemory(name=name)
    try:
        flag, a, b = _arrays(shm, nbytes)
        mine = np.full(nbytes, 2, np.uint8)
        got = np.empty(nbytes, np.uint8)
        flag[1] = 1
        turn = 1
        while True:
            seen = flag[0]
            if seen == _STOP:
                return
            if seen == turn:
                np.copyto(got, a)
                np.copyto(b, mine)
                flag[0] = turn + 1
                turn += 2
    finally:
        del flag, a, b
        shm.close()


def round_trips(seconds=2.0, nbytes=65536, every=0.25):
    """Median round-trip microseconds of each `every`-second window over `seconds`, or [] where this process
    may use fewer than two cores."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return []
    shm = shared_memory.SharedMemory(create=True, size=_FLAG_BYTES + 2 * nbytes)
    far = multiprocessing.get_context("spawn").Process(target=_answer, args=(shm.name, nbytes, cpus[1]), daemon=True)
    flag, a, b = _arrays(shm, nbytes)
    medians = []
    try:
        flag[0] = flag[1] = 0
        far.start()
        _pin(cpus[0])
        started = time.perf_counter()
        while flag[1] != 1:  # its start (an interpreter and numpy) is no round trip
            if time.perf_counter() - started > 60.0:
                raise TimeoutError("core_to_core: the far process did not start within 60 s")
            time.sleep(0.001)
        mine = np.full(nbytes, 1, np.uint8)
        got = np.empty(nbytes, np.uint8)
        turn = 0
        for _ in range(max(1, round(seconds / every))):
            times, start = [], time.perf_counter()
            while not times or time.perf_counter() - start < every:
                t = time.perf_counter()
                np.copyto(a, mine)
                flag[0] = turn + 1
                while flag[0] != turn + 2:
                    if time.perf_counter() - t > 5.0:
                        raise TimeoutError("core_to_core: the far process did not answer within 5 s")
                np.copyto(got, b)
                times.append(time.perf_counter() - t)
                turn += 2
            medians.append(statistics.median(times) * 1e6)
    finally:
        flag[0] = _STOP
        if far.pid is not None:  # started
            far.join(10)
            if far.is_alive():
                far.kill()
        del flag, a, b
        shm.close()
        shm.unlink()
        os.sched_setaffinity(0, cpus)
    return medians


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--bytes", type=int, default=65536)
    args = p.parse_args()
    medians = round_trips(args.seconds, args.bytes)
    if not medians:
        print("fewer than two cores: nothing to measure")
        return
    print(f"{args.bytes} B round trip between two cores (us, median of each quarter second):")
    print(" ".join(f"{m:.1f}" for m in medians))


if __name__ == "__main__":
    main()
