"""bench/gpu_validate.py, the end-to-end validation of a GPU machine, refuses clearly where there is no usable GPU:
exit code 2, the reason on stderr, and no results file written (it has never run on a GPU: see its docstring)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_validate.py"


def test_it_refuses_without_a_gpu(tmp_path):
    check = subprocess.run([sys.executable, "-P", str(SCRIPT), "--check"], capture_output=True, text=True,
                           timeout=100)
    if check.returncode == 0:
        pytest.skip("a usable GPU is here: run the validation itself (python bench/gpu_validate.py)")
    out = tmp_path / "gpu.md"
    done = subprocess.run([sys.executable, "-P", str(SCRIPT), "--out", str(out), "--quick"], capture_output=True,
                          text=True, timeout=100)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "gpu_validate: refusing to run: no usable GPU here:" in done.stderr
    # the reason is one of: no PyTorch, PyTorch without a device, pycoll's nccl backend unusable
    assert ("PyTorch" in done.stderr) or ("nccl backend is unusable" in done.stderr), done.stderr
    assert f"{out} was not written" in done.stderr
    assert not out.exists()
