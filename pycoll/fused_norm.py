"""All-reduce (or reduce-scatter) fused with a residual add and a LayerNorm / RMSNorm of whole rows.

An all-reduce is a reduce-scatter followed by an all-gather; between the two each rank holds whole rows of the
sum. So each rank reduces only its rows (into its block of the output), adds the residual and normalises those
rows (native/kernels/row_norm.c, 1/size of the norm work), and the all-gather then copies every owner's
normalised bytes to every rank: all ranks get bitwise identical output. The sequence-parallel variant stops
before the all-gather.

Rows are split as evenly as possible, rank r taking `rows // size` rows plus one more where r < rows % size
(the layout of reduce_scatter's counts). Rows that divide evenly run the plain reduce_scatter / all_gather
(any algorithm they have); others run the ring over counts, the only schedule that takes per-rank counts.
"""

from __future__ import annotations

import numpy as np

from pycoll._bindings import kernels as _kernels
from pycoll.algorithms import algorithm_name
from pycoll.dtypes import FLOAT_DTYPES, dtype_id
from pycoll.errors import MismatchError


def row_split(rows, size, rank):
    """(first row, row count) of rank's rows when `rows` rows are split between `size` ranks."""
    base, extra = divmod(rows, size)
    return rank * base + min(rank, extra), base + (rank < extra)


def _array(value, name, what):
    """value as an ndarray without copying where it is one; C-contiguous."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.dtype.name not in FLOAT_DTYPES:
        raise TypeError(f"{name}: {what} takes float16, bfloat16, float32 or float64, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return array


def _like(value, name, shape, dtype, what, *, writable=False):
    """An argument that must have x's dtype and `shape`."""
    array = _array(value, name, what)
    if array.dtype != dtype:
        raise TypeError(f"{name} has dtype {array.dtype} but x has {dtype}")
    if array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}")
    if writable and not array.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return array


def _eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not (eps >= 0 and np.isfinite(eps)):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    return eps


def _separate(a, name_a, b, name_b):
    if a.nbytes and b.nbytes and np.shares_memory(a, b):
        raise ValueError(f"{name_b} overlaps {name_a}: pass separate memory")


def run(comm, kind, x, weight, bias, *, eps, out, residual, algorithm, accuracy, gather):
    """The fused call: `kind` "layernorm" or "rmsnorm"; `gather` False for the sequence-parallel variant (out
    then holds this rank's rows only). Returns out (a new array when out is None)."""
    what = f"{'all_reduce' if gather else 'reduce_scatter'}_{kind}"
    comm._engine_or_raise()
    x = _array(x, "x", what)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (rows, hidden), got shape {x.shape}")
    rows, hidden = x.shape
    size, rank = comm.size, comm.rank
    first, mine = row_split(rows, size, rank)
    weight = _like(weight, "weight", (hidden,), x.dtype, what)
    if bias is not None:
        bias = _like(bias, "bias", (hidden,), x.dtype, what)
    eps = _eps(eps)
    own_shape = (mine, hidden)
    # The sequence-parallel residual is this rank's part of the residual stream: its rows only.
    if residual is not None:
        residual = _like(residual, "residual", x.shape if gather else own_shape, x.dtype, what)
    result_shape = x.shape if gather else own_shape
    if out is None:
        out = np.empty(result_shape, dtype=x.dtype)
    else:
        out = _like(out, "out", result_shape, x.dtype, what, writable=True)
    for array, name in ((x, "x"), (weight, "weight"), (bias, "bias"), (residual, "residual")):
        if array is not None:
            _separate(array, name, out, "out")
    even = rows % size == 0
    name = algorithm_name(algorithm)
    if not even and name not in ("auto", "ring"):
        raise ValueError(f"algorithm: {rows} rows over {size} ranks do not divide evenly, which runs the ring "
                         f"only, got {algorithm!r}")
    own = out[first:first + mine] if gather else out
    counts = [row_split(rows, size, r)[1] * hidden for r in range(size)]
    # Ranks that disagree on the shape but not on the element counts (a transposed x) would combine the wrong
    # elements silently, and the descriptors carry counts only: the shapes are compared first, in one small
    # all-gather, so every rank raises alike (the communicator stays usable) and the error names the shapes.
    shapes = np.empty(2 * size, np.int64)
    comm.all_gather(np.array([rows, hidden], np.int64), shapes)
    shapes = [tuple(int(v) for v in shapes[2 * r:2 * r + 2]) for r in range(size)]
    if len(set(shapes)) > 1:
        other = next(r for r in range(size) if shapes[r] != (rows, hidden))
        raise MismatchError(f"{what}: rank {rank} passed x of shape {(rows, hidden)}, but rank {other} passed "
                            f"{shapes[other]}; every rank must pass the same shape")
    if even:
        comm.reduce_scatter(x.reshape(-1), own.reshape(-1), algorithm=algorithm, accuracy=accuracy)
    else:
        comm.reduce_scatter(x.reshape(-1), own.reshape(-1), counts=counts, accuracy=accuracy)
    own_residual = None if residual is None else (residual[first:first + mine] if gather else residual)
    _kernels.norm_rows(own, own, own_residual, weight, bias, mine, hidden, dtype_id(x.dtype),
                       _kernels.NORM_KINDS[kind], eps)
    if gather:
        if even:
            comm.all_gather(own.reshape(-1), out.reshape(-1))
        else:
            comm._all_gather_v(own.reshape(-1), out.reshape(-1), counts, False,
                               own_block=first * hidden * x.itemsize)
    return out
