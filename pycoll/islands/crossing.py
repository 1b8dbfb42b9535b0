"""How a fast-mode reduction (all_reduce, reduce, reduce_scatter) crosses islands: hierarchical or host-staged
flat, by a small cost model of the call's bytes, or as PYCOLL_ISLANDS_CROSSING forces.

Hierarchical runs two collectives inside each island (a reduce, a broadcast), the leaders' staging copies and
the leaders' host collective among as many ranks as there are islands; past one staging segment the copies
overlap that host collective. Flat stages every rank's input (all at once, each over its own link) and runs one
host collective among every rank. So flat saves the two island collectives' fixed cost, and pays for moving
every rank's bytes through host memory: it wins on small calls, hierarchical on large ones, and where the
crossover lies depends on the staging copies' bandwidth, which init measures (probe()) on each island's leader
and shares with every rank, so every rank decides alike.

The rest are estimates, not measurements: a vendor collective's launch and completion, one step of a host
collective among ranks of one host, and the bandwidth of the links inside a device island.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

CHOICES = ("hierarchical", "host-staged")
VENDOR_STEP_S = 20e-6
HOST_STEP_S = 5e-6
# The links inside a device island (NVLink, HCCS: tens to hundreds of GB/s), far faster than the staging copies.
ISLAND_LINK_BYTES_S = 100e9
# The probe's buffer: large enough that the copy's fixed cost does not dominate, small enough to cost
# well under a millisecond over PCIe; its best of PROBE_ROUNDS round trips.
PROBE_BYTES = 1 << 20
PROBE_ROUNDS = 3


def _best_seconds(step, rounds=PROBE_ROUNDS):
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def probe(runtime):
    """(copy bandwidth, host bandwidth) in bytes/s on this rank: the best of PROBE_ROUNDS staging round trips of
    PROBE_BYTES (host -> this rank's memory -> host) through `runtime` (staging.py), and of as many host memcpys.
    A host rank stages nothing: its copy bandwidth is infinite."""
    host = np.zeros(PROBE_BYTES, np.uint8)
    back = np.empty_like(host)
    host_bandwidth = PROBE_BYTES / _best_seconds(lambda: np.copyto(back, host))
    if runtime.memory == "host":
        return math.inf, host_bandwidth
    device, handle = runtime.allocate(PROBE_BYTES)
    try:
        def round_trip():
            runtime.to_device(device, host.ctypes.data, PROBE_BYTES)
            runtime.to_host(back.ctypes.data, device, PROBE_BYTES)

        return 2 * PROBE_BYTES / _best_seconds(round_trip), host_bandwidth
    finally:
        runtime.free(handle)


def _host_collective(ranks, nbytes, bandwidth):
    """A reduction among `ranks` ranks of one host: a step per doubling, and every other rank's bytes read and
    the result written through the host's memory, which they share."""
    if ranks <= 1:
        return 0.0
    return HOST_STEP_S * math.ceil(math.log2(ranks)) + 2 * nbytes * (ranks - 1) / bandwidth


def _island_collective(island_size, memory, nbytes, host_bandwidth):
    """One collective inside an island: a host one on host memory, else the vendor's over its own links."""
    if island_size <= 1:
        return 0.0
    if memory == "host":
        return _host_collective(island_size, nbytes, host_bandwidth)
    return VENDOR_STEP_S + 2 * nbytes * (island_size - 1) / island_size / ISLAND_LINK_BYTES_S


class CrossingModel(NamedTuple):
    """islands: (size, memory kind, copy bandwidth in bytes/s) of each island; host_bandwidth: bytes/s;
    segment_bytes: the hierarchical path's staging segment; forced: "auto" or one of CHOICES."""

    islands: tuple
    host_bandwidth: float
    segment_bytes: int
    forced: str = "auto"

    def hierarchical(self, nbytes):
        """Seconds: the slowest island's reduce and broadcast, the leaders' copies and their host collective
        (overlapping past one segment)."""
        inside = max(2 * _island_collective(size, memory, nbytes, self.host_bandwidth)
                     for size, memory, _ in self.islands)
        copies = max(2 * nbytes / bandwidth for _, _, bandwidth in self.islands)
        between = _host_collective(len(self.islands), nbytes, self.host_bandwidth)
        if nbytes <= self.segment_bytes:
            return inside + copies + between
        # A pipeline: the slower stage throughout, the faster one for one segment.
        return inside + max(copies, between) + min(copies, between) * self.segment_bytes / nbytes

    def flat(self, nbytes):
        """Seconds: every rank's copies (at once, the slowest island's), one host collective among every rank."""
        copies = max(2 * nbytes / bandwidth for _, _, bandwidth in self.islands)
        return copies + _host_collective(sum(size for size, _, _ in self.islands), nbytes, self.host_bandwidth)

    def choose(self, nbytes):
        """"hierarchical" or "host-staged" for a reduction of `nbytes` (what the setting forces, else the cheaper
        by the model; a tie goes hierarchical)."""
        if self.forced != "auto":
            return self.forced
        return "host-staged" if self.flat(nbytes) < self.hierarchical(nbytes) else "hierarchical"
