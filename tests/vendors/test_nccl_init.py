"""backend="nccl" through the public API: pycoll.init() finds the (fake) library, rank 0's TCP store carries
NCCL's unique id, and the Communicator's checks run before the vendor call. A binding test on host memory, not
proof on a GPU (there is none here)."""

import json
import os
import re
import subprocess
import sys

import pytest
from fakes.vendor_harness import build_fake
from multiproc import SCRIPTS


@pytest.mark.timeout(120)
def test_init_and_collectives_on_the_nccl_backend(tmp_path):
    lib = build_fake("nccl", tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the fake NCCL")
    env = dict(os.environ, PYCOLL_NCCL_LIBRARY=lib, PYCOLL_CUDART_LIBRARY=lib, FAKE_COLL_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "pycoll", "run", "-n", "2", str(SCRIPTS / "nccl_worker.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(m) for m in re.findall(r"^\[rank \d+\] (\{.*\})$", done.stdout, re.M)]
    assert sorted(r["rank"] for r in rows) == [0, 1], done.stdout
    for r in rows:
        assert r["backend"] == "nccl"
        assert r["sum_ok"] and r["compensated_ok"] and r["gather_ok"], r
        assert "host memory" in r["host_refused"] and "cuda memory" in r["host_refused"], r
