"""`pycoll bench`'s columns and output: per-iteration p50/p99 of the slowest rank, the out-of-place and in-place
forms timed separately (side by side in the table, a JSON row each), --accuracy's help naming every mode, and
a table on stdout that what ranks, peers and their launchers print cannot break (2 real ranks, tiny sweeps)."""

import argparse
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pycoll.algorithms import ACCURACIES, ACCURACY_ALIASES
from pycoll.cli import bench as bench_cli
from pycoll.tools.bench import check, report, sweep, timing, worker

FAST = ["--iters", "5", "--warmup", "1"]
FORM_COLUMNS = ["time(us)", "p50(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "max_rel_err"]
CASE_COLUMNS = ["size(B)", "count", "type", "redop", "algorithm", "picked", "accuracy"]


@pytest.fixture(autouse=True)
def _outside_the_source_tree(tmp_path, monkeypatch):
    # The ranks' `python -m` would import the source folder (no compiled modules) from the repository root.
    monkeypatch.chdir(tmp_path)


def run_cli(*args, env=None, timeout=90):
    return subprocess.run([sys.executable, "-m", "pycoll", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def data_lines(stdout):
    return [ln.split() for ln in stdout.splitlines() if ln.strip() and not ln.startswith("#")]


def header(stdout):
    return next(ln for ln in stdout.splitlines() if "size(B)" in ln).lstrip("#").split()


def check_spread(row):
    """What the numbers must satisfy whatever the machine's noise: the slowest rank's time in each iteration
    is at least each rank's own, so their median (p50) is at least the slowest rank's median (time_us)."""
    assert 0 < row["time_min_us"] <= row["time_median_us"] <= row["time_us"], row
    assert row["time_us"] <= row["time_p50_us"] * (1 + 1e-12), row
    assert row["time_p50_us"] <= row["time_p99_us"], row


@pytest.mark.timeout(90)
def test_json_rows_carry_p50_and_p99_of_both_forms(tmp_path):
    out = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "64", "-e", "4K", "-f", "64", *FAST, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["bytes"], r["in_place"]) for r in rows] == [(64, False), (64, True), (4096, False), (4096, True)]
    for r in rows:
        assert set(r) == set(report.JSON_KEYS + report.EXTRA_KEYS) and r["wrong"] == 0, r
        check_spread(r)
    # The table: one line per size, the case's columns then a group per form, labelled above it.
    assert header(proc.stdout) == CASE_COLUMNS + FORM_COLUMNS * 2
    labels = next(ln for ln in proc.stdout.splitlines() if "out-of-place" in ln)
    assert labels.split() == ["#", "out-of-place", "in-place"], labels
    lines = data_lines(proc.stdout)
    assert [int(c[0]) for c in lines] == [64, 4096] and all(len(c) == 21 for c in lines), proc.stdout
    for cells, (out_row, in_row) in zip(lines, zip(rows[::2], rows[1::2])):
        assert cells[7:10] == [f"{out_row[k]:.1f}" for k in ("time_us", "time_p50_us", "time_p99_us")]
        assert cells[14:17] == [f"{in_row[k]:.1f}" for k in ("time_us", "time_p50_us", "time_p99_us")]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("flag, form", [("--in-place", True), ("--out-of-place", False)])
def test_one_form_alone(tmp_path, flag, form):
    out = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "--collective", "all_gather", "-b", "256", "-e", "256", *FAST, flag, "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    [head, row] = out.read_text().splitlines()
    fields = dict(zip(head.split(","), row.split(",")))
    assert fields["in_place"] == str(form) and fields["wrong"] == "0", fields
    assert float(fields["time_p50_us"]) <= float(fields["time_p99_us"]), fields
    assert header(proc.stdout) == CASE_COLUMNS + FORM_COLUMNS
    assert ("in-place" if form else "out-of-place") in proc.stdout


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, text", [
    (["--collective", "reduce_scatter", "--in-place"], "--in-place: reduce_scatter has no in-place form"),
    (["--collective", "broadcast", "--out-of-place"], "--out-of-place: broadcast has no out-of-place form"),
    (["--in-place", "--out-of-place"], "not allowed with argument"),
])
def test_a_form_the_collective_lacks_is_refused_naming_the_flag(args, text):
    proc = run_cli("-n", "2", *args, timeout=30)
    assert proc.returncode == 2 and text in proc.stderr, proc.stderr


class _Doubling:
    """One rank whose all-reduce doubles the input (a sum over two ranks of equal inputs), recording what each
    call was given."""

    rank, size, backend, last_algorithm = 0, 1, "fake", "fake"

    def __init__(self):
        self.inputs = []

    def barrier(self):
        pass

    def all_reduce(self, x, op="sum", *, out=None, algorithm="auto", accuracy="fast"):
        self.inputs.append(np.array(x, copy=True))
        target = x if out is None else out
        target[...] = x * 2
        return target

    def all_gather(self, x, out):
        out[...] = x
        return out


@pytest.mark.timeout(10)
def test_every_in_place_iteration_reduces_the_same_input():
    """In place, the result overwrites the input: without restoring it the values would double every
    iteration (and overflow), timing different data than the out-of-place form."""
    comm = _Doubling()
    case = sweep.Case("all_reduce", "int32", "sum", "auto", "fast", 64, True)
    t, (p50, p99), _ = worker._time(comm, case, 16, 0, 2, 5, worker.HostArrays())
    assert len(comm.inputs) == 7 and all(np.array_equal(a, comm.inputs[0]) for a in comm.inputs)
    assert t.max_s <= p50 <= p99


@pytest.mark.timeout(10)
@pytest.mark.parametrize("collective", ["all_reduce", "reduce", "all_gather"])
def test_the_in_place_form_shares_memory_as_the_api_defines_it(collective):
    rank, world, count = 1, 2, 8

    def inputs(r):
        return np.full(check.input_count(collective, count, world), r + 1, np.int32)

    x, out = worker._buffers(sweep.Case(collective, "int32", "sum", "auto", "fast", 32, True), count, inputs,
                             rank, world, worker.HostArrays())
    if collective == "all_gather":  # x is this rank's block of out, already holding its input
        assert x.ctypes.data == out.ctypes.data + rank * x.nbytes and np.array_equal(out, [0] * 4 + [2] * 4)
    else:
        assert out is None
    x, out = worker._buffers(sweep.Case(collective, "int32", "sum", "auto", "fast", 32, False), count, inputs,
                             rank, world, worker.HostArrays())
    assert out is not None and not np.shares_memory(x, out)


@pytest.mark.timeout(10)
def test_spread_is_over_the_slowest_rank_of_each_iteration():
    # Rank 0 is slow in iteration 0, rank 1 in iteration 2: the slowest per iteration is [9, 2, 7, 3, 4].
    p50, p99 = timing.spread([[9.0, 1.0, 1.0, 3.0, 4.0], [1.0, 2.0, 7.0, 1.0, 1.0]])
    assert p50 == 4.0 and p99 == pytest.approx(7.0 + 0.96 * 2.0)


@pytest.mark.timeout(10)
def test_accuracy_help_lists_every_mode_the_library_takes():
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    action = next(a for a in parser._actions if "--accuracy" in a.option_strings)
    for name in [*ACCURACIES, *ACCURACY_ALIASES]:
        assert name in action.help, (name, action.help)


NOISE = "NOISE-{}-{}"  # what, stream


def _noisy_ranks(tmp_path):
    """An environment whose ranks (processes with RANK set) print to stdout and stderr as they start, as a
    library's warnings do."""
    site = tmp_path / "noisy"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import os, sys
        if "RANK" in os.environ:
            print({NOISE.format("rank", "stdout")!r}, flush=True)
            print({NOISE.format("rank", "stderr")!r}, file=sys.stderr, flush=True)
        """))
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return env


def _assert_clean_table(proc, noise):
    assert proc.returncode == 0, proc.stderr
    assert "NOISE" not in proc.stdout, proc.stdout
    for text in noise:
        assert text in proc.stderr, proc.stderr
    # Every other line a table's row: the case's cells and one or two forms' groups, or a ratio line (11
    # cells with one peer: ranks, type, redop, size, time, "cpu over shm", picked, the peer's time and ratio).
    widths = {len(CASE_COLUMNS) + len(FORM_COLUMNS), len(CASE_COLUMNS) + 2 * len(FORM_COLUMNS), 11}
    for line in proc.stdout.splitlines():
        assert line.startswith("#") or len(line.split()) in widths, line


@pytest.mark.timeout(90)
def test_what_the_ranks_print_goes_to_stderr_not_into_the_table(tmp_path):
    proc = run_cli("-n", "2", "-b", "64", "-e", "64", *FAST, env=_noisy_ranks(tmp_path))
    _assert_clean_table(proc, [NOISE.format("rank", "stdout"), NOISE.format("rank", "stderr")])
    assert proc.stdout.startswith("# all_reduce  backend cpu over shm  2 ranks"), proc.stdout


def _fake_mpich(prefix):
    """An environment where the mpich peer looks for MPICH, whose mpiexec prints to both streams (as a
    library's warnings do) and writes a row per size and form without running anything."""
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "mpi4py").mkdir(parents=True)
    (prefix / "lib" / "libmpi.so.12").write_bytes(b"")
    (prefix / "bin").mkdir()
    mpiexec = prefix / "bin" / "mpiexec"
    mpiexec.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        print({NOISE.format("mpiexec", "stdout")!r}, flush=True)
        print({NOISE.format("mpiexec", "stderr")!r}, file=sys.stderr, flush=True)
        config_path, result_path = sys.argv[-2:]
        with open(config_path) as f:
            config = json.load(f)
        rows = [dict(collective=config["collective"], bytes=n, count=n // 4, dtype="float32", op="sum",
                     algorithm="default", picked="mpich", accuracy="fast", in_place=form, backend="mpich", world=2,
                     time_us=1.0, time_min_us=1.0, time_median_us=1.0, time_p50_us=1.0, time_p99_us=2.0,
                     algbw=1.0, busbw=1.0, wrong=0, max_rel_err=0.0)
                for n in config["sizes"] for form in config.get("in_place", [False])]
        with open(result_path, "w") as f:
            json.dump(rows, f)
        """))
    mpiexec.chmod(0o755)
    return prefix


@pytest.mark.timeout(90)
def test_what_a_peers_launcher_prints_goes_to_stderr_not_into_the_tables(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    env["PYCOLL_BENCH_MPICH"] = str(_fake_mpich(tmp_path / "mpich"))
    proc = run_cli("-n", "2", "-b", "64", "-e", "64", *FAST, "--compare", "mpich", env=env)
    _assert_clean_table(proc, [NOISE.format("mpiexec", "stdout"), NOISE.format("mpiexec", "stderr")])
    assert "# all_reduce  backend mpich  2 ranks" in proc.stdout, proc.stdout
    ratios = proc.stdout.split("# time ratio")[1:]
    assert [r.split(";")[0] for r in ratios] == [" peer/pycoll (> 1: pycoll is faster), out-of-place",
                                                 " peer/pycoll (> 1: pycoll is faster), in-place"], ratios
