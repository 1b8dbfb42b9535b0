"""Ray actors all-reduce over pycoll: run with `python examples/ray_allreduce.py`
(needs pip install 'pycoll-collectives[ray]', or ".[ray]" from a checkout).

It joins the Ray cluster that RAY_ADDRESS names, else starts a small local one, puts 3 actors in one collective
group of backend "PYCOLL" and calls Ray's own ray.util.collective.allreduce in each: the sum runs over pycoll
(shared memory between the actors of one host, TCP across hosts).
"""

import os

import numpy as np
import ray

WORLD = 3


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, rank):
        import pycoll.ray  # registers the "PYCOLL" backend with Ray in this actor's process

        self.rank = rank
        self.group = pycoll.ray.init_collective_group(WORLD, rank, group_name="example", timeout=60)

    def step(self):
        from ray.util import collective as col

        x = np.full(1 << 20, self.rank + 1, dtype=np.float32)  # rank r contributes r + 1
        col.allreduce(x, group_name="example")                 # Ray's API; pycoll underneath
        return float(x[0]), float(x.min()), float(x.max()), self.group.transport


if __name__ == "__main__":
    # A cluster that is already running keeps its own resources: Ray refuses num_cpus when joining one.
    own_cluster = {} if os.environ.get("RAY_ADDRESS") else {"num_cpus": 2}
    ray.init(**own_cluster, include_dashboard=False, log_to_driver=False)
    try:
        workers = [Worker.remote(rank) for rank in range(WORLD)]  # the constructors rendezvous together
        expected = WORLD * (WORLD + 1) / 2
        for rank, (first, low, high, transport) in enumerate(ray.get([w.step.remote() for w in workers],
                                                                     timeout=120)):
            assert low == high == expected, f"rank {rank}: got {low}..{high}, want {expected}"
            print(f"actor {rank}/{WORLD}: ray.util.collective.allreduce of 4 MiB float32 over pycoll "
                  f"({transport}) = {first:g}, as expected")
    finally:
        ray.shutdown()
