"""A real all-reduce across processes: run with `pycoll run -n 4 examples/allreduce_demo.py`."""

import numpy as np

import pycoll

with pycoll.init() as comm:
    x = np.full(1 << 20, comm.rank + 1, dtype=np.float32)   # rank r contributes r + 1
    comm.all_reduce(x)                                       # in place; algorithm chosen automatically
    expected = comm.size * (comm.size + 1) / 2
    assert np.all(x == expected), "wrong result"
    # Three different things: the backend asked for, the transport it chose, the algorithm that ran.
    print(f"rank {comm.rank}/{comm.size}: all_reduce of {x.nbytes >> 20} MiB float32 = {x[0]:g}, as expected "
          f"(backend {comm.backend}, transport {comm.transport}, algorithm {comm.last_algorithm})")
