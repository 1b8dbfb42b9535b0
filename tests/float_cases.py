"""IEEE special values and the finite ones around them, and equality as fast mode defines it (NaN where NaN,
else the same bits): shared by the host kernels' tests (kernels/test_kernels_specials.py) and the device kernels
compiled for the host (vendors/test_cuda_kernel_source.py)."""

import ml_dtypes
import numpy as np

UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def ulp_of_largest(dtype):
    info = ml_dtypes.finfo(dtype)
    return float(info.eps) * 2.0 ** (info.maxexp - 1)


def specials(dtype):
    """The special values of dtype and the finite ones around them: infinities, NaN, the largest finite, values
    two of which overflow, the smallest subnormal, both zeros, half and a quarter of the largest's ulp."""
    info = ml_dtypes.finfo(dtype)
    big = float(info.max)
    half_ulp = ulp_of_largest(dtype) / 2
    tiny = float(info.smallest_subnormal)
    values = [np.inf, -np.inf, np.nan, big, -big, 0.75 * big, -0.75 * big, tiny, -tiny, 0.0, -0.0, 1.0, -1.0,
              half_ulp, -half_ulp, half_ulp / 2]
    return np.array(values, np.float64).astype(dtype)


def same(got, want):
    """Elementwise equal as fast mode defines it: NaN where want is NaN, else the same bits (sign of zero and
    infinity included)."""
    got, want = np.asarray(got), np.asarray(want)
    nan = np.isnan(want.astype(np.float64))
    assert (np.isnan(got.astype(np.float64)) == nan).all(), (got[np.isnan(got.astype(np.float64)) != nan],
                                                             want[np.isnan(got.astype(np.float64)) != nan])
    bad = got[~nan].view(UINT[got.itemsize]) != want[~nan].view(UINT[want.itemsize])
    assert not bad.any(), (got[~nan][bad], want[~nan][bad])
