"""pycoll's dtypes and ops, bound from C: the dtype table (native/common/types.c, through pycoll._bindings.abi)
says each dtype's id, size and kind, and every Python module takes its dtype lists from here rather than
spelling them again."""

import operator
from typing import NamedTuple

import numpy as np

from pycoll._bindings.abi import DTYPE_TABLE, DTYPES, OPS

__all__ = ["OPS", "DTYPES", "DType", "DTYPE_INFO", "FLOAT_DTYPES", "COMPLEX_DTYPES", "REAL_DTYPES",
           "COMPENSATED_DTYPES", "float_dtype", "dtype_id", "op_id", "unsupported_dtype", "integer_argument"]


class DType(NamedTuple):
    """One row of the C dtype table."""
    id: int
    name: str  # numpy's name; bfloat16 comes from ml_dtypes, recognised by name so it stays optional
    size: int  # bytes per element
    integer: bool
    float: bool  # a real floating-point type
    complex: bool  # a pair of floats
    compensated: bool  # accuracy compensated and reproducible apply (complex: part by part)
    signed: bool
    ops: tuple  # the op names that reduce it
    accumulator: str  # the dtype a compensated sum of it accumulates in
    precision: int  # a float's significand bits, the implicit one included; 0 for others


_NAMES = {ident: name for name, ident in DTYPES.items()}
_OP_NAMES = {ident: name for name, ident in OPS.items()}
DTYPE_INFO = {row["name"]: DType(**{**row, "ops": tuple(_OP_NAMES[op] for op in row["ops"]),
                                     "accumulator": _NAMES[row["accumulator"]]})
              for row in DTYPE_TABLE}
# The real floating-point dtypes (row norms, accuracy reports, the vendors' compensated sums).
FLOAT_DTYPES = tuple(d.name for d in DTYPE_INFO.values() if d.float)
# The complex dtypes: pairs of float32 / float64 that the host backends sum, average and multiply; min and max
# have no meaning on them, and the vendor backends (NCCL, HCCL) have no complex type.
COMPLEX_DTYPES = tuple(d.name for d in DTYPE_INFO.values() if d.complex)
# Every dtype but the complex ones: what the vendor libraries and the compared peers (gloo, oneCCL, JAX's
# custom calls) have.
REAL_DTYPES = tuple(d.name for d in DTYPE_INFO.values() if not d.complex)
# The dtypes compensated (and reproducible) summation applies to.
COMPENSATED_DTYPES = tuple(d.name for d in DTYPE_INFO.values() if d.compensated)

def float_dtype(dtype):
    """The numpy dtype of a float dtype name or dtype ("bfloat16" needs ml_dtypes); ValueError otherwise."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in FLOAT_DTYPES:
        raise ValueError(f"dtype: {name!r} is not one of {', '.join(FLOAT_DTYPES)}")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError("dtype: bfloat16 needs the ml_dtypes package (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


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
