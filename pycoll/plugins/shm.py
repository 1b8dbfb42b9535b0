"""The shared-memory backend: host memory, every rank on one host, pycoll's algorithms over rings in shared
memory (native/transport/shm_transport.c)."""

from __future__ import annotations

import os

from pycoll import plugins
from pycoll.algorithms import ALGORITHMS
from pycoll.plugins.host import HostBackend

SHM_DIR = "/dev/shm"


def default_cost_model():
    """auto's model over shared memory where `pycoll tune` stored none: the library's defaults are loopback
    TCP's. Fitted by bench/fit_shm_cost_model.py from `pycoll bench --backend shm --algorithm all` at 2 and 4
    ranks on the 2-core development host (bench/results/shm.md says when and how)."""
    from pycoll.cost_model import CostModel

    return CostModel(**SHM_COST_MODEL)


# bench/fit_shm_cost_model.py's output for bench/results/shm_cost_model.md's runs.
SHM_COST_MODEL = dict(
    alpha_s=1e-06, beta_s_per_byte=2e-10, gamma_s_per_byte=1e-10,
    latency_scale={'ring': 1.1237, 'halving_doubling': 1.0964, 'mesh': 1.0034, 'recursive_doubling': 1.5135,
                   'shm_slots': 0.5844},
    bandwidth_scale={'ring': 0.9172, 'halving_doubling': 0.8871, 'mesh': 1.0394, 'recursive_doubling': 0.8707,
                     'shm_slots': 0.5918})


class ShmBackend(HostBackend):
    """The host engine and pycoll's algorithms over the shared-memory transport (native/transport/shm_transport.c),
    plus that transport's native collectives (algorithm "shm_slots": native/transport/shm_collectives.c). Every
    rank on one host: the C bootstrap refuses others, naming the ranks elsewhere. One rank too: its collectives
    are the shared-memory transport's (algorithm "shm_slots" runs everywhere this backend does)."""

    name = "shm"
    algorithms = tuple(ALGORITHMS)
    transport_choice = "shm"

    def probe(self):
        if not os.path.isdir(SHM_DIR):
            return f"{SHM_DIR} is missing (POSIX shared memory is not mounted)"
        return None

    def cost_model_for(self, transport):
        return self.name, default_cost_model()


plugins.register(ShmBackend())
