"""pycoll.GradientBuckets: packing (reverse order, one dtype per bucket, the size bound), argument checks, and
across real processes the same results as per-array all-reduces, with ready() called in a different order on
every rank. pycoll.reduce_tree, its functional form for immutable (JAX) arrays: the same checks."""

import importlib.util

import numpy as np
import pytest
from multiproc import Ranks, assert_all_ok, free_port

import pycoll


@pytest.fixture(scope="module")
def single():
    comm = pycoll.init(rank=0, world_size=1, master_port=free_port())
    yield comm
    comm.close()


def test_arrays_are_packed_in_reverse_order_one_dtype_per_bucket_within_the_size(single):
    arrays = [np.zeros(10, np.float32), np.zeros(10, np.int64), np.zeros(10, np.float32),
              np.zeros(30, np.float32), np.zeros(10, np.float32)]
    b = pycoll.GradientBuckets(single, arrays, bucket_bytes=80)
    # Reverse order: array 4 opens float32 bucket 0, 3 would take it to 160 bytes so opens bucket 1 (alone: it
    # is larger than the bound), 2 opens bucket 2, 1 opens the int64 bucket 3, 0 joins bucket 2.
    assert [b.bucket_of(i) for i in range(5)] == [2, 3, 2, 1, 0]
    assert b.bucket_count == 4


def test_a_bucket_starts_only_when_its_arrays_and_every_earlier_bucket_are_ready(single):
    arrays = [np.full(4, i, np.float64) for i in range(4)]
    b = pycoll.GradientBuckets(single, arrays, bucket_bytes=32)  # one array per bucket, bucket k = array 3 - k
    b.ready(0)  # the last bucket: must wait for the three before it
    assert b._next == 0
    b.ready(3)
    assert b._next == 1
    b.ready(1), b.ready(2)
    assert b._next == 4
    b.wait()
    assert all(np.array_equal(a, np.full(4, i, np.float64)) for i, a in enumerate(arrays))


def test_bad_arguments_are_named(single):
    with pytest.raises(ValueError, match="bucket_bytes"):
        pycoll.GradientBuckets(single, [np.zeros(3)], bucket_bytes=0)
    with pytest.raises(TypeError, match="bucket_bytes"):
        pycoll.GradientBuckets(single, [np.zeros(3)], bucket_bytes=1.5)
    with pytest.raises(ValueError, match="op"):
        pycoll.GradientBuckets(single, [np.zeros(3)], op="mean")
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"arrays\[1\] is read-only"):
        pycoll.GradientBuckets(single, [np.zeros(3), ro])
    b = pycoll.GradientBuckets(single, [np.zeros(3)])
    b.ready(0)
    with pytest.raises(ValueError, match="already marked ready"):
        b.ready(0)
    with pytest.raises(IndexError):
        b.ready(1)
    b.wait()


def test_default_bucket_size_is_the_contract_s():
    assert pycoll.buckets.DEFAULT_BUCKET_BYTES == 25 << 20


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n, bucket_bytes, kind", [(2, 4096, "numpy"), (3, 300, "numpy"), (4, 25 << 20, "numpy"),
                                                   (2, 4096, "torch")])
def test_buckets_give_the_per_array_all_reduce_results_on_every_rank(n, bucket_bytes, kind, monkeypatch):
    if kind == "torch":
        pytest.importorskip("torch")
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")
    with Ranks(n, "buckets_worker.py", env={"TEST_BUCKET_BYTES": str(bucket_bytes), "TEST_ARRAY_KIND": kind}) \
            as ranks:
        reports = ranks.reports()
    assert_all_ok(reports)
    assert len({rep["buckets"] for rep in reports.values()}) == 1


def test_reduce_tree_keeps_the_structure_and_leaf_types_and_checks_its_arguments(single):
    tree = {"b": [np.arange(3.0), (np.ones((2, 2), np.float32), None)], "a": np.int64(7)}
    out = pycoll.reduce_tree(single, tree, "sum", bucket_bytes=8)
    assert list(out) == ["a", "b"] and isinstance(out["b"][1], tuple) and out["b"][1][1] is None
    assert np.array_equal(out["b"][0], [0, 1, 2]) and out["b"][1][0].dtype == np.float32 and out["a"] == 7
    assert out["b"][0] is not tree["b"][0]  # a new tree: the input is not written
    with pytest.raises(ValueError, match="bucket_bytes"):
        pycoll.reduce_tree(single, tree, bucket_bytes=-1)
    with pytest.raises(ValueError, match="op"):
        pycoll.reduce_tree(single, tree, "mean")
    with pytest.raises(TypeError, match="tree leaf 1"):
        pycoll.reduce_tree(single, [np.zeros(2), "text"])


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install \".[jax]\")")
def test_reduce_tree_gives_jax_arrays_back_for_jax_leaves_and_earlier_results_stay(single):
    import jax
    import jax.numpy as jnp

    grads = {"w": jnp.ones((3, 4)), "b": jnp.arange(4.0), "h": jnp.ones(2, jnp.bfloat16)}
    first = pycoll.reduce_tree(single, grads)
    second = pycoll.reduce_tree(single, jax.tree_util.tree_map(lambda g: g * 2, grads))
    assert all(isinstance(x, jax.Array) for x in jax.tree_util.tree_leaves(first))
    assert first["h"].dtype == jnp.bfloat16 and first["w"].shape == (3, 4)
    assert np.array_equal(first["b"], [0, 1, 2, 3]) and np.array_equal(second["b"], [0, 2, 4, 6])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n, bucket_bytes", [(2, 512), (3, 25 << 20)])
def test_reduce_tree_gives_the_per_array_all_reduce_results_on_every_rank(n, bucket_bytes, monkeypatch):
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")
    with Ranks(n, "tree_worker.py", env={"TEST_BUCKET_BYTES": str(bucket_bytes)}) as ranks:
        reports = ranks.reports()
    for rep in reports.values():
        assert rep.get("ok"), rep
        # JAX leaves came back as JAX arrays and NumPy leaves as NumPy arrays (the worker checks each leaf's type)
        assert rep["kinds"] == (["ArrayImpl", "ndarray"] if importlib.util.find_spec("jax") else ["ndarray"])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_ready_raises_the_communicators_failure_once_it_broke(backend, monkeypatch):
    monkeypatch.setenv("PYCOLL_BACKEND", backend)
    with Ranks(2, "buckets_failure_worker.py", timeout=20) as ranks:
        rep = ranks.reports(ranks=[0])[0]
    assert rep["wait"]["error"] == "PeerFailure" and rep["wait"]["rank"] == 1, rep
    for call in ("ready", "ready_again"):
        assert rep[call] == rep["wait"], (call, rep)
