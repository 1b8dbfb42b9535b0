"""Bad input to pycoll.kernels and pycoll.dtypes: clear, typed exceptions naming the argument."""
import ml_dtypes
import numpy as np
import pytest

from pycoll import dtypes, kernels


def test_dtype_ids():
    names = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for ident, name in enumerate(names):
        dt = ml_dtypes.bfloat16 if name == "bfloat16" else name
        assert dtypes.dtype_id(dt) == ident
        assert dtypes.dtype_id(np.dtype(dt)) == ident


@pytest.mark.parametrize("dt", [np.clongdouble, np.bool_, np.uint16, np.dtype(">f4"), object])
def test_unsupported_dtype(dt):
    with pytest.raises(TypeError, match="dtype"):
        dtypes.dtype_id(dt)
    a = np.zeros(4, dt)
    with pytest.raises(TypeError, match="dtype"):
        kernels.reduce_into(a, a.copy(), "sum")


def test_op_ids():
    assert [dtypes.op_id(name) for name in ("sum", "prod", "min", "max", "avg")] == [0, 1, 2, 3, 4]
    assert dtypes.op_id(3) == 3
    for bad in ("mean", "", 5, -1, True, None, 1.0):
        with pytest.raises(ValueError, match="op"):
            dtypes.op_id(bad)
    with pytest.raises(ValueError, match="unknown op 'mean'"):
        kernels.reduce_into(np.zeros(3), np.zeros(3), "mean")


def test_mismatches():
    with pytest.raises(ValueError, match="dtype mismatch"):
        kernels.reduce_into(np.zeros(4, np.float32), np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="length mismatch"):
        kernels.reduce_into(np.zeros(4), np.zeros(5))
    with pytest.raises(ValueError, match="length mismatch"):
        kernels.reduce(np.zeros(4), np.zeros(4), out=np.zeros(3))


def test_layout_and_writability():
    a = np.zeros(8)
    with pytest.raises(ValueError, match="src must be C-contiguous"):
        kernels.reduce_into(np.zeros(4), a[::2])
    with pytest.raises(ValueError, match="dst must be C-contiguous"):
        kernels.reduce_into(a[::2], np.zeros(4))
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="dst is read-only"):
        kernels.reduce_into(ro, np.zeros(4))
    with pytest.raises(ValueError, match="read-only"):
        kernels.reduce_into(bytes(4), bytes(4))
    with pytest.raises(ValueError, match="overlap"):
        kernels.reduce_into(a[1:], a[:-1])
    with pytest.raises(TypeError, match="buffer protocol"):
        kernels.reduce_into([1.0, 2.0], np.zeros(2))


def test_scale_and_store_divisors():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="divisor"):
            kernels.scale_avg(np.zeros(3), bad)
        with pytest.raises(ValueError, match="divisor"):
            kernels.compensated_store(np.zeros(3), np.zeros(3), np.zeros(3), bad)


def test_compensated_needs_floats():
    with pytest.raises(TypeError, match="float"):
        kernels.compensated_load(np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="float"):
        kernels.compensated_combine(*(np.zeros(3, np.int64) for _ in range(4)))
    with pytest.raises(ValueError, match="dtype mismatch"):
        kernels.compensated_store(np.zeros(3, np.float16), np.zeros(3, np.float16), np.zeros(3, np.float16))
    with pytest.raises(ValueError, match="length mismatch"):
        kernels.compensated_combine(np.zeros(3), np.zeros(3), np.zeros(4), np.zeros(4))
