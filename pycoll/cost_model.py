"""The cost model behind algorithm="auto", NCCL-style: each algorithm's time = latency + bytes / bandwidth,
from the textbook counts of its messages (alpha each), bytes sent (beta) and bytes reduced (gamma), with a
per-algorithm factor on each part (native/algorithms/cost_model.c). `pycoll tune` (pycoll.tools.tuning) measures
them and stores them here; init() gives every rank rank 0's stored model, so all ranks pick the same algorithm.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from pycoll import settings
from pycoll._bindings.comm import COST_MODEL_LEN
from pycoll.algorithms import ALGORITHM_ALIASES, ALGORITHMS, COLL_ALGORITHMS

# The algorithms auto chooses among on one host (the all-reduce table, decision.c), in id order (the cost model's
# arrays are indexed by id). Not hierarchical: on one host it is the ring, and its inter-host terms cannot be
# measured from one host.
CHOICES = [name for name in sorted(COLL_ALGORITHMS["all_reduce"], key=ALGORITHMS.get) if name != "hierarchical"]
# Entries per factor table: one per algorithm id.
_ID_SLOTS = (COST_MODEL_LEN - 3) // 2


@dataclasses.dataclass(frozen=True)
class CostModel:
    """One machine's model: alpha_s (seconds per message), beta_s_per_byte (transfer), gamma_s_per_byte
    (reduction), and per algorithm name a factor on its latency part and on its bandwidth part (a missing name
    means 1: the textbook formula). pycoll_cost_model_t (native/include/pycoll/algorithms.h) is its C form."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    # Algorithm name -> factor on its latency / bandwidth part; a missing name means 1 (the textbook formula).
    latency_scale: dict = dataclasses.field(default_factory=dict)
    bandwidth_scale: dict = dataclasses.field(default_factory=dict)

    def as_array(self):
        """The flat layout the native side takes (pycoll/_bindings/cost_model.pxi); 0 stands for a missing factor."""
        values = [self.alpha_s, self.beta_s_per_byte, self.gamma_s_per_byte,
                  *_by_id(self.latency_scale), *_by_id(self.bandwidth_scale)]
        return np.array(values, dtype=np.float64)

    @classmethod
    def from_array(cls, values):
        values = [float(v) for v in values]
        return cls(*values[:3], latency_scale=_from_id(values[3:3 + _ID_SLOTS]),
                   bandwidth_scale=_from_id(values[3 + _ID_SLOTS:]))


def _by_id(scale):
    """A factor table as a list indexed by algorithm id (0 for auto and for a missing name)."""
    values = [0.0] * _ID_SLOTS
    for name, factor in scale.items():
        values[ALGORITHMS[name]] = factor
    return values


def _from_id(values):
    return {name: values[ALGORITHMS[name]] for name in CHOICES if values[ALGORITHMS[name]] > 0}


def tune_file() -> Path:
    """Where the measured model lives: PYCOLL_TUNE_FILE, else ~/.cache/pycoll/cost_model.json."""
    override = settings.get("PYCOLL_TUNE_FILE")
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "pycoll" / "cost_model.json"


def _scales(data, key):
    """A stored factor table; files written before the factors existed have none (textbook formulas).
    Names this version does not know (a newer pycoll's algorithms) are skipped; a former name (a file written
    before the rename) counts as its current one."""
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise TypeError(key)
    table = {ALGORITHM_ALIASES.get(name, name): value for name, value in table.items()}
    return {name: float(value) for name, value in table.items() if name in CHOICES}


def load(backend=None):
    """The stored model, or None when there is none (or it is unreadable: auto then uses the defaults). A model
    measured over another backend than `backend` is None too: its times are another transport's (files
    without a backend, written before it was recorded, serve every backend)."""
    try:
        data = json.loads(tune_file().read_text())
        if backend is not None and data.get("measured_over", backend) != backend:
            return None
        model = CostModel(data["alpha_s"], data["beta_s_per_byte"], data["gamma_s_per_byte"],
                          _scales(data, "latency_scale"), _scales(data, "bandwidth_scale"))
        values = model.as_array()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not np.all(np.isfinite(values)) or np.any(values[:3] <= 0) or np.any(values[3:] < 0):
        return None
    return model


def save(model: CostModel, *, world_size: int, backend=None) -> Path:
    path = tune_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = dict(dataclasses.asdict(model), measured_with_ranks=world_size,
                  measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if backend is not None:
        record["measured_over"] = backend
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    return path
