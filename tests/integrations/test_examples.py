"""The examples a user copies, run as a user runs them, checked against what they claim."""

import importlib.util

import numpy as np
import pytest
from multiproc import Ranks
from repo_paths import ROOT

EXAMPLES = ROOT / "examples"


def _params(script, n):
    with Ranks(n, str(EXAMPLES / script), "--json", env={"PYCOLL_BACKEND": "shm"}) as ranks:
        reports = ranks.reports()
    return reports


def _check_against_one_process(script, n, rtol, atol):
    single = _params(script, 1)[0]
    reports = _params(script, n)
    for rep in reports.values():
        assert len(rep["params"]) == len(single["params"])
        for got, want in zip(rep["params"], single["params"]):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        assert rep["params"] == reports[0]["params"]  # every rank holds bitwise the same weights
    return single


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_data_parallel_numpy_trains_the_same_weights_as_one_process_on_the_whole_batch(n):
    # The same mean gradient up to the order of the summation (float64).
    single = _check_against_one_process("data_parallel_numpy.py", n, rtol=1e-9, atol=1e-12)
    assert single["loss"] < 0.6  # it learned: the untrained model's loss on that batch is 0.94


@pytest.mark.stress  # the jitted example below runs the same model in the default run
@pytest.mark.timeout(120)
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install \".[jax]\")")
def test_data_parallel_jax_trains_the_same_weights_as_one_process_on_the_whole_batch():
    # float32: the halves' mean gradients averaged differ from the whole batch's mean gradient by a few float32
    # roundings (~1e-7 relative) per step; 30 SGD steps at lr 0.05 on weights of order 1 keep the drift well
    # under 1e-6 (measured: 6e-8). A wrong reduction (a sum instead of the average, one rank's
    # gradient only) moves the weights by 1e-2 or more.
    single = _check_against_one_process("data_parallel_jax.py", 2, rtol=1e-5, atol=1e-6)
    assert single["loss"] < 0.6  # it learned: the untrained model's loss on that batch is 0.72


@pytest.mark.timeout(120)
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install \".[jax]\")")
def test_data_parallel_jax_jit_trains_the_same_weights_as_one_process_on_the_whole_batch():
    # data_parallel_jax.py's model and schedule with the average inside the jitted step (pycoll.jax.all_reduce):
    # the same float32 tolerance against one process. A wrong reduction (a sum, one rank's gradient, the
    # collectives out of order) moves the weights by 1e-2 or more.
    single = _check_against_one_process("data_parallel_jax_jit.py", 2, rtol=1e-5, atol=1e-6)
    assert single["loss"] < 0.6  # it learned: the untrained model's loss on that batch is 0.72


@pytest.mark.timeout(120)
@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (pip install \".[torch]\")")
def test_ddp_torch_trains_the_same_weights_as_one_process_on_the_whole_batch():
    # float64, DDP's averaged bucket gradients: equal to the whole batch's up to the order of the summation.
    single = _check_against_one_process("ddp_torch.py", 2, rtol=1e-9, atol=1e-12)
    assert single["loss"] < 0.48  # it learned: the untrained model's loss on that batch is 0.54


def _hybrid(n, backend="shm"):
    with Ranks(n, str(EXAMPLES / "hybrid_parallel.py"), "--json", env={"PYCOLL_BACKEND": backend},
               timeout=60) as ranks:
        return ranks.reports(deadline_s=150)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n, backend", [(8, "shm"), (4, "tcp")])
def test_hybrid_pp_dp_tp_zero1_trains_the_same_weights_as_one_process(n, backend):
    single = _hybrid(1)[0]
    reports = _hybrid(n, backend)
    shape = reports[0]["shape"]
    assert shape == ({"pp": 2, "dp": 2, "tp": 2} if n == 8 else {"pp": 2, "dp": 1, "tp": 2}), shape
    blocks = {}
    for rep in reports.values():
        np.testing.assert_allclose(rep["losses"], single["losses"], rtol=1e-9)
        for i, (w1, w2) in rep["weights"].items():
            blocks.setdefault(i, []).append((w1, w2))
    assert sorted(blocks) == sorted(single["weights"])  # every block lives on some stage
    for i, copies in blocks.items():
        want_w1, want_w2 = single["weights"][i]
        for w1, w2 in copies:  # the same on every dp and tp rank of the stage, and equal to one process's
            np.testing.assert_allclose(w1, want_w1, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(w2, want_w2, rtol=1e-9, atol=1e-12)
    assert single["losses"][-1] < 0.3 * single["losses"][0]  # it learned


def _readme_first_program():
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A first program", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.timeout(120)
def test_the_readme_first_program_prints_what_the_readme_says(tmp_path):
    """The README's first program, run as written on 3 ranks: each prints the results the README promises for 4
    ranks, with 3 (all_reduce 1 + 2 + 3, rank 0's broadcast, the gathered ranks, a reduce-scattered block of the
    sum of ones, the async max)."""
    program = tmp_path / "first.py"
    program.write_text(_readme_first_program())
    n = 3
    with Ranks(n, str(program)) as ranks:
        for rank, proc in enumerate(ranks.procs):
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, f"rank {rank}: {out}\n{err}"
            assert out.strip() == f"rank {rank} of {n}: 6 [0.0, 1.0, 2.0, 3.0] [0, 1, 2] [3.0, 3.0] 2", out
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    assert "`rank N of 4: 10 [0.0, 1.0, 2.0, 3.0] [0, 1, 2, 3] [4.0, 4.0] 3`" in readme


@pytest.mark.timeout(120)
def test_the_demo_names_the_backend_the_transport_and_the_algorithm_apart():
    """allreduce_demo.py on 2 ranks of the default backend on one host: backend cpu, which chose the shm
    transport, whose own all-reduce ran -- three names, none standing for another."""
    with Ranks(2, str(EXAMPLES / "allreduce_demo.py")) as ranks:
        for rank, proc in enumerate(ranks.procs):
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, f"rank {rank}: {out}\n{err}"
            assert out.strip() == (f"rank {rank}/2: all_reduce of 4 MiB float32 = 3, as expected "
                                   f"(backend cpu, transport shm, algorithm shm_slots)"), out
