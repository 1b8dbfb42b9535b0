"""pycoll collectives inside ``jax.jit`` on the CPU: each is an XLA FFI custom call into libpycoll
(native/jax/ffi_handlers.c), ordered like the program by a JAX ordered effect, with the differentiation rules
that hold. See docs/jax.md.

    import jax, jax.numpy as jnp, pycoll, pycoll.jax as pj
    comm = pycoll.init()

    @jax.jit
    def step(x):
        return pj.all_reduce(x * 2, comm)   # runs inside the compiled program, no trip through Python

Each takes an array or, like jax.lax.psum, a pytree of arrays. Works with communicators of the host-memory
backends (cpu, tcp, shm) and their splits. jax is an optional extra: ``pip install "pycoll-collectives[jax]"``.
"""

from __future__ import annotations

import functools

from pycoll.errors import BackendUnavailable

try:
    import jax
    import jax.numpy as jnp
except ImportError as exc:  # tests/integrations/test_jax_ffi.py checks this message with jax hidden
    raise BackendUnavailable(
        f"pycoll.jax needs jax and jaxlib ({exc}); install them with: pip install \"pycoll-collectives[jax]\" "
        "(or pip install jax jaxlib)") from exc
try:
    # Ordered effects, custom calls with tokens and primitive dispatch are not in jax's public modules; checked
    # against jax 0.10.2.
    from jax._src import dispatch as _dispatch, effects as _effects
    from jax._src.interpreters import mlir
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching
except ImportError as exc:
    raise BackendUnavailable(
        f"pycoll.jax needs jax internals that jax {jax.__version__} lacks ({exc}); it was written against jax "
        f"0.10: install a jax of that line") from exc

import numpy as np

from pycoll._bindings import jax_ffi
from pycoll.algorithms import ACCURACIES, ACCURACY_ALIASES, ALGORITHMS, NATIVE_ONLY
from pycoll.comm import Communicator
from pycoll.dtypes import REAL_DTYPES as _DTYPES, op_id
from pycoll.errors import STATUS_CLASSES, CommunicatorClosed, error_for_status_name

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "raise_pycoll_error"]

# Names -> the ids of libpycoll's enums (pycoll_op_t, pycoll_accuracy_t, pycoll_algorithm_t).
_OPS = {name: op_id(name) for name in ("sum", "prod", "min", "max", "avg")}
_ACCURACIES = {**ACCURACIES, **{alias: ACCURACIES[name] for alias, name in ACCURACY_ALIASES.items()}}
_ALGORITHMS = {name: i for name, i in ALGORITHMS.items() if name not in NATIVE_ONLY}  # those: auto picks them
_LINEAR_OPS = ("sum", "avg")

# ---- registration of the custom-call targets (once per process) --------------------------------------------
for _name in jax_ffi.COLLECTIVES:
    jax.ffi.register_ffi_target(f"pycoll_{_name}", jax_ffi.handler(_name), platform="cpu")


class PycollEffect(_effects.Effect):
    """pycoll's collectives, one ordered effect: JAX threads a token through every call that has it, within a
    jitted function and from one jitted call to the next, so each rank runs them in program order."""
    __str__ = lambda self: "pycoll"  # noqa: E731


_EFFECT = PycollEffect()
_effects.lowerable_effects.add_type(PycollEffect)
_effects.control_flow_allowed_effects.add_type(PycollEffect)
_effects.ordered_effects.add_type(PycollEffect)
_effects.custom_derivatives_allowed_effects.add_type(PycollEffect)  # usable inside jax.custom_vjp functions
_effects.remat_allowed_effects.add_type(PycollEffect)

collective_p = Primitive("pycoll_collective")


# ---- arguments -----------------------------------------------------------------------------------------------
def _native(comm):
    """comm's id (pycoll_comm_id: the handlers acquire the communicator by it, so a compiled program that runs
    after comm.close() gets CommunicatorClosed) and (rank, size); TypeError for anything but an open
    native-backend communicator."""
    if not isinstance(comm, Communicator):
        raise TypeError(f"comm must be a pycoll.Communicator, got {type(comm).__name__}")
    engine = comm._engine
    if engine is None:
        raise CommunicatorClosed("comm is closed")
    native = getattr(engine, "native", None)
    if native is None or not hasattr(native, "handle"):
        raise TypeError(f"comm: pycoll.jax runs collectives in libpycoll on the CPU, which backend "
                        f"{comm.backend!r} does not use; use a cpu, tcp or shm communicator")
    handle = int(native.handle)
    if handle == 0:
        raise CommunicatorClosed("comm is closed")
    return handle, comm.rank, comm.size


def _choice(value, table, name):
    if not isinstance(value, str) or value.lower() not in table:
        raise ValueError(f"{name} must be one of {', '.join(table)}, got {value!r}")
    return value.lower()


def _check_x(x, name="x"):
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "shape"):
        raise TypeError(f"{name} must be a JAX or NumPy array, got {type(x).__name__}")
    if np.dtype(dtype).name not in _DTYPES:
        raise TypeError(f"{name}: pycoll.jax does not support dtype {np.dtype(dtype).name} "
                        f"(supported: {', '.join(_DTYPES)})")


def _leaves(x):
    """The arrays of pytree x (an array is a tree of one), checked, each with its name for messages ("x",
    "x['w']", "x[0].bias"), and the tree's structure to put results back into."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(x)
    names = [f"x{jax.tree_util.keystr(path)}" for path, _ in flat]
    for name, (_, leaf) in zip(names, flat):
        _check_x(leaf, name)
    return [jnp.asarray(leaf) for _, leaf in flat], names, treedef


def _per_leaf(x, one):
    """one(leaf, name) on every array of pytree x: the collectives whose result depends on the array's shape."""
    leaves, names, treedef = _leaves(x)
    return jax.tree_util.tree_unflatten(treedef, [one(leaf, name) for leaf, name in zip(leaves, names)])


def _elementwise(x, kind, comm_params, **params):
    """An elementwise collective on every array of pytree x, as one call per dtype: the arrays of a dtype are
    packed into one flat buffer (in leaf order, the same on every rank whose tree has the same structure), so a
    tree of many small gradients costs one collective, not one per leaf."""
    leaves, _, treedef = _leaves(x)
    by_dtype = {}
    for i, leaf in enumerate(leaves):
        by_dtype.setdefault(leaf.dtype, []).append(i)
    out = list(leaves)
    for members in by_dtype.values():
        if len(members) == 1:
            out[members[0]] = _bind(leaves[members[0]], kind, comm_params, **params)
            continue
        flat = _bind(jnp.concatenate([leaves[i].ravel() for i in members]), kind, comm_params, **params)
        offset = 0
        for i in members:
            out[i] = flat[offset:offset + leaves[i].size].reshape(leaves[i].shape)
            offset += leaves[i].size
    return jax.tree_util.tree_unflatten(treedef, out)


def _root(root, size):
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"root must be an int, got {type(root).__name__}")
    if not 0 <= int(root) < size:
        raise ValueError(f"root must be in [0, {size}), got {root}")
    return int(root)


def _bind(x, kind, comm_params, **params):
    handle, rank, size = comm_params
    return collective_p.bind(x, kind=kind, handle=handle, rank=rank, size=size, **params)


# ---- the public collectives ------------------------------------------------------------------------------------
# Each takes an array or, as jax.lax.psum does, a pytree of arrays (dicts, lists, tuples, dataclasses registered
# with JAX) and returns the same structure. all_reduce, broadcast and reduce run one call per dtype of the tree;
# the others, whose blocks follow each array's leading axis, one call per array.
def all_reduce(x, comm, op="sum", *, accuracy="fast", algorithm="auto"):
    """The reduction of x over comm's ranks, on every rank (shape and dtype of x). op: sum, prod, min, max, avg.
    x: an array or a pytree of arrays (one call per dtype)."""
    params = _native(comm)
    return _elementwise(x, "all_reduce", params, op=_choice(op, _OPS, "op"),
                        accuracy=_choice(accuracy, _ACCURACIES, "accuracy"),
                        algorithm=_choice(algorithm, _ALGORITHMS, "algorithm"), root=0, tiled=True)


def reduce_scatter(x, comm, op="sum", *, tiled=False, accuracy="fast", algorithm="auto"):
    """Reduce x over the ranks and give rank r block r of the result along axis 0 (as jax.lax.psum_scatter):
    tiled=False: x.shape[0] == comm.size and the result drops that axis; tiled=True: x.shape[0] a multiple of
    comm.size and the result has x.shape[0] // comm.size rows. x: an array or a pytree of arrays (one call
    each)."""
    params = _native(comm)
    options = dict(op=_choice(op, _OPS, "op"), accuracy=_choice(accuracy, _ACCURACIES, "accuracy"),
                   algorithm=_choice(algorithm, _ALGORITHMS, "algorithm"), root=0, tiled=bool(tiled))

    def one(leaf, name):
        _check_leading(leaf, params[2], tiled, name)
        return _bind(leaf, "reduce_scatter", params, **options)
    return _per_leaf(x, one)


def all_gather(x, comm, *, tiled=False):
    """Every rank's x, in rank order (as jax.lax.all_gather): tiled=False stacks them on a new leading axis of
    length comm.size; tiled=True concatenates them along axis 0. x: an array or a pytree of arrays (one call
    each)."""
    params = _native(comm)

    def one(leaf, name):
        if tiled and leaf.ndim == 0:
            raise ValueError(f"{name}: all_gather(tiled=True) needs at least one dimension")
        return _bind(leaf, "all_gather", params, op="sum", accuracy="fast", algorithm="auto", root=0,
                     tiled=bool(tiled))
    return _per_leaf(x, one)


def broadcast(x, comm, root=0):
    """Rank root's x on every rank (every rank passes arrays of the same shapes and dtypes). x: an array or a
    pytree of arrays (one call per dtype)."""
    params = _native(comm)
    return _elementwise(x, "broadcast", params, op="sum", accuracy="fast", algorithm="auto",
                        root=_root(root, params[2]), tiled=True)


def reduce(x, comm, root=0, op="sum", *, accuracy="fast"):
    """The reduction of x over the ranks on rank root; zeros on the other ranks (so that reduce and broadcast
    are each other's transpose). x: an array or a pytree of arrays (one call per dtype)."""
    params = _native(comm)
    return _elementwise(x, "reduce", params, op=_choice(op, _OPS, "op"),
                        accuracy=_choice(accuracy, _ACCURACIES, "accuracy"), algorithm="auto",
                        root=_root(root, params[2]), tiled=True)


def all_to_all(x, comm):
    """x.shape[0] a multiple of comm.size, cut into comm.size blocks along axis 0: block j goes to rank j, and
    block i of the result comes from rank i. x: an array or a pytree of arrays (one call each)."""
    params = _native(comm)

    def one(leaf, name):
        _check_leading(leaf, params[2], True, name)
        return _bind(leaf, "all_to_all", params, op="sum", accuracy="fast", algorithm="auto", root=0, tiled=True)
    return _per_leaf(x, one)


def _check_leading(x, size, tiled, name="x"):
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (its leading axis is split over the ranks)")
    if tiled and x.shape[0] % size:
        raise ValueError(f"{name}: the leading dimension {x.shape[0]} is not a multiple of the {size} ranks")
    if not tiled and x.shape[0] != size:
        raise ValueError(f"{name}: with tiled=False the leading dimension must be the number of ranks, {size}, "
                         f"got {x.shape[0]}")


def raise_pycoll_error(exc):
    """Re-raise a JAX runtime error that a pycoll.jax collective reported as the pycoll exception it stands for
    (Timeout, PeerFailure, MismatchError, ...: the status named at its head, through
    pycoll.errors.STATUS_CLASSES), chained to the original; any other exception unchanged."""
    message = str(exc)
    marker = "pycoll "
    at = message.find(marker)
    if at >= 0:
        status = message[at + len(marker):].split(":", 1)[0]
        if status in STATUS_CLASSES:
            raise error_for_status_name(status, message[at:]) from exc
    raise exc


# ---- the primitive: shapes, lowering, differentiation, batching -------------------------------------------
def _out_shape(shape, kind, size, tiled):
    if kind == "reduce_scatter":
        return shape[1:] if not tiled else (shape[0] // size, *shape[1:])
    if kind == "all_gather":
        return (size, *shape) if not tiled else (shape[0] * size, *shape[1:])
    return shape


def _abstract_eval(x, *, kind, size, tiled, **_):
    out = jax.core.ShapedArray(_out_shape(x.shape, kind, size, tiled), x.dtype)
    return out, {_EFFECT}


collective_p.def_effectful_abstract_eval(_abstract_eval)


_IN_PLACE = ("all_reduce", "broadcast")  # libpycoll takes sendbuf == recvbuf for these


def _ir_type(ctx, aval):
    try:
        return mlir.aval_to_ir_type(ctx.module_context, aval)
    except TypeError:  # jax before 0.8: aval_to_ir_type(aval)
        return mlir.aval_to_ir_type(aval)


def _lowering(ctx, x, *, kind, handle, rank, size, op, accuracy, algorithm, root, tiled):
    del rank, tiled
    token = ctx.tokens_in.get(_EFFECT)
    (aval_out,) = ctx.avals_out
    result_types = [mlir.token_type(), _ir_type(ctx, aval_out)]
    call = mlir.custom_call(
        f"pycoll_{kind}", result_types=result_types, operands=[token, x], has_side_effect=True, api_version=4,
        # In place where the collective allows it: XLA then writes into x's buffer when x is dead after the
        # call (a donated argument, an intermediate), and copies x first otherwise.
        operand_output_aliases={1: 1} if kind in _IN_PLACE else None,
        backend_config={"comm": mlir.i64_attr(handle), "op": mlir.i64_attr(_OPS[op]),
                        "root": mlir.i64_attr(root), "accuracy": mlir.i64_attr(_ACCURACIES[accuracy]),
                        "algorithm": mlir.i64_attr(_ALGORITHMS[algorithm])})
    del size
    out_token, out = call.results
    ctx.set_tokens_out(mlir.TokenSet({_EFFECT: out_token}))
    return [out]


mlir.register_lowering(collective_p, _lowering, platform="cpu")


# Outside jit: compiled once per shape and parameters, like any primitive.
collective_p.def_impl(functools.partial(_dispatch.apply_primitive, collective_p))

# Linear collectives and their transposes (with the same communicator). all_reduce(sum) and all_reduce(avg) are
# symmetric; all_gather and reduce_scatter(sum) are each other's; broadcast and reduce(sum) (zeros off root)
# are each other's; all_to_all is its own.
_TRANSPOSE = {"all_reduce": "all_reduce", "all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
              "broadcast": "reduce", "reduce": "broadcast", "all_to_all": "all_to_all"}


def _is_linear(kind, op):
    return kind in ("all_gather", "broadcast", "all_to_all") or op in _LINEAR_OPS and (
        kind == "all_reduce" or op == "sum")


def _refuse(kind, op):
    raise NotImplementedError(
        f"pycoll.jax.{kind} with op={op!r} is not differentiable here: only sum (and avg for all_reduce) "
        f"reductions are linear; compute the derivative of min/max/prod yourself (e.g. a mask from all_reduce)")


def _jvp(primals, tangents, *, kind, op, **params):
    (x,), (t,) = primals, tangents
    out = collective_p.bind(x, kind=kind, op=op, **params)
    if type(t) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    if not _is_linear(kind, op):
        _refuse(kind, op)
    return out, collective_p.bind(t, kind=kind, op=op, **params)


def _transpose(ct, x, *, kind, op, **params):
    if not _is_linear(kind, op):
        _refuse(kind, op)
    if type(ct) is ad.Zero:
        return [None]
    back = _TRANSPOSE[kind]
    back_op = op if kind == "all_reduce" else "sum"
    return [collective_p.bind(ct, kind=back, op=back_op, **params)]


ad.primitive_jvps[collective_p] = _jvp
ad.primitive_transposes[collective_p] = _transpose


def _batch(args, dims, *, kind, **params):
    (x,), (d,) = args, dims
    if kind in ("all_reduce", "broadcast", "reduce"):
        # Elementwise over the ranks: the batch axis is only more elements, wherever it is.
        return collective_p.bind(x, kind=kind, **params), d
    raise NotImplementedError(f"pycoll.jax.{kind} under jax.vmap is not supported (its leading axis is cut over "
                              f"the ranks); reshape the batch into the array instead")


batching.primitive_batchers[collective_p] = _batch


@functools.lru_cache(maxsize=None)
def ffi_version():
    """The XLA FFI API version (major, minor) pycoll's handlers were written against."""
    return jax_ffi.ffi_version()
