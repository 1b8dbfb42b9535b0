"""The timing method, shared by pycoll and every peer so that their numbers compare.

Each timed iteration starts right after a barrier, so a rank never measures time it spent waiting for a late
peer to arrive from the previous iteration, and ends when this rank's collective returns. A rank's time for
the size is the median of its iterations (robust against the scheduler hiccups of a shared machine). The
ranks' medians are then gathered with the library under test itself, and reported as min/median/max across
ranks; the headline number is the max: a collective is finished only when its slowest rank is.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Sequence


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


def across_ranks(rank_medians: Sequence[float]) -> Timing:
    """min/median/max of the ranks' own medians."""
    return Timing(min(rank_medians), statistics.median(rank_medians), max(rank_medians))


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
