"""import pycoll.torch: PyTorch's own DistributedDataParallel over init_process_group("pycoll") under torchrun,
with several buckets per step and no_sync() accumulation, gives the weights of one process on the whole batch;
dist.new_group makes a working subgroup. The collectives FSDP uses (reduce-scatter and all-gather of flat
tensors, coalesced too) and the list forms give exact results, blocking and async."""

import json
import os
import subprocess
import sys

import pytest
from multiproc import SCRIPTS, free_port

torch = pytest.importorskip("torch")


def _single_process_params():
    sys.path.insert(0, str(SCRIPTS))
    try:
        from ddp_model import STEPS, batch, make_model, train_step
    finally:
        sys.path.remove(str(SCRIPTS))
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        x, y = batch(step)
        train_step(model, opt, x, y, accumulate=step % 3 == 1)
    return [p.detach().reshape(-1).tolist() for p in model.parameters()]


def _torchrun(n, script):
    """Run script on n ranks under torchrun; each rank's JSON line, checked to come from every rank."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(SCRIPTS))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(SCRIPTS / script)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in reports) == list(range(n)), done.stdout
    return reports


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.stress)])  # torchrun starts slowly
def test_ddp_over_pycoll_under_torchrun_matches_one_process_and_subgroups_work(n):
    reports = _torchrun(n, "ddp_worker.py")
    want = _single_process_params()
    for rep in reports:
        assert rep["backend"] == "pycoll"
        assert rep["pair_sum"] == (3.0 if rep["rank"] < 2 else rep["rank"] + 1.0)  # dist.new_group([0, 1])
        assert rep["params"] == reports[0]["params"]  # every rank bitwise the same
        for got, ref in zip(rep["params"], want):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-10, atol=1e-12)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.stress)])
def test_fsdp_collectives_are_exact_blocking_and_async(n):
    reports = _torchrun(n, "torch_collectives_worker.py")
    for rep in reports:
        assert rep["failed"] == [], rep["failed"]
