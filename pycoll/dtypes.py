"""Mapping of numpy dtypes and op names to pycoll's C enums (native/include/pycoll/types.h), whose ids and names
are bound from C (pycoll._bindings.abi)."""

import operator

import numpy as np

from pycoll._bindings.abi import DTYPES, OPS

__all__ = ["OPS", "DTYPES", "COMPLEX_DTYPES", "dtype_id", "op_id", "unsupported_dtype", "integer_argument"]

# DTYPES: pycoll dtype ids by name, which is numpy's name; bfloat16 comes from ml_dtypes, recognised by name so
# it stays optional.

# The complex dtypes: pairs of float32 / float64 that the host backends sum, average and multiply; min and max
# have no meaning on them, and the vendor backends (NCCL, HCCL) have no complex type.
COMPLEX_DTYPES = tuple(name for name in DTYPES if name.startswith("complex"))

_ids = {}  # np.dtype -> id, filled on first use of each dtype


def dtype_id(np_dtype, name=None):
    """The pycoll dtype id of a numpy dtype (or anything np.dtype() accepts); TypeError if unsupported, naming
    the argument `name` when given."""
    try:
        return _ids[np_dtype]
    except (KeyError, TypeError):
        pass
    try:
        dt = np.dtype(np_dtype)
    except TypeError:
        raise TypeError(f"{_argument(name)}not a dtype: {np_dtype!r}") from None
    ident = DTYPES.get(dt.name)
    if ident is None or not dt.isnative:
        raise unsupported_dtype(f"{dt.str} ({dt.name})", name)
    if isinstance(np_dtype, np.dtype):
        _ids[np_dtype] = ident
    return ident


def unsupported_dtype(description, name=None):
    """The TypeError for a dtype pycoll cannot reduce, described as the caller knows it; `name` is the argument
    that had it (x, out), named first in the message when given."""
    return TypeError(f"{_argument(name)}unsupported dtype {description}; pycoll supports {', '.join(DTYPES)} "
                     "in native byte order")


def _argument(name):
    return f"{name}: " if name else ""


def op_id(op):
    """The pycoll op id of an op name ("sum", "prod", "min", "max", "avg") or id; ValueError if unknown."""
    if isinstance(op, str):
        try:
            return OPS[op]
        except KeyError:
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}") from None
    try:
        ident = integer_argument(op, "op")
    except TypeError:
        ident = None
    if ident is not None and 0 <= ident < len(OPS):
        return ident
    raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)} or their ids 0..{len(OPS) - 1}")


def integer_argument(value, name):
    """value as an int, through operator.index so that NumPy and PyTorch integers count too; TypeError naming
    `name` for anything else, bools included (True is no rank)."""
    if not (isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
