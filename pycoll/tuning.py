"""The cost model behind algorithm="auto": time = alpha per message + beta per byte sent + gamma per byte
reduced (native/algorithms/cost_model.c has the per-algorithm formulas). `pycoll tune` measures the three
constants on this machine and stores them; init() gives every rank rank 0's stored model, so all ranks pick the
same algorithm.

Run one rank of the measurement with `python -m pycoll.tuning` (what `pycoll tune -n N` starts).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

import numpy as np

MEASURE_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class CostModel:
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float

    def as_array(self):
        return np.array([self.alpha_s, self.beta_s_per_byte, self.gamma_s_per_byte], dtype=np.float64)

    @classmethod
    def from_array(cls, values):
        return cls(*(float(v) for v in values))


def tune_file() -> Path:
    """Where the measured model lives: PYCOLL_TUNE_FILE, else ~/.cache/pycoll/cost_model.json."""
    override = os.environ.get("PYCOLL_TUNE_FILE")
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "pycoll" / "cost_model.json"


def load():
    """The stored model, or None when there is none (or it is unreadable: auto then uses the defaults)."""
    try:
        data = json.loads(tune_file().read_text())
        model = CostModel(data["alpha_s"], data["beta_s_per_byte"], data["gamma_s_per_byte"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    values = model.as_array()
    return model if np.all(np.isfinite(values)) and np.all(values > 0) else None


def save(model: CostModel, *, world_size: int) -> Path:
    path = tune_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = dict(dataclasses.asdict(model), measured_with_ranks=world_size,
                  measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    return path


def _median_time(fn, iters, barrier):
    times = []
    for _ in range(iters):
        barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure(comm) -> CostModel:
    """Measure alpha, beta and gamma with every rank of comm taking part; every rank returns the same model
    (the slowest rank's value of each constant, since the slowest rank sets the pace of a collective)."""
    from pycoll import kernels

    n = comm.size
    a = np.ones(MEASURE_BYTES // 4, dtype=np.float32)
    b = np.ones_like(a)
    gamma = _median_time(lambda: kernels.reduce_into(a, b, "sum"), 5, lambda: None) / a.nbytes
    if n > 1:
        tiny = np.ones(1, dtype=np.float32)
        steps = math.log2(1 << (n.bit_length() - 1)) + (0 if n & (n - 1) == 0 else 2)
        alpha = _median_time(lambda: comm.all_reduce(tiny, algorithm="recursive_doubling"), 200,
                             comm.barrier) / steps
        ring = _median_time(lambda: comm.all_reduce(a, algorithm="ring"), 5, comm.barrier)
        sent = 2.0 * (n - 1) / n * a.nbytes
        beta = max(ring - 2 * (n - 1) * alpha, ring * 0.1) / sent
    else:
        alpha, beta = 15e-6, 1 / 3e9
    slowest = np.array([alpha, beta, gamma], dtype=np.float64)
    comm.all_reduce(slowest, op="max")
    return CostModel.from_array(slowest)


def main():
    import pycoll

    with pycoll.init() as comm:
        model = measure(comm)
        if comm.rank == 0:
            path = save(model, world_size=comm.size)
            print(f"alpha = {model.alpha_s * 1e6:.2f} us per message")
            print(f"beta  = {1 / model.beta_s_per_byte / 1e9:.2f} GB/s per link")
            print(f"gamma = {1 / model.gamma_s_per_byte / 1e9:.2f} GB/s reduction")
            print(f"saved to {path}")


if __name__ == "__main__":
    main()
