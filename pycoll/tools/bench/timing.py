"""The timing method, shared by pycoll and every peer so that their numbers compare.

Each timed iteration starts right after a barrier, so a rank never measures time it spent waiting for a late
peer to arrive from the previous iteration, and ends when this rank's collective returns. A rank's time for
the size is the median of its iterations (robust against the scheduler hiccups of a shared machine). The
ranks' iteration times are then gathered with the library under test itself. The medians are reported as
min/median/max across ranks; the headline number is the max: a collective is finished only when its slowest
rank is. The spread over iterations is that of the slowest rank per iteration (the max over ranks of each
iteration's time): its 50th and 99th percentiles.

Device memory (--device cuda|npu) is timed as nccl-tests times it instead (time_windows): the timed calls run
back to back, in windows, between two events recorded on the current stream, with one synchronize per window;
a window's time per call is its elapsed time over its calls. The windows then stand where iterations stand
above: a rank's time is the median over its windows, and p50/p99 are over windows of the slowest rank's.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    min_s: float
    median_s: float
    max_s: float


def time_iterations(run: Callable[[], object], barrier: Callable[[], object], warmup: int, iters: int,
                    clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds per timed iteration of run(), each after a barrier."""
    for _ in range(warmup):
        barrier()
        run()
    times = []
    for _ in range(iters):
        barrier()
        t0 = clock()
        run()
        times.append(clock() - t0)
    return times


# Windows per size on device memory: enough for a median and a spread, few enough that each window holds
# several back-to-back calls (sweep.iterations gives 5 to 200 timed calls).
DEVICE_WINDOWS = 10


def window_sizes(iters: int, windows: int = DEVICE_WINDOWS) -> list[int]:
    """The calls in each window: iters calls in min(windows, iters) windows, as even as they divide."""
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    n = min(windows, iters)
    return [iters // n + (i < iters % n) for i in range(n)]


def time_windows(run: Callable[[], object], barrier: Callable[[], object], warmup: int, iters: int,
                 new_event: Callable[[], object], elapsed_ms: Callable[[object, object], float],
                 windows: int = DEVICE_WINDOWS) -> list[float]:
    """Seconds per call of run() in each window (window_sizes): after a barrier, a start event recorded on the
    current stream, the window's calls back to back, an end event, and one synchronize of it; the time is the
    events' elapsed time over the window's calls (nccl-tests' timing). The warm-up calls run back to back after
    a first barrier. new_event() makes a timing event with record() and synchronize(); elapsed_ms(start, end)
    is the milliseconds between two of them."""
    sizes = window_sizes(iters, windows)
    barrier()
    for _ in range(warmup):
        run()
    times = []
    for calls in sizes:
        barrier()
        start, end = new_event(), new_event()
        start.record()
        for _ in range(calls):
            run()
        end.record()
        end.synchronize()
        times.append(elapsed_ms(start, end) / 1e3 / calls)
    return times


def across_ranks(rank_medians: Sequence[float]) -> Timing:
    """min/median/max of the ranks' own medians."""
    return Timing(min(rank_medians), statistics.median(rank_medians), max(rank_medians))


def spread(times_by_rank: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(p50, p99) over iterations of the slowest rank's time per iteration. Percentiles interpolate between
    neighbouring iterations, as the median does, so p50 is never below any rank's median."""
    slowest = np.max(np.asarray(times_by_rank, dtype=np.float64), axis=0)
    if not slowest.size:
        raise ValueError("no timed iterations (iters must be at least 1)")
    p50, p99 = np.percentile(slowest, [50, 99])
    return float(p50), float(p99)


def rank_median(times: Sequence[float]) -> float:
    if not times:
        raise ValueError("no timed iterations (iters must be at least 1)")
    return statistics.median(times)


def bus_factor(collective: str, world: int) -> float:
    """busbw = algbw * factor: the bytes each rank's busiest link must carry per byte of the size, so that
    busbw is comparable to the hardware's bandwidth whatever the world size (the nccl-tests definitions)."""
    if collective == "all_reduce":
        return 2.0 * (world - 1) / world
    if collective in ("reduce_scatter", "all_gather", "all_to_all"):
        return (world - 1) / world
    if collective in ("broadcast", "reduce"):
        return 1.0
    if collective == "barrier":  # moves no bytes
        return 0.0
    raise ValueError(f"collective: unknown {collective!r}")


def bandwidths(collective: str, nbytes: int, world: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s, as nccl-tests)."""
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * bus_factor(collective, world)
