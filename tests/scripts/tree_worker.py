"""One rank of the reduce_tree test: a pytree of mixed shapes and dtypes (JAX leaves too when JAX is
installed) reduced with small buckets; every leaf must equal a per-leaf all-reduce of the same data exactly
(integer-valued data: every summation order gives the same bits) and keep its type. Prints one JSON line."""

import importlib.util
import json
import os
import sys

import numpy as np

import pycoll

comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "30")))
rank = comm.rank
shapes = [(7,), (3, 5), (128,), (1,), (33, 2), (0,), (1000,), (4, 4, 4)] * 3
dtypes = [np.float32, np.float64, np.int64, np.float32]
values = [(np.arange(int(np.prod(s))).reshape(s) % 17 + rank * 3).astype(dtypes[i % 4]) for i, s in enumerate(shapes)]
leaves = list(values)
if importlib.util.find_spec("jax") is not None:
    import jax.numpy as jnp

    # JAX computes in float32 unless x64 is enabled: its leaves are the float32 ones, every other one.
    leaves = [jnp.asarray(v) if i % 2 and v.dtype == np.float32 else v for i, v in enumerate(values)]
tree = {"layers": [{"w": leaves[i], "b": leaves[i + 1]} for i in range(0, len(leaves) - 2, 2)],
        "last": (leaves[-2], leaves[-1])}
reduced = pycoll.reduce_tree(comm, tree, "avg", bucket_bytes=int(os.environ["TEST_BUCKET_BYTES"]))
got = [layer[k] for layer in reduced["layers"] for k in ("w", "b")] + list(reduced["last"])
kinds = set()
for i, (g, leaf, v) in enumerate(zip(got, leaves, values)):
    want = comm.all_reduce(v.copy(), "avg")
    kinds.add(type(g).__name__)
    assert type(g) is type(leaf), (i, type(g), type(leaf))
    assert g.shape == want.shape and g.dtype == want.dtype and np.array_equal(np.asarray(g), want), (i, g, want)
sys.stdout.write(json.dumps({"rank": rank, "ok": True, "kinds": sorted(kinds)}) + "\n")
comm.close()
