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


def _validate_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parts(**changes):
    good = {
        "correctness": {0: [{"equal": True}], 1: [{"equal": True}]},
        "algorithms": {0: [{"accuracy": "compensated", "max_ulps": 1.0}, {"accuracy": "fast", "max_ulps": 900.0}],
                       1: []},
        "streams": {0: [{"ok": True}], 1: [{"ok": True}]},
        "killed": {0: [{"raised": "PeerFailure"}], 1: {"exit": 17, "output": ""}},
        "torch_bench": {0: [{"bytes": 1024, "us": 10.0}]},
    }
    good.update(changes)
    return good


def test_the_report_judges_every_part():
    """Its first run on a GPU must say pass or fail for each part, not leave the reader to judge raw rows."""
    verdicts = _validate_module().verdicts
    assert all(ok for ok, _ in verdicts(_parts()).values())
    cases = {
        "correctness": {0: [{"equal": True}, {"equal": False}], 1: []},
        "algorithms": {0: [{"accuracy": "compensated", "max_ulps": 40.0}], 1: []},
        "streams": {0: [{"ok": False}], 1: []},
        "killed": {0: [{"raised": None}], 1: {"exit": 17, "output": ""}},
    }
    for part, rows in cases.items():
        ok, why = verdicts(_parts(**{part: rows}))[part]
        assert not ok, (part, why)
    ok, why = verdicts(_parts(correctness={0: {"exit": 1, "output": "boom"}, 1: []}))["correctness"]
    assert not ok and "ranks [0] failed" in why
    report = _validate_module().report
    args = type("Args", (), {"nproc": 2, "quick": True})()
    text = report(args, {"gpu": "stand-in"}, _parts(streams={0: [{"ok": False}], 1: []}), "table")
    assert "- streams: FAIL" in text and "- correctness: PASS" in text
