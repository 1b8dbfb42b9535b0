"""pycoll.reduce_tree: the functional form of GradientBuckets, for frameworks whose arrays are immutable (JAX).

    grads = jax.grad(loss)(params, x, y)
    grads = pycoll.reduce_tree(comm, grads)        # the same pytree, every leaf averaged over the ranks

The leaves are packed into flat buckets as GradientBuckets packs arrays (reverse order, one dtype per bucket,
at most bucket_bytes each); each bucket's all-reduce starts as soon as it is packed, so packing the next bucket
-- and waiting for JAX to finish computing its leaves -- overlaps with the all-reduces already under way, and
unpacking bucket k overlaps with the buckets after it. Reading a leaf costs no copy (np.asarray of a CPU JAX
array is a view of its memory); packing is the one copy in; a JAX bucket comes back through DLPack (no copy
when its memory is aligned as XLA wants) and is cut into leaves by one compiled call per bucket, not one
dispatch per leaf. NumPy leaves come back as views into their bucket, PyTorch CPU tensors as tensors over it:
every call packs into new buckets, so results of earlier calls are never overwritten.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from pycoll.buckets import DEFAULT_BUCKET_BYTES, _bucket_bytes, _plan
from pycoll.work import wait_all


def reduce_tree(comm, tree, op="avg", *, bucket_bytes=DEFAULT_BUCKET_BYTES, accuracy="fast"):
    """All-reduce every leaf of `tree` (a JAX pytree; without JAX: nested lists, tuples and dicts of arrays)
    with `op` (default "avg": gradient averaging) on `comm`, and return a tree of the same structure holding
    the results, each leaf the type it came in as (JAX array, NumPy array, PyTorch tensor). Host memory only.
    Call it outside jax.jit: the all-reduces run in pycoll, not in XLA."""
    bucket_bytes = _bucket_bytes(bucket_bytes)
    comm._op(op)
    comm._accuracy(accuracy)
    leaves, rebuild = _flatten(tree)
    jax = sys.modules.get("jax")
    kinds = [_kind(leaf, jax) for leaf in leaves]
    hosts = [_host_view(leaf, kind, i) for i, (leaf, kind) in enumerate(zip(leaves, kinds))]
    layout = _layout(tuple((h.dtype, h.shape, h.size) for h in hosts), bucket_bytes)
    flats, works = [], []
    for dtype, count, pieces in layout:
        # One copy in: NumPy concatenates the leaves straight into the bucket (axis=None flattens each).
        flat = np.empty(count, dtype)
        np.concatenate([hosts[i] for i, _, _, _ in pieces], axis=None, out=flat)
        flats.append(flat)
        works.append(comm.all_reduce(flat, op, accuracy=accuracy, async_op=True))
    results = [None] * len(leaves)
    for k, ((dtype, _, pieces), flat, work) in enumerate(zip(layout, flats, works)):
        try:
            work.wait()
        except BaseException:
            # Let the later buckets finish before raising, as wait_all does: no collective is left running
            # over memory this call is about to drop.
            try:
                wait_all(works[k + 1:])
            except Exception:  # noqa: BLE001 -- the first error is the one to raise
                pass
            raise
        _unpack(flat, pieces, kinds, results, jax)
    return rebuild(results)


@functools.lru_cache(maxsize=64)
def _layout(leaves, bucket_bytes):
    """The buckets over leaves (dtype, shape, size) as (dtype, elements, pieces), each piece (leaf index,
    element offset, size, shape); cached, as a training loop reduces the same layout every step."""
    layout = []
    for members in _plan([(dtype, dtype.itemsize * size) for dtype, _, size in leaves], bucket_bytes):
        pieces, offset = [], 0
        for i in members:
            dtype, shape, size = leaves[i]
            pieces.append((i, offset, size, shape))
            offset += size
        layout.append((leaves[members[0]][0], offset, tuple(pieces)))
    return tuple(layout)


def _kind(leaf, jax):
    if jax is not None and isinstance(leaf, jax.Array):
        return "jax"
    return "torch" if type(leaf).__module__ == "torch" else "numpy"


def _host_view(leaf, kind, i):
    """Leaf i as a NumPy array over its memory (no copy for NumPy, CPU JAX arrays and CPU tensors)."""
    if kind == "jax":
        platforms = {d.platform for d in leaf.devices()}
        if platforms != {"cpu"}:
            raise TypeError(f"tree leaf {i} is a JAX array on {', '.join(sorted(platforms))}; reduce_tree takes "
                            f"host (CPU) arrays for now")
    elif kind == "torch":
        if leaf.device.type != "cpu":
            raise TypeError(f"tree leaf {i} is a tensor on {leaf.device}; reduce_tree takes host (CPU) arrays")
        leaf = leaf.detach()
    host = np.asarray(leaf)
    if host.dtype.hasobject or host.dtype.kind not in "biufcV":
        raise TypeError(f"tree leaf {i}: {type(leaf).__name__} of dtype {host.dtype} is not an array of numbers")
    return host


def _unpack(flat, pieces, kinds, results, jax):
    jax_pieces = tuple((offset, size, shape) for i, offset, size, shape in pieces if kinds[i] == "jax")
    if jax_pieces:
        try:
            whole = jax.dlpack.from_dlpack(flat)
        except BufferError:  # NumPy exports no bfloat16 (ml_dtypes) through DLPack: one copy instead
            whole = jax.numpy.asarray(flat)
        outs = iter(_cutter(flat.dtype.str, jax_pieces)(whole))
    for i, offset, size, shape in pieces:
        kind = kinds[i]
        if kind == "jax":
            results[i] = next(outs)
        else:
            view = flat[offset:offset + size].reshape(shape)
            results[i] = sys.modules["torch"].from_numpy(view) if kind == "torch" else view


@functools.lru_cache(maxsize=256)
def _cutter(dtype, pieces):
    """A compiled function cutting a flat bucket into its JAX leaves: one dispatch per bucket (one jnp slice
    per leaf is one dispatch each). Cached per layout, which stays the same from step to step."""
    jax = sys.modules["jax"]
    return jax.jit(lambda flat: tuple(flat[off:off + n].reshape(shape) for off, n, shape in pieces))


def _flatten(tree):
    """(leaves, rebuild(leaves) -> tree): JAX's tree_util when JAX is loaded (any registered pytree, None as an
    empty subtree), otherwise lists, tuples and dicts (dicts in sorted key order, as JAX orders them)."""
    jax = sys.modules.get("jax")
    if jax is not None:
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        return leaves, treedef.unflatten
    leaves = []

    def walk(node):
        if isinstance(node, dict):
            keys = sorted(node)
            subs = [walk(node[k]) for k in keys]
            return lambda it: type(node)((k, s(it)) for k, s in zip(keys, subs))
        if isinstance(node, (list, tuple)):
            subs = [walk(n) for n in node]
            kind = type(node)
            if hasattr(node, "_fields"):  # a namedtuple takes its fields as arguments
                return lambda it: kind(*(s(it) for s in subs))
            return lambda it: kind(s(it) for s in subs)
        if node is None:
            return lambda it: None
        leaves.append(node)
        return lambda it: next(it)

    build = walk(tree)
    return leaves, lambda results: build(iter(results))
