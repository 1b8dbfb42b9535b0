"""`pycoll tune`: measures the cost model's constants (pycoll.cost_model) and each algorithm's time at a small and
a large size on this machine, fits the per-algorithm factors and stores them.

Run one rank of the measurement with `python -m pycoll.tools.tuning` (what `pycoll tune -n N` starts).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from pycoll._bindings import sim as _sim
from pycoll._bindings.comm import COST_MODEL_LEN
from pycoll.algorithms import ALGORITHMS
from pycoll.cost_model import CHOICES, CostModel, save

MEASURE_BYTES = 16 << 20
# The two sizes each algorithm's factors are fitted from: latency dominates the small one, bandwidth the large.
SMALL_BYTES = 256
LARGE_BYTES = MEASURE_BYTES
SMALL_ITERS, LARGE_ITERS = 50, 7
# A measured factor is kept above this: noise can make a fit zero or negative, and 0 would mean "textbook".
MIN_SCALE = 0.01


def _fastest_time(fn, iters, barrier):
    """Seconds of fn, the fastest of iters runs, each after a barrier. Not the median: on a busy host the
    times are bimodal, the algorithm's own or far longer when a rank polling for its peer keeps that peer off
    the core until the spin ends (PYCOLL_SPIN_US). On a loaded host most of a sample can
    be the slow kind, for whichever algorithm ran then, and a median (or a quartile) then fits noise; a run
    cannot be faster than the algorithm allows.
    """
    return min(time_each(fn, iters, barrier))


def time_each(fn, iters, barrier):
    """Seconds of each of iters runs of fn, each run after barrier()."""
    times = []
    for _ in range(iters):
        barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _measure_constants(comm):
    """alpha, beta, gamma on this rank."""
    from pycoll import kernels

    n = comm.size
    a = np.ones(MEASURE_BYTES // 4, dtype=np.float32)
    b = np.ones_like(a)
    gamma = _fastest_time(lambda: kernels.reduce_into(a, b, "sum"), 5, lambda: None) / a.nbytes
    if n == 1:
        return 15e-6, 1 / 3e9, gamma
    tiny = np.ones(1, dtype=np.float32)
    steps = math.log2(1 << (n.bit_length() - 1)) + (0 if n & (n - 1) == 0 else 2)
    alpha = _fastest_time(lambda: comm.all_reduce(tiny, algorithm="recursive_doubling"), 200,
                         comm.barrier) / steps
    ring = _fastest_time(lambda: comm.all_reduce(a, out=b, algorithm="ring"), 5, comm.barrier)
    sent = 2.0 * (n - 1) / n * a.nbytes
    beta = max(ring - 2 * (n - 1) * alpha, ring * 0.1) / sent
    return alpha, beta, gamma


def _time_algorithm(comm, algorithm, nbytes, iters):
    """Fastest seconds of one all-reduce of nbytes (out of place, so repeated sums cannot overflow)."""
    x = np.ones(nbytes // 4, dtype=np.float32)
    out = np.empty_like(x)
    comm.all_reduce(x, out=out, algorithm=algorithm)  # untimed: first use sets up scratch space
    return _fastest_time(lambda: comm.all_reduce(x, out=out, algorithm=algorithm), iters, comm.barrier)


def fit_scales(constants, size, times):
    """Each algorithm's (latency, bandwidth) factors from its measured (small, large) times: two sizes, two
    unknowns, since time = latency_scale * latency terms + bandwidth_scale * byte terms."""
    model = list(constants) + [0.0] * (COST_MODEL_LEN - 3)
    latency_scale, bandwidth_scale = {}, {}
    for name, (t_small, t_large) in times.items():
        latency_s, small_s = _sim.all_reduce_cost_terms(ALGORITHMS[name], size, SMALL_BYTES, model)
        _, large_s = _sim.all_reduce_cost_terms(ALGORITHMS[name], size, LARGE_BYTES, model)
        bandwidth = max((t_large - t_small) / (large_s - small_s), MIN_SCALE)
        latency_scale[name] = max((t_small - bandwidth * small_s) / latency_s, MIN_SCALE)
        bandwidth_scale[name] = bandwidth
    return CostModel(*constants, latency_scale=latency_scale, bandwidth_scale=bandwidth_scale)


def comm_algorithms(comm):
    """The algorithms comm's backend runs (a native one, such as "shm_slots", only where its transport has it)."""
    return comm._backend.algorithms


def measure(comm) -> CostModel:
    """Measure alpha, beta and gamma, then each algorithm's time at SMALL_BYTES and LARGE_BYTES, with every rank
    of comm taking part; every rank returns the same model (fitted from the slowest rank's value of each
    measurement, since the slowest rank sets the pace of a collective)."""
    measured = list(_measure_constants(comm))
    choices = [name for name in CHOICES if name in comm_algorithms(comm)]
    if comm.size > 1:
        for name in choices:
            measured += [_time_algorithm(comm, name, SMALL_BYTES, SMALL_ITERS),
                         _time_algorithm(comm, name, LARGE_BYTES, LARGE_ITERS)]
    slowest = np.array(measured, dtype=np.float64)
    comm.all_reduce(slowest, op="max")
    constants = slowest[:3]
    if comm.size == 1:
        # Nothing to time between ranks: keep the default factors.
        defaults = CostModel.from_array(_sim.default_cost_model())
        return dataclasses.replace(defaults, alpha_s=constants[0], beta_s_per_byte=constants[1],
                                   gamma_s_per_byte=constants[2])
    times = {name: (slowest[3 + 2 * i], slowest[4 + 2 * i]) for i, name in enumerate(choices)}
    return fit_scales(constants, comm.size, times)


def _size_text(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def choice_table(model: CostModel, size: int, max_bytes: int = 1 << 30):
    """[(first bytes, last bytes, algorithm)]: what auto picks for all-reduces of 4 B .. max_bytes, powers of 2."""
    names = {ident: name for name, ident in ALGORITHMS.items()}
    values = model.as_array()
    rows = []
    nbytes = 4
    while nbytes <= max_bytes:
        name = names[_sim.choose_all_reduce(size, nbytes, values)]
        if rows and rows[-1][2] == name:
            rows[-1][1] = nbytes
        else:
            rows.append([nbytes, nbytes, name])
        nbytes *= 2
    return [tuple(row) for row in rows]


def report(model: CostModel, size: int):
    """The lines `pycoll tune` prints: the constants, each algorithm's factors, and where auto picks what."""
    lines = [f"alpha = {model.alpha_s * 1e6:.2f} us per message",
             f"beta  = {1 / model.beta_s_per_byte / 1e9:.2f} GB/s per link",
             f"gamma = {1 / model.gamma_s_per_byte / 1e9:.2f} GB/s reduction"]
    if model.latency_scale:
        lines.append(f"{'algorithm':<20} {'latency x':>10} {'bandwidth x':>12}")
        lines += [f"{name:<20} {model.latency_scale[name]:>10.3g} {model.bandwidth_scale[name]:>12.3g}"
                  for name in CHOICES if name in model.latency_scale]
    lines.append(f"auto at {size} ranks:")
    lines += [f"  {_size_text(first):>8} .. {_size_text(last):<8} {name}"
              for first, last, name in choice_table(model, size)]
    return lines


def main():
    import pycoll

    with pycoll.init() as comm:
        model = measure(comm)
        if comm.rank == 0:
            # The transport's backend ("shm" or "tcp" under "cpu"): the one whose creation loads it.
            path = save(model, world_size=comm.size, backend=comm.transport)
            print("\n".join(report(model, comm.size)))
            print(f"saved to {path}")


if __name__ == "__main__":
    main()
