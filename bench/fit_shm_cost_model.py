"""Fit the shared-memory backend's default cost model (pycoll/plugins/shm.py, SHM_COST_MODEL) from measured
all-reduce times, and show where auto then picks what against the best measured algorithm.

    python -m pycoll bench -n 2 --backend shm --algorithm all -b 4 -e 64M -f 4 -d float32 -o sum --json shm2.json
    python -m pycoll bench -n 4 --backend shm --algorithm all -b 4 -e 64M -f 4 -d float32 -o sum --json shm4.json
    python bench/fit_shm_cost_model.py shm2.json shm4.json

The constants (alpha, beta, gamma) are fixed at round values of this kind of host (a flag or ring
round trip, a copy, a reduction); each algorithm's latency and bandwidth factors are then fitted by least
squares on relative error over every size and world size measured (a factor absorbs what the constant gets
wrong), as `pycoll tune` fits them from two sizes. Prints the model as Python and a table of auto's choice.
"""

import argparse
import collections
import json

import numpy as np

from pycoll._bindings import sim
from pycoll.algorithms import ALGORITHM_ALIASES, ALGORITHMS
from pycoll.cost_model import CostModel
from pycoll.tools.tuning import MIN_SCALE

# Round values: ~1 us per message over the rings, ~5 GB/s copies, ~10 GB/s reductions.
CONSTANTS = (1e-6, 1 / 5e9, 1 / 10e9)


def load(paths):
    """{(world, bytes): {algorithm: slowest rank's median us}} of the float32 sum all-reduce rows."""
    times = collections.defaultdict(dict)
    for path in paths:
        for row in json.load(open(path)):
            # Not hierarchical: on one host it is the ring (and auto never picks it there).
            if row["collective"] == "all_reduce" and row["algorithm"] not in ("auto", "hierarchical") \
                    and not row["wrong"]:
                # Runs recorded before the rename name the shared-memory transport's algorithm "shm".
                name = ALGORITHM_ALIASES.get(row["algorithm"], row["algorithm"])
                times[(row["world"], row["bytes"])][name] = row["time_us"] * 1e-6
    return times


def fit(times):
    base = list(CONSTANTS) + [0.0] * (len(sim.default_cost_model()) - 3)
    latency, bandwidth = {}, {}
    for name in sorted({a for per in times.values() for a in per}, key=ALGORITHMS.get):
        rows, target = [], []
        for (world, nbytes), per in times.items():
            if name in per:
                lat, bw = sim.all_reduce_cost_terms(ALGORITHMS[name], world, nbytes, base)
                rows.append([lat / per[name], bw / per[name]])
                target.append(1.0)
        (lat, b), *_ = np.linalg.lstsq(np.array(rows), np.array(target), rcond=None)
        latency[name], bandwidth[name] = max(float(lat), MIN_SCALE), max(float(b), MIN_SCALE)
    return CostModel(*CONSTANTS, latency_scale=latency, bandwidth_scale=bandwidth)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="pycoll bench --json outputs (--algorithm all, --backend shm)")
    args = parser.parse_args()
    times = load(args.json)
    model = fit(times)
    print("SHM_COST_MODEL = CostModel(")
    print(f"    alpha_s={model.alpha_s!r}, beta_s_per_byte={model.beta_s_per_byte!r}, "
          f"gamma_s_per_byte={model.gamma_s_per_byte!r},")
    print(f"    latency_scale={ {k: round(v, 4) for k, v in model.latency_scale.items()} },")
    print(f"    bandwidth_scale={ {k: round(v, 4) for k, v in model.bandwidth_scale.items()} })")
    names = {ident: name for name, ident in ALGORITHMS.items()}
    values = model.as_array()
    worst = 1.0
    print(f"\n{'ranks':>5} {'bytes':>10} {'best':>20} {'best us':>9} {'auto picks':>20} {'its us':>9} {'ratio':>6}")
    for (world, nbytes), per in sorted(times.items()):
        best = min(per, key=per.get)
        picked = names[sim.choose_all_reduce_among(world, nbytes, ALGORITHMS["shm_slots"], values)]
        ratio = per.get(picked, float("inf")) / per[best]
        worst = max(worst, ratio)
        print(f"{world:>5} {nbytes:>10} {best:>20} {per[best] * 1e6:>9.1f} {picked:>20} "
              f"{per.get(picked, float('nan')) * 1e6:>9.1f} {ratio:>6.2f}")
    print(f"\nworst auto / best: {worst:.2f}")


if __name__ == "__main__":
    main()
