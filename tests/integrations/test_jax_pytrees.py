"""pycoll.jax collectives on pytrees, as jax.lax.psum takes them: the same structure back, every leaf reduced,
inside and outside jit, one custom call per dtype for the elementwise collectives (all_reduce, broadcast,
reduce) and one per leaf for the others.

The two-rank test runs this file as a script on each rank (`python test_jax_pytrees.py`, the worker at the
bottom), which prints one JSON line."""

import functools
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

if __name__ != "__main__":
    from multiproc import Ranks

HAVE_JAX = importlib.util.find_spec("jax") is not None and importlib.util.find_spec("jaxlib") is not None
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")  # jaxlib aborts at import under the ASan runtime
pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not HAVE_JAX or UNDER_ASAN, reason="needs jax (pip install \".[jax]\") "
                                                                  "outside the sanitizer build")]


def _tree(r, jnp):
    """A tree of two dtypes and three containers, values that depend on the rank r."""
    return {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) + r,
            "layers": [jnp.full((4,), 2.0 * r, jnp.float32), (jnp.arange(3, dtype=jnp.int32) * (r + 1), None)],
            "b": jnp.float32(r + 0.5)}


def _custom_calls(f, *args):
    import jax
    return jax.jit(f).lower(*args).as_text().count("stablehlo.custom_call @pycoll_")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_elementwise_collectives_keep_the_tree(solo, jit):
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj

    tree = _tree(0, jnp)
    wrap = jax.jit if jit else (lambda f: f)
    for f in (lambda t: pj.all_reduce(t, solo), lambda t: pj.all_reduce(t, solo, op="max"),
              lambda t: pj.broadcast(t, solo), lambda t: pj.reduce(t, solo)):
        got = wrap(f)(tree)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(tree)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(tree)):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)  # one rank: the reduction is the value itself


def test_elementwise_collectives_make_one_call_per_dtype_and_the_others_one_per_leaf(solo):
    import jax.numpy as jnp

    import pycoll.jax as pj

    tree = _tree(0, jnp)  # float32: w, layers[0], b; int32: layers[1][0]
    assert _custom_calls(lambda t: pj.all_reduce(t, solo), tree) == 2
    assert _custom_calls(lambda t: pj.broadcast(t, solo), tree) == 2
    assert _custom_calls(lambda t: pj.all_reduce(t["w"], solo), tree) == 1  # a single array: as before
    rows = {"a": jnp.ones((1, 3)), "b": [jnp.ones((1,), jnp.int32), jnp.ones((1, 2, 2))]}
    assert _custom_calls(lambda t: pj.all_gather(t, solo), rows) == 3
    assert _custom_calls(lambda t: pj.all_to_all(t, solo), rows) == 3
    assert _custom_calls(lambda t: pj.reduce_scatter(t, solo), rows) == 3


def test_shape_dependent_collectives_on_trees(solo):
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj

    rows = {"a": jnp.arange(3.0).reshape(1, 3), "b": [jnp.ones((1,), jnp.int32)]}
    gathered = jax.jit(lambda t: pj.all_gather(t, solo))(rows)
    assert gathered["a"].shape == (1, 1, 3) and gathered["b"][0].shape == (1, 1)
    tiled = pj.all_gather(rows, solo, tiled=True)
    np.testing.assert_array_equal(tiled["a"], rows["a"])
    scattered = pj.reduce_scatter(rows, solo)
    assert scattered["a"].shape == (3,) and scattered["b"][0].shape == ()
    np.testing.assert_array_equal(pj.all_to_all(rows, solo)["b"][0], rows["b"][0])


def test_gradients_flow_through_a_tree(solo):
    import jax
    import jax.numpy as jnp

    import pycoll.jax as pj

    params = {"w": jnp.arange(3.0), "v": jnp.ones((2, 2))}
    grads = jax.jit(jax.grad(lambda p: sum(jnp.sum(x ** 2) for x in jax.tree_util.tree_leaves(
        pj.all_reduce(p, solo)))))(params)
    np.testing.assert_allclose(grads["w"], 2 * params["w"])
    np.testing.assert_allclose(grads["v"], 2 * params["v"])


def test_empty_trees_and_numpy_leaves(solo):
    import pycoll.jax as pj

    assert pj.all_reduce({}, solo) == {} and pj.all_reduce(None, solo) is None
    got = pj.all_reduce({"x": np.arange(4, dtype=np.float32)}, solo)
    np.testing.assert_array_equal(got["x"], np.arange(4, dtype=np.float32))


def test_a_bad_leaf_is_named_by_its_path(solo):
    import jax.numpy as jnp

    import pycoll.jax as pj

    with pytest.raises(TypeError, match=r"x\['opt'\]\[1\] must be a JAX or NumPy array, got str"):
        pj.all_reduce({"w": jnp.ones(2), "opt": [jnp.ones(1), "adam"]}, solo)
    with pytest.raises(TypeError, match=r"x\['c'\]: pycoll.jax does not support dtype complex64"):
        pj.broadcast({"c": jnp.ones(2, jnp.complex64)}, solo)
    with pytest.raises(ValueError, match=r"x\[1\]: with tiled=False the leading dimension"):
        pj.reduce_scatter([jnp.ones((1, 2)), jnp.ones((2, 2))], solo)
    with pytest.raises(ValueError, match=r"x\['s'\]: all_gather\(tiled=True\) needs at least one dimension"):
        pj.all_gather({"s": jnp.float32(1)}, solo, tiled=True)


def test_two_ranks_reduce_trees_inside_and_outside_jit():
    with Ranks(2, os.path.abspath(__file__), timeout=20.0, env={"PYCOLL_BACKEND": "tcp", "JAX_PLATFORMS": "cpu"}) \
            as job:
        reports = job.reports(deadline_s=50)
    for rank, rep in reports.items():
        assert rep["failures"] == [], (rank, rep["failures"])
        assert rep["checked"] == 8, rep


# ---- the worker: one rank of the two-rank test -------------------------------------------------------------
def _worker():
    import jax
    import jax.numpy as jnp

    import pycoll
    import pycoll.jax as pj

    comm = pycoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "20")))
    rank, size = comm.rank, comm.size
    failures, checked = [], 0
    mine = _tree(rank, jnp)
    every = [_tree(r, jnp) for r in range(size)]

    def check(name, got, want):
        nonlocal checked
        checked += 1
        if jax.tree_util.tree_structure(got) != jax.tree_util.tree_structure(want):
            failures.append(f"{name}: structure {jax.tree_util.tree_structure(got)}")
            return
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(np.asarray(a), np.asarray(b)):
                failures.append(f"{name}: got {np.asarray(a).tolist()} want {np.asarray(b).tolist()}")

    def total(op=lambda a, b: a + b):
        return jax.tree_util.tree_map(lambda *xs: functools.reduce(op, xs), *every)

    for wrap, how in ((lambda f: f, "eager"), (jax.jit, "jit")):
        check(f"all_reduce {how}", wrap(lambda t: pj.all_reduce(t, comm))(mine), total())
        check(f"all_reduce max {how}", wrap(lambda t: pj.all_reduce(t, comm, op="max"))(mine), total(jnp.maximum))
        check(f"broadcast {how}", wrap(lambda t: pj.broadcast(t, comm, root=1))(mine), every[1])
        gathered = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *every)
        check(f"all_gather {how}", wrap(lambda t: pj.all_gather(t, comm))(mine), gathered)
    print(json.dumps({"rank": rank, "failures": failures, "checked": checked}), flush=True)
    comm.close()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _worker()
