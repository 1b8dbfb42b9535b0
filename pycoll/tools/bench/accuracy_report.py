"""`pycoll bench --accuracy-report`: all-reduce error in ulps against the correctly rounded exact sum, per
algorithm x accuracy mode x world size x dtype x data set. pycoll.tools.accuracy measures; this picks what to run
from the command line and reports progress (bench/accuracy_report.py writes the full results file)."""

from __future__ import annotations

import dataclasses

from pycoll.algorithms import ACCURACY_ALIASES, ALGORITHMS
from pycoll.tools import accuracy
from pycoll.tools.bench import sweep

# Real processes: the world sizes one host can start; simulated ranks (threads driving the same C schedules)
# reach the large ones.
PROCESS_WORLDS = (2, 4, 8, 16)
SIM_WORLDS = (2, 4, 8, 16, 32, 64, 128)
KEYS = ("transport", "world", "algorithm", "accuracy", "dtype", "data", "count", "max_ulp", "mean_ulp",
        "identical")


@dataclasses.dataclass(frozen=True)
class Plan:
    worlds: list
    processes: bool
    algorithms: list
    accuracies: list
    dtypes: list
    datasets: list
    count: int
    seed: int


def parse_worlds(text: str | None, processes: bool) -> list[int]:
    """'2,4,8' -> [2, 4, 8]; None -> the default world sizes of real processes or of simulated ranks."""
    if text is None:
        return list(PROCESS_WORLDS if processes else SIM_WORLDS)
    try:
        worlds = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise ValueError(f"--worlds: give world sizes separated by commas, e.g. 2,4,8; got {text!r}") from None
    if not worlds or min(worlds) < 1:
        raise ValueError(f"--worlds: each world size must be at least 1, got {text!r}")
    return worlds


def plan(*, worlds, processes, algorithms, accuracies, dtypes, datasets, count, seed) -> Plan:
    """What to run, from the command line's text (None = everything); ValueError names the bad argument."""
    if algorithms is None or algorithms.strip() == "all":
        algorithm_list = list(accuracy.ALGORITHMS)
    else:
        algorithm_list = sweep.parse_list(algorithms, tuple(ALGORITHMS), "--algorithm")
    modes = ",".join(ACCURACY_ALIASES.get(m.strip(), m.strip()) for m in (accuracies or "all").split(","))
    if count < 1:
        raise ValueError(f"--count must be at least 1, got {count}")
    return Plan(worlds=parse_worlds(worlds, processes), processes=processes, algorithms=algorithm_list,
                accuracies=sweep.parse_list(modes, accuracy.ACCURACIES, "--accuracy"),
                dtypes=sweep.parse_list(dtypes or "all", accuracy.FLOAT_DTYPES, "-d"),
                datasets=sweep.parse_list(datasets or "all", accuracy.DATASETS, "--data"), count=count,
                seed=seed)


def run(p: Plan, progress, timeout: float) -> list[dict]:
    """The report's rows. Progress advances per world size (one job each) with real processes, per world
    size x dtype with simulated ranks."""
    groups = [p.dtypes] if p.processes else [[d] for d in p.dtypes]
    where = "real processes over TCP" if p.processes else "simulated ranks"
    progress.start(len(p.worlds) * len(groups), f"accuracy report, {where}")
    rows = []
    try:
        for world in p.worlds:
            for dtypes in groups:
                rows += accuracy.run_accuracy_report([world], p.algorithms, dtypes, p.accuracies, p.datasets,
                                                     p.count, p.seed, p.processes, timeout)
                progress.advance(f"{world} ranks, {', '.join(dtypes)}")
    finally:
        progress.finish()
    return rows


def failures(rows) -> list[dict]:
    """Rows that miss pycoll's promises: ranks whose results differ, or compensated or reproducible mode over
    1 ulp."""
    return [r for r in rows if not r["identical"] or (r["accuracy"] in ("compensated", "reproducible") and
                                                      r["max_ulp"] > 1)]
