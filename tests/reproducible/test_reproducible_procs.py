"""accuracy="reproducible" with real processes over shared memory and TCP (the shared-memory transport's own
all_reduce included): the same bits at 2, 3 and 4 ranks, by every algorithm, blocking, async and fast path,
for all_reduce, reduce_scatter and reduce -- and the same as the simulator's."""

import hashlib

import pytest
from multiproc import Ranks

from pycoll.tools.accuracy import make_inputs
from pycoll.tools.simulate import simulate


def simulated_digest(dtype):
    a, b = make_inputs("mixed", 2, 12 * 257, dtype, seed=11)
    out = simulate("all_reduce", [b, a], algorithm="ring", accuracy="reproducible")[0]
    return hashlib.sha256(out.tobytes()).hexdigest()


@pytest.mark.timeout(400)
def test_same_bits_over_shm_and_tcp_at_every_world_size(no_segment_left):
    digests = {}
    for backend in ("shm", "tcp"):
        for n in (2, 3, 4):
            with Ranks(n, "reproducible_worker.py", env={"PYCOLL_BACKEND": backend}, timeout=300) as ranks:
                reports = ranks.reports(deadline_s=300)
            for rank, rep in reports.items():
                assert rep.get("ok"), rep
                assert "op max is not supported" in rep["refusal"]
                for key, value in rep.items():
                    if key.split(" ")[0] in ("float16", "bfloat16", "float32", "float64"):
                        digests.setdefault(key.split(" ")[0], {})[f"{backend} n={n} rank {rank} {key}"] = value
    for dtype, seen in digests.items():
        assert set(seen.values()) == {simulated_digest(dtype)}, (dtype, seen)
