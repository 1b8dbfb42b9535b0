"""`pycoll run` sets OMP_NUM_THREADS=1 for its ranks when it is unset, as torchrun does (torch's intra-op
threads on every rank would otherwise oversubscribe the cores: a DDP step ran many times slower), says so once,
and leaves a value the user set alone."""

import os
import subprocess
import sys

SHOW = "import os; print('omp=' + os.environ.get('OMP_NUM_THREADS', 'unset'))"


def _run(env, tmp_path):
    script = tmp_path / "show_omp.py"
    script.write_text(SHOW)
    return subprocess.run([sys.executable, "-P", "-m", "pycoll", "run", "-n", "2", str(script)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_pycoll_run_sets_omp_num_threads_once_when_unset(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = _run(env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(line.split("omp=")[1] for line in done.stdout.splitlines() if "omp=" in line) == ["1", "1"]
    assert done.stderr.count("OMP_NUM_THREADS was unset") == 1, done.stderr


def test_pycoll_run_keeps_the_users_omp_num_threads(tmp_path):
    done = _run(dict(os.environ, OMP_NUM_THREADS="3"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(line.split("omp=")[1] for line in done.stdout.splitlines() if "omp=" in line) == ["3", "3"]
    assert "OMP_NUM_THREADS" not in done.stderr
