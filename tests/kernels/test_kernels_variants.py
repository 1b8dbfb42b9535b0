"""Rerun the kernel tests under every SIMD variant this CPU supports (PYCOLL_SIMD is read once per process,
so each variant gets its own pytest process)."""
import os

import pytest
from simd_variants import run_under_variant, supported_variants

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif("PYCOLL_SIMD" in os.environ, reason="already running under a forced variant")
@pytest.mark.parametrize("variant", supported_variants())
@pytest.mark.timeout(90)
def test_kernels_under_variant(variant):
    names = ("test_kernels.py", "test_kernels_compensated.py", "test_kernels_specials.py", "test_kernels_complex.py")
    tests = [os.path.join(HERE, name) for name in names]
    result = run_under_variant(variant, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests], 85)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
