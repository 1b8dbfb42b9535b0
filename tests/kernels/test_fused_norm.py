"""all_reduce_layernorm / all_reduce_rmsnorm and their sequence-parallel variants (pycoll/fused_norm.py) over
real processes, and the row kernel under them (native/kernels/row_norm.c)."""

import numpy as np
import pytest
from multiproc import backend_fixture, scenario_reports

from pycoll._bindings import kernels as native_kernels
from pycoll.dtypes import dtype_id

backend = backend_fixture(["shm", "tcp"])

# Largest error relative to the float64 reference's largest magnitude. float32 meets the 1e-5; the
# 16-bit types round the sum over ranks (reduce_scatter reduces in the dtype) and the output to 11 / 8 bits.
BOUNDS = {"float64": 1e-12, "float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


@pytest.mark.parametrize("n", [2, 3])
def test_fused_norms_match_a_float64_reference_and_are_identical_on_every_rank(backend, n, no_segment_left):
    reports = scenario_reports(n, "fused_norm_worker.py", "correct", timeout=60)
    for rank, report in reports.items():
        assert report.get("ok"), report
        for key, error in report["errors"].items():
            dtype = key.split("/")[1]
            assert error <= BOUNDS[dtype], (rank, key, error)
        assert report["digests"] == reports[0]["digests"], rank
    keys = reports[0]["errors"]
    for dtype in BOUNDS:  # every dtype, both norms, uneven and empty row counts, residual on and off ran
        for kind in ("layernorm", "rmsnorm"):
            assert f"{kind}/{dtype}/0x40/res=0" in keys and f"{kind}/{dtype}/{3 * n + 1}x64/res=1" in keys


@pytest.mark.parametrize("n", [2, 3])
def test_bad_arguments_raise_naming_them_before_sending(backend, n, no_segment_left):
    for rank, report in scenario_reports(n, "fused_norm_worker.py", "errors").items():
        assert report.get("ok"), report


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_passing_other_shapes_of_the_same_counts_all_raise_mismatch(backend, n, no_segment_left):
    for rank, report in scenario_reports(n, "fused_norm_worker.py", "mismatch").items():
        assert report.get("error") == "MismatchError", report
        assert "shape" in report["message"], report


def _reference(kind, x, weight, bias, residual, eps):
    v = x.astype(np.float64) + (0 if residual is None else residual.astype(np.float64))
    if kind == "layernorm":
        v = v - v.mean(axis=1, keepdims=True)
    y = v / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps) * weight.astype(np.float64)
    return y if bias is None else y + bias.astype(np.float64)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("hidden", [1, 15, 16, 33])
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_kernel_in_place_against_a_reference(kind, hidden, with_residual, dtype):
    rng = np.random.default_rng(hidden)
    x = (100 + rng.standard_normal((5, hidden))).astype(dtype)  # a large mean: the variance takes two passes
    weight, bias = rng.standard_normal(hidden).astype(dtype), rng.standard_normal(hidden).astype(dtype)
    residual = rng.standard_normal((5, hidden)).astype(dtype) if with_residual else None
    bias = bias if kind == "layernorm" else None
    want = _reference(kind, x, weight, bias, residual, 1e-5)
    out = x.copy()
    native_kernels.norm_rows(out, out, residual, weight, bias, 5, hidden, dtype_id(out.dtype),
                             native_kernels.NORM_KINDS[kind], 1e-5)
    assert np.abs(out - want).max() <= (1e-4 if dtype == "float32" else 1e-12) * max(1.0, np.abs(want).max())


def test_row_kernel_refuses_bad_arguments():
    x, w = np.ones((2, 4), np.float32), np.ones(4, np.float32)
    layer = native_kernels.NORM_KINDS["layernorm"]
    with pytest.raises(TypeError, match="unsupported"):
        native_kernels.norm_rows(np.ones((2, 4), np.int32), np.ones((2, 4), np.int32), None, np.ones(4, np.int32),
                                 None, 2, 4, dtype_id(np.int32), layer, 1e-5)
    with pytest.raises(ValueError, match="weight"):
        native_kernels.norm_rows(x, x, None, np.ones(3, np.float32), None, 2, 4, dtype_id(x.dtype), layer, 1e-5)
    with pytest.raises(ValueError, match="out and x overlap"):
        whole = np.ones(12, np.float32)
        native_kernels.norm_rows(whole[:8], whole[4:], None, w, None, 2, 4, dtype_id(x.dtype), layer, 1e-5)
    with pytest.raises(ValueError, match="invalid"):
        native_kernels.norm_rows(x, x, None, w, None, 2, 4, dtype_id(x.dtype), layer, -1.0)
