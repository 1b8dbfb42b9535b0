"""The dtype table (native/common/types.c), bound once (pycoll._bindings.abi.DTYPE_TABLE): what it says of each
dtype holds for NumPy's dtype of that name and for the kernels, and the Python modules take their lists from it."""

import numpy as np
import pytest

from pycoll import dtypes, kernels

NUMPY = [d for d in dtypes.DTYPE_INFO.values() if d.name != "bfloat16"]  # ml_dtypes' is optional


@pytest.mark.parametrize("d", NUMPY, ids=lambda d: d.name)
def test_each_row_describes_numpys_dtype_of_its_name(d):
    np_dtype = np.dtype(d.name)
    assert (d.id, d.size) == (dtypes.dtype_id(np_dtype), np_dtype.itemsize)
    assert (d.integer, d.float, d.complex) == (np_dtype.kind in "iu", np_dtype.kind == "f", np_dtype.kind == "c")
    assert d.signed == (np_dtype.kind != "u")
    if d.float:
        assert d.precision == np.finfo(np_dtype).nmant + 1


@pytest.mark.parametrize("d", NUMPY, ids=lambda d: d.name)
def test_the_ops_a_row_names_are_the_ones_the_kernels_reduce(d):
    a = np.ones(4, d.name)
    for op in dtypes.OPS:
        if op in d.ops:
            kernels.reduce_into(a.copy(), a, op)
        else:
            with pytest.raises(TypeError, match=f"op {op} on dtype {d.name}"):
                kernels.reduce_into(a.copy(), a, op)
    if d.compensated:
        assert kernels.accumulator_dtype(d.name) == np.dtype(d.accumulator)


def test_the_modules_lists_come_from_the_table():
    from pycoll import fused_norm
    from pycoll.tools import accuracy
    from pycoll.tools.bench import oneccl, peers, sweep

    assert fused_norm.FLOAT_DTYPES is accuracy.FLOAT_DTYPES is dtypes.FLOAT_DTYPES
    assert oneccl.DTYPES is sweep.DTYPES is peers.GlooPeer.dtypes is dtypes.REAL_DTYPES
    assert dtypes.FLOAT_DTYPES == ("float16", "bfloat16", "float32", "float64")
    assert dtypes.COMPENSATED_DTYPES == dtypes.FLOAT_DTYPES + dtypes.COMPLEX_DTYPES
