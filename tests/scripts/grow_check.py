"""What test_grow.py's members (grow_worker.py) and new processes (grow_joiner.py) check on the grown
communicator."""

import numpy as np


def check_collectives(c):
    """Every collective kind on c, checked exactly; the all-reduce's sum of (rank + 1)."""
    n = c.size
    x = np.array([c.rank + 1.0])
    c.all_reduce(x)
    assert x[0] == n * (n + 1) / 2, x
    out = np.zeros(n)
    c.all_gather(np.array([float(c.rank)]), out)
    assert list(out) == list(range(n)), out
    b = np.array([float(c.rank)])
    c.broadcast(b, root=n - 1)
    assert b[0] == n - 1, b
    rs = np.zeros(1)
    c.reduce_scatter(np.ones(n), rs)
    assert rs[0] == n, rs
    a2a = np.zeros(n)
    c.all_to_all(np.full(n, float(c.rank)), a2a)
    assert list(a2a) == list(range(n)), a2a
    c.barrier()
    return float(x[0])
