"""One program, unchanged, as a real job under each launcher: pycoll run, torchrun and mpirun where they are
installed, and Slurm's and PMI's environment (srun itself does not install here)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from multiproc import SCRIPTS, free_port

WORKER = str(SCRIPTS / "comm_worker.py")


def _reports(output, n):
    rows = [json.loads(m.group(1)) for m in re.finditer(r"^(?:\[rank \d+\] )?(\{.*\})$", output, re.M)]
    rows = [r for r in rows if "scenario" in r]
    assert sorted(r.get("rank", -1) for r in rows) == list(range(n)), output  # -1: init failed (see output)
    return rows


def _run(cmd, tmp_path, env=None, timeout=100):
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TEST_TIMEOUT": "60", **(env or {})})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.timeout(120)
def test_under_pycoll_run(tmp_path):
    out = _run([sys.executable, "-m", "pycoll", "run", "-n", "3", WORKER, "collectives"], tmp_path)
    assert all(r.get("ok") for r in _reports(out, 3))


def _torchrun():
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return path if os.path.exists(path) else shutil.which("torchrun")


@pytest.mark.timeout(120)
@pytest.mark.skipif(_torchrun() is None, reason="torchrun not installed (pip install torch==2.13.0)")
def test_under_torchrun(tmp_path):
    out = _run([_torchrun(), "--standalone", "--nproc-per-node", "3", WORKER, "collectives"], tmp_path)
    assert all(r.get("ok") for r in _reports(out, 3))


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed (apt-get install openmpi-bin)")
def test_under_mpirun(tmp_path):
    out = _run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "3", sys.executable, WORKER,
                "collectives"], tmp_path)
    assert all(r.get("ok") for r in _reports(out, 3))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["slurm", "pmi"])
def test_under_slurm_and_pmi_environments(tmp_path, launcher):
    """What srun / a PMI launcher would set, on processes started here (without RANK/WORLD_SIZE)."""
    n, port = 3, free_port()
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    procs = []
    for rank in range(n):
        env = dict(base, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TEST_TIMEOUT="60")
        if launcher == "slurm":
            env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=str(n), SLURM_LOCALID=str(rank), SLURM_NNODES="1",
                       SLURM_JOB_ID="4242")
        else:
            env.update(PMI_RANK=str(rank), PMI_SIZE=str(n))
        procs.append(subprocess.Popen([sys.executable, WORKER, "collectives"], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=100) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert all(r.get("ok") for r in _reports("".join(o for o, _ in outs), n))
