"""`pycoll bench`: its pure parts (sizes, iterations, bus factors, exact check data, the timing loop, the
progress relay) and the CLI end to end on tiny sweeps of 2 real ranks (table, JSON, CSV, plot, --compare skips,
what auto picked, under pycoll run, bad arguments) and tiny accuracy reports (simulated and real ranks)."""

import importlib.util
import io
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from pycoll._bindings import sim as _sim
from pycoll.algorithms import ALGORITHMS, COLL_ALGORITHMS, NATIVE_ONLY
from pycoll.cli import bench as bench_cli
from pycoll.tools.bench import check, oneccl, peers, progress, report, sweep, timing

SIZES = ["-b", "8", "-e", "4K", "-f", "8"]  # 8, 64, 512, 4096 bytes
FAST = ["--iters", "3", "--warmup", "1"]


@pytest.fixture(autouse=True)
def _outside_the_source_tree(tmp_path, monkeypatch):
    # Ranks start with `python -m`, which puts the working directory first on sys.path: from the repository
    # root that would import the source folder (no compiled modules) instead of the installed package.
    monkeypatch.chdir(tmp_path)


def run_cli(*args, timeout=90, env=None):
    return subprocess.run([sys.executable, "-m", "pycoll", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def table_lines(stdout):
    return [ln for ln in stdout.splitlines() if ln.strip() and not ln.startswith("#")]


# -- pure parts ---------------------------------------------------------------------------------------------
@pytest.mark.timeout(10)
@pytest.mark.parametrize("text, want", [("8", 8), ("4K", 4096), ("4k", 4096), ("1M", 1 << 20),
                                        ("64MiB", 64 << 20), ("2G", 2 << 30), (" 16 ", 16)])
def test_parse_size_accepts_suffixes(text, want):
    assert sweep.parse_size(text) == want


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["", "4X", "-8", "1.5M", "M"])
def test_parse_size_rejects_garbage_naming_the_argument(text):
    with pytest.raises(ValueError, match="-b"):
        sweep.parse_size(text, "-b")


@pytest.mark.timeout(10)
def test_sizes_go_from_min_to_max_by_factor():
    assert sweep.sizes(4, 64 << 20, 4) == [4 * 4 ** k for k in range(13)]
    assert sweep.sizes(8, 8, 2) == [8]
    for bad in ((0, 8, 2), (16, 8, 2), (8, 64, 1)):
        with pytest.raises(ValueError):
            sweep.sizes(*bad)


@pytest.mark.timeout(10)
def test_iterations_adapt_to_size_and_obey_overrides():
    warm_small, small = sweep.iterations(8)
    warm_large, large = sweep.iterations(64 << 20)
    assert small == sweep.MAX_ITERS and large == sweep.MIN_ITERS and warm_small > warm_large >= 1
    assert sweep.iterations(8, iters=7, warmup=0) == (0, 7)


@pytest.mark.timeout(10)
def test_bus_factors_are_the_nccl_tests_ones():
    assert timing.bus_factor("all_reduce", 4) == 1.5
    assert timing.bus_factor("reduce_scatter", 4) == timing.bus_factor("all_gather", 4) == 0.75
    assert timing.bus_factor("broadcast", 4) == timing.bus_factor("reduce", 4) == 1.0
    assert timing.bandwidths("all_reduce", 2_000_000_000, 2, 2.0) == (1.0, 1.0)


@pytest.mark.timeout(10)
def test_each_timed_iteration_starts_after_a_barrier():
    events, now = [], [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    times = timing.time_iterations(lambda: events.append("run"), lambda: events.append("barrier"), 2, 3, clock)
    assert events == ["barrier", "run"] * 5
    assert times == [1.0, 1.0, 1.0]
    assert timing.across_ranks([3.0, 1.0, 2.0]) == timing.Timing(1.0, 2.0, 3.0)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("dtype", sweep.DTYPES)
@pytest.mark.parametrize("op", sweep.OPS)
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_integer_check_data_reduces_exactly_in_its_dtype(dtype, op, world):
    count = 1000
    inputs = [check.integer_input(op, dtype, count, r, world) for r in range(world)]
    want = check.reference("all_reduce", op, lambda r: inputs[r], count, 0, world, 0, np.int64)
    info = np.iinfo(np.int8) if dtype == "int8" else np.iinfo(np.uint8) if dtype == "uint8" else None
    if info is not None:  # the exact result fits the dtype: no wrap-around to hide a bug
        assert want.min() >= info.min and want.max() <= info.max
    got = want.astype(sweep.numpy_dtype(dtype))
    assert check.count_wrong(got, want, dtype) == 0
    if op in ("sum", "avg", "prod") and world > 1:  # a rank that returned its own input is caught
        assert check.count_wrong(inputs[0], want, dtype) > 0
    got[3] = got[3] + 1
    assert check.count_wrong(got, want, dtype) == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_random_check_data_is_reproducible_and_its_reference_exact(dtype):
    a = check.random_input("sum", dtype, 500, 1, seed=7)
    assert np.array_equal(a.astype(np.float64), check.random_input("sum", dtype, 500, 1, seed=7).astype(np.float64))
    inputs = [check.random_input("sum", dtype, 500, r, seed=7) for r in range(4)]
    ref = check.reference("all_reduce", "sum", lambda r: inputs[r], 500, 0, 4, 0, np.longdouble)
    import math
    fsum = np.array([math.fsum(float(x[i]) for x in inputs) for i in range(500)])
    assert np.array_equal(ref.astype(np.float64), fsum)
    assert check.max_rel_err(ref.astype(np.float64), ref) < 1e-15
    naive = ((inputs[0] + inputs[1]) + inputs[2]) + inputs[3]  # in the dtype: rounds somewhere
    assert check.max_rel_err(naive, ref) > 0


@pytest.mark.timeout(10)
def test_references_of_every_collective():
    world, count = 3, 6
    inputs = [np.arange(count, dtype=np.int64) + 10 * r for r in range(world)]
    total = sum(inputs)

    def ref(coll, rank):
        return check.reference(coll, "sum", lambda r: inputs[r], count, rank, world, 1, np.int64)

    assert np.array_equal(ref("all_reduce", 2), total)
    assert np.array_equal(ref("reduce_scatter", 2), total[4:6])
    assert np.array_equal(ref("all_gather", 0), np.concatenate(inputs))
    assert np.array_equal(ref("broadcast", 0), inputs[1])
    assert ref("reduce", 0) is None and np.array_equal(ref("reduce", 1), total)
    # all_to_all: rank 1 holds block 1 (elements 2..3) of every rank's input, in rank order
    assert np.array_equal(ref("all_to_all", 1), np.concatenate([inputs[r][2:4] for r in range(world)]))


# -- the CLI on 2 real ranks ------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_table_json_and_csv_of_a_small_sweep(tmp_path):
    """Also: with no --backend the bench measures what pycoll.init() runs (cpu: shared memory on one host), and
    the table's header says so."""
    out_json, out_csv = tmp_path / "rows.json", tmp_path / "rows.csv"
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    proc = run_cli("-n", "2", *SIZES, *FAST, "--json", str(out_json), "--csv", str(out_csv), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# all_reduce  backend cpu over shm  2 ranks  float32  algorithm auto  "), \
        proc.stdout
    for column in ("size(B)", "count", "type", "redop", "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                   "#wrong", "max_rel_err"):
        assert column in proc.stdout, proc.stdout
    rows = json.loads(out_json.read_text())
    assert [(r["bytes"], r["in_place"]) for r in rows] == [(b, f) for b in (8, 64, 512, 4096) for f in (False, True)]
    for r in rows:
        assert set(r) >= {"bytes", "count", "dtype", "op", "algorithm", "accuracy", "backend", "world", "time_us",
                          "algbw", "busbw", "wrong", "max_rel_err"}
        assert r["wrong"] == 0 and r["world"] == 2 and r["dtype"] == "float32" and r["op"] == "sum"
        assert r["backend"] == "cpu" and r["transport"] == "shm"
        assert r["count"] * 4 == r["bytes"] and r["time_us"] > 0 and r["busbw"] == pytest.approx(r["algbw"])
    assert len(table_lines(proc.stdout)) == 4
    assert "# #wrong: 0 OK" in proc.stdout
    # Progress: plain lines drawn by the launching process itself, not rank 0's prefixed output.
    assert "[7/8] float32 sum auto fast 4096 B: " in proc.stderr, proc.stderr
    assert "[8/8] float32 sum auto fast 4096 B in place: " in proc.stderr, proc.stderr
    assert "[rank 0] [" not in proc.stderr, proc.stderr
    assert out_csv.read_text().splitlines()[0].startswith("bytes,count,dtype,op,algorithm")


@pytest.mark.timeout(10)
def test_the_default_backend_follows_pycoll_backend(monkeypatch):
    """PYCOLL_BACKEND, which init() reads, picks the bench's backend too; --backend wins over both."""
    parser = bench_cli.argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)
    assert bench_cli._config(parser.parse_args([]))["backends"] == ["cpu"]
    monkeypatch.setenv("PYCOLL_BACKEND", "tcp")
    assert bench_cli._config(parser.parse_args([]))["backends"] == ["tcp"]
    assert bench_cli._config(parser.parse_args(["--backend", "shm"]))["backends"] == ["shm"]
    assert "default: what pycoll.init() uses" in " ".join(parser.format_help().split())


def _row(backend, transport, nbytes, time_us, algorithm="auto", picked="ring", dtype="float32"):
    row = {"collective": "all_reduce", "bytes": nbytes, "count": nbytes // 4, "dtype": dtype, "op": "sum",
           "algorithm": algorithm, "picked": picked, "accuracy": "fast", "backend": backend, "world": 2,
           "time_us": time_us, "algbw": 1.0, "busbw": 1.0, "wrong": 0, "max_rel_err": 0.0}
    if transport is not None:
        row["transport"] = transport
    return row


@pytest.mark.timeout(10)
def test_headers_and_ratio_table_say_which_backend_was_measured():
    from pycoll.tools.bench import report

    rows = [_row("cpu", "shm", 64, 2.0), _row("tcp", "tcp", 64, 5.0), _row("cpu", "shm", 4096, 9.0),
            _row("tcp", "tcp", 4096, 8.0, algorithm="ring")]
    text = report.table(rows[:2])
    assert "# all_reduce  backend cpu over shm  2 ranks  float32  algorithm auto  " in text
    assert "# all_reduce  backend tcp  2 ranks  float32  algorithm auto  " in text
    ratios = report.ratio_table(rows, [_row("gloo", None, 64, 4.0), _row("gloo", None, 4096, 16.0)])
    assert "(backend cpu over shm, tcp)" in ratios
    lines = [ln.split() for ln in ratios.splitlines() if not ln.startswith("#")]
    assert [ln[4:9] for ln in lines] == [["2.0", "cpu", "over", "shm", "ring"], ["8.0", "tcp", "ring", "16.0", "2.00"]]
    assert ratios.splitlines()[1].split()[4:7] == ["pycoll(us)", "backend", "picked"]


@pytest.mark.timeout(30)
def test_the_plot_has_a_title_with_world_size_dtype_and_backends(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from pycoll.tools.bench import plot

    rows = [_row("cpu", "shm", 64, 2.0), _row("cpu", "shm", 4096, 9.0), _row("gloo", None, 64, 4.0)]
    want = "all_reduce: 2 ranks, float32; backend cpu over shm, gloo"
    assert plot.title(rows) == want
    titles = []
    real = matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle",
                        lambda fig, t, **kw: titles.append(t) or real(fig, t, **kw))
    plot.plot(rows, str(tmp_path / "bench.png"))
    assert titles == [want]


@pytest.mark.timeout(90)
def test_several_backends_run_one_after_the_other_on_every_rank(tmp_path):
    """Every rank inits each backend in turn (a rank without rows must not leave after the first)."""
    out_json = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "8", "-e", "64", *FAST, "--backend", "shm,tcp", "--json", str(out_json),
                   timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted({r["backend"] for r in json.loads(out_json.read_text())}) == ["shm", "tcp"]


@pytest.mark.timeout(120)
def test_sweep_covers_every_dtype_op_algorithm_and_accuracy(tmp_path):
    out = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "4", "-e", "64", "-f", "4", *FAST, "-d", "int8,float64", "-o", "sum,max",
                   "--algorithm", "all", "--accuracy", "fast,compensated", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    algorithms = {r["algorithm"] for r in rows}
    assert "auto" in algorithms and len(algorithms) > 1
    combos = {(r["dtype"], r["op"], r["algorithm"], r["accuracy"]) for r in rows}
    assert len(combos) == 2 * 2 * len(algorithms) * 2
    assert all(r["wrong"] == 0 for r in rows)
    assert {r["bytes"] for r in rows if r["dtype"] == "float64"} == {16, 64}  # 4 B holds no float64
    assert {r["bytes"] for r in rows if r["dtype"] == "int8"} == {4, 16, 64}


@pytest.mark.timeout(90)
def test_the_former_algorithm_name_shm_runs_and_is_recorded_as_shm_slots(tmp_path):
    """The bench's rows name the algorithm by its current name, whichever the command line gave, and a
    former name gets a note on stderr naming the current one."""
    out = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "--backend", "shm", "-b", "64", "-e", "64", *FAST, "--algorithm", "shm,ring",
                   "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "--algorithm shm is deprecated" in proc.stderr and "use shm_slots" in proc.stderr, proc.stderr
    rows = json.loads(out.read_text())
    assert {(r["algorithm"], r["picked"]) for r in rows} == {("shm_slots", "shm_slots"), ("ring", "ring")}, rows
    assert {r["backend"] for r in rows} == {"shm"} and all(r["wrong"] == 0 for r in rows)
    assert "algorithm shm_slots, ring" in proc.stdout, proc.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"])
def test_other_collectives_are_checked_too(tmp_path, collective):
    out = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "64", "-e", "512", "-f", "8", *FAST, "--collective", collective,
                   "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["bytes"], r["in_place"]) for r in rows] == [(b, f) for b in (64, 512) for f in sweep.FORMS[collective]]
    assert all(r["wrong"] == 0 for r in rows)
    factor = timing.bus_factor(collective, 2)
    assert all(r["busbw"] == pytest.approx(r["algbw"] * factor) for r in rows)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend, picked", [("shm", "shm_slots"), ("tcp", "dissemination")])
@pytest.mark.parametrize("world", [1, 2])
def test_a_barrier_sweep_is_one_row_of_0_bytes(tmp_path, backend, picked, world):
    """Sizes do not apply to the barrier: one row whatever -b/-e/-f say (with a note where they were given),
    timed as the others, its JSON row with every key a row has."""
    out_json = tmp_path / "rows.json"
    sizes = SIZES if world == 2 else []
    proc = run_cli("-n", str(world), "--backend", backend, "--collective", "barrier", *sizes, *FAST, "-d", "all",
                   "--json", str(out_json))
    assert proc.returncode == 0, proc.stderr
    assert ("# -b, -e, -f: barrier moves no data; its sweep is one row of 0 bytes" in proc.stdout) == bool(sizes)
    assert f"# barrier  backend {backend}  {world} rank{'s' if world > 1 else ''}  algorithm auto  " in proc.stdout
    [line] = table_lines(proc.stdout)
    cells = line.split()
    assert cells[:7] == ["0", "0", "-", "-", "auto", picked, "fast"] and float(cells[7]) > 0, line
    assert float(cells[7]) <= float(cells[8]) <= float(cells[9]), line  # time <= p50 <= p99
    assert cells[10:13] == ["0.000", "0.000", "0"], line
    [row] = json.loads(out_json.read_text())
    assert set(row) == set(report.JSON_KEYS + report.EXTRA_KEYS)
    assert (row["collective"], row["bytes"], row["count"], row["picked"], row["world"], row["in_place"]) == \
        ("barrier", 0, 0, picked, world, None)
    assert row["time_us"] > 0 and row["algbw"] == row["busbw"] == 0 and row["wrong"] == 0
    from pycoll.tools.bench import plot

    assert plot.title([row]) == f"barrier: {world} rank{'s' if world > 1 else ''}; backend {backend}"


@pytest.mark.timeout(10)
def test_a_barrier_is_one_case_whatever_the_sizes_dtypes_and_ops():
    got = sweep.cases(collective="barrier", dtypes=["int8", "float32"], ops=["sum", "max"], algorithms=["ring"],
                      accuracies=["fast", "compensated"], size_list=[8, 64])
    assert got == [sweep.Case("barrier", "-", "-", "auto", "fast", 0)]
    assert timing.bandwidths("barrier", 0, 2, 1e-6) == (0.0, 0.0)
    # A peer runs it even where it has none of the requested dtypes or ops.
    config = {"collective": "barrier", "dtypes": ["bfloat16"], "ops": ["avg"]}
    got, why = peers.peer_config(peers.PEERS["mpi"], config)
    assert why is None and got["collective"] == "barrier"


@pytest.mark.peers
@pytest.mark.timeout(180)
def test_compare_times_the_barrier_on_the_peers(tmp_path):
    names = [n for n in ("gloo", "mpi") if not peers.PEERS[n].unavailable()]
    if not names:
        pytest.skip("neither torch nor Open MPI's mpirun with mpi4py here")
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    out_json = tmp_path / "rows.json"
    proc = run_cli("-n", "2", *FAST, "--collective", "barrier", "--compare", ",".join(names), "--json",
                   str(out_json), env=env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out_json.read_text())
    assert sorted((r["backend"], r["collective"], r["bytes"], r["wrong"]) for r in rows) == \
        sorted([("cpu", "barrier", 0, 0)] + [(n, "barrier", 0, 0) for n in names])
    assert all(r["time_us"] > 0 for r in rows)
    [ratio] = [ln.split() for ln in proc.stdout.split("# time ratio")[1].splitlines()[2:]]
    assert ratio[:4] == ["2", "-", "-", "0"] and ratio[5:8] == ["cpu", "over", "shm"], ratio
    assert len(ratio) == 9 + 2 * len(names) and "-" not in ratio[9:], ratio  # every peer's time and ratio


@pytest.mark.timeout(90)
def test_compare_skips_a_missing_peer_with_its_reason(monkeypatch, capfd):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "mpi4py") else real_find_spec(name, *a))
    status = bench_cli.main(["-n", "2", "-b", "8", "-e", "8", *FAST, "--compare", "gloo,mpi"])
    out = capfd.readouterr().out
    assert status == 0
    assert "--compare gloo: skipped: torch is not installed" in out, out
    assert "--compare mpi: skipped:" in out and "install" in out, out


@pytest.mark.peers
@pytest.mark.timeout(120)
def test_compare_with_gloo_names_the_pycoll_backend_of_each_ratio(tmp_path):
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    out_json = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "64", "-e", "64", *FAST, "--compare", "gloo", "--json", str(out_json), env=env,
                   timeout=110)
    assert proc.returncode == 0, proc.stderr
    assert "# all_reduce  backend gloo  2 ranks  float32  algorithm default  " in proc.stdout, proc.stdout
    assert "(backend cpu over shm)" in proc.stdout, proc.stdout
    [ratio] = [ln.split() for ln in proc.stdout.split("# time ratio")[1].splitlines()[2:]]
    assert ratio[:4] == ["2", "float32", "sum", "64"] and ratio[5:8] == ["cpu", "over", "shm"], ratio
    rows = json.loads(out_json.read_text())
    assert {(r["backend"], r.get("transport")) for r in rows} == {("cpu", "shm"), ("gloo", None)}


@pytest.mark.timeout(10)
def test_peers_run_only_what_they_support():
    config = {"collective": "all_reduce", "dtypes": ["float16", "float32"], "ops": ["avg", "sum"]}
    got, why = peers.peer_config(peers.PEERS["mpi"], config)
    assert why is None and got["dtypes"] == ["float32"] and got["ops"] == ["sum"]
    assert peers.peer_config(peers.PEERS["mpi"], dict(config, dtypes=["bfloat16"]))[0] is None
    got, why = peers.peer_config(peers.PEERS["gloo"], dict(config, collective="broadcast"))
    assert why is None and got["collective"] == "broadcast"
    assert "--compare runs all_reduce" in peers.peer_config(peers.PEERS["mpi"], dict(config, collective="gather"))[1]


@pytest.mark.timeout(10)
def test_mpi_prefix_sets_where_each_mpi_lives(monkeypatch, tmp_path):
    for var in peers.PREFIX_ENV.values():
        monkeypatch.setenv(var, "")  # restored after the test, which set_prefixes changes
    peers.set_prefixes(f"impi={tmp_path / 'i'}, mpich={tmp_path / 'm'}")
    assert os.environ["PYCOLL_BENCH_IMPI"] == str(tmp_path / "i")
    assert os.environ["PYCOLL_BENCH_MPICH"] == str(tmp_path / "m")
    for bad in ("openmpi=/x", "impi", "impi="):
        with pytest.raises(ValueError, match="--mpi-prefix"):
            peers.set_prefixes(bad)


@pytest.mark.timeout(10)
def test_a_missing_packaged_mpi_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("PYCOLL_BENCH_MPICH", raising=False)
    why = peers.PEERS["mpich"].unavailable()
    assert "PYCOLL_BENCH_MPICH is not set" in why and "pip install mpich mpi4py" in why, why
    monkeypatch.setenv("PYCOLL_BENCH_IMPI", str(tmp_path))  # an empty environment: no mpiexec there
    why = peers.PEERS["impi"].unavailable()
    assert "mpiexec is missing" in why and "pip install impi-rt mpi4py" in why, why


@pytest.mark.timeout(60)
@pytest.mark.parametrize("peer, env, hint", [("impi", "PYCOLL_BENCH_IMPI", "pip install impi-rt mpi4py"),
                                             ("oneccl", oneccl.ENV, "pip install oneccl")])
def test_compare_skips_a_peer_not_installed(peer, env, hint, monkeypatch, tmp_path, capfd):
    monkeypatch.setenv(env, "")  # restored after the test, which --mpi-prefix changes
    status = bench_cli.main(["-n", "2", "-b", "8", "-e", "8", *FAST, "--compare", peer,
                             "--mpi-prefix", f"{peer}={tmp_path}"])
    out = capfd.readouterr().out
    assert status == 0
    assert f"--compare {peer}: skipped:" in out and hint in out, out


@pytest.mark.timeout(10)
def test_mpi_prefix_without_compare_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("PYCOLL_BENCH_IMPI", "")
    assert bench_cli.main(["-n", "2", "--mpi-prefix", "impi=/x"]) == 2
    assert "--mpi-prefix" in capsys.readouterr().err


@pytest.mark.peers
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["impi", "mpich"])
@pytest.mark.parametrize("collective", ["all_reduce", "all_to_all", "barrier"])
def test_compare_with_a_packaged_mpi_gives_its_rows(name, collective, tmp_path):
    if peers.PEERS[name].unavailable():
        pytest.skip(peers.PEERS[name].unavailable())
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    out_json = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "64", "-e", "256", "-f", "4", *FAST, "--collective", collective,
                   "--compare", name, "--json", str(out_json), env=env, timeout=110)
    assert proc.returncode == 0, proc.stderr
    assert "# time ratio" in proc.stdout, proc.stdout
    rows = [r for r in json.loads(out_json.read_text()) if r["backend"] == name]
    sizes = [0] if collective == "barrier" else [64, 256]  # a barrier's sweep is one row of 0 bytes
    # One row per size and form: the peer runs each form the collective has (in place, out of place), as pycoll.
    want = [(collective, b, form, 0) for b in sizes for form in sweep.FORMS[collective]]
    got = [(r["collective"], r["bytes"], r["in_place"], r["wrong"]) for r in rows]
    assert sorted(got, key=str) == sorted(want, key=str)


@pytest.mark.peers
@pytest.mark.timeout(120)
@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"])
def test_compare_runs_every_collective_on_the_peers(collective, tmp_path):
    names = [n for n in ("gloo", "mpi") if not peers.PEERS[n].unavailable()]
    if not names:
        pytest.skip("neither torch nor Open MPI's mpirun with mpi4py here")
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    out_json = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "256", "-e", "256", *FAST, "--collective", collective, "--compare",
                   ",".join(names), "--json", str(out_json), env=env, timeout=110)
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(out_json.read_text()) if r["backend"] != "cpu"]
    # Each peer gives a correct row for each form it runs (a peer may run only some of the collective's forms).
    assert {r["backend"] for r in rows} == set(names), rows
    assert all((r["collective"], r["wrong"]) == (collective, 0) for r in rows), rows
    forms = [(r["backend"], r["in_place"]) for r in rows]
    assert len(forms) == len(set(forms)) and {f for _, f in forms} <= set(sweep.FORMS[collective]), rows


@pytest.mark.timeout(90)
def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "bench.png"
    proc = run_cli("-n", "2", *SIZES, *FAST, "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(10)
def test_plot_without_matplotlib_is_a_clear_error_before_any_run(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a))
    assert bench_cli.main(["-n", "2", "--plot", "x.png"]) == 2
    assert "pip install" in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, names", [
    (["-b", "4X"], "-b"), (["-b", "1K", "-e", "8"], "-e"), (["-f", "1"], "-f"), (["-d", "float33"], "-d"),
    (["-o", "xor"], "-o"), (["--accuracy", "sloppy"], "--accuracy"), (["-n", "0"], "-n"),
    (["--iters", "0"], "--iters"), (["--collective", "gossip"], "--collective"),
    (["--collective", "gather"], "--collective"),
    (["-n", "2", "--compare", "nccl"], "--compare"), (["--compare", "gloo"], "--compare"),
    (["--algorithm", "all,ring"], "--algorithm"),
])
def test_bad_arguments_exit_non_zero_naming_the_argument(args, names):
    proc = run_cli(*args, timeout=30)
    assert proc.returncode != 0
    assert names in proc.stderr, proc.stderr


@pytest.mark.timeout(90)
def test_unknown_algorithm_fails_the_run():
    proc = run_cli("-n", "2", "-b", "8", "-e", "8", *FAST, "--algorithm", "telepathy")
    assert proc.returncode != 0
    assert "telepathy" in proc.stderr, proc.stderr


# -- what "auto" picked ---------------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_auto_rows_show_the_algorithm_the_cost_model_picked(tmp_path):
    out = tmp_path / "rows.json"
    env = dict(os.environ, PYCOLL_TUNE_FILE=str(tmp_path / "no-model.json"))  # the default cost model
    env.pop("PYCOLL_ALGORITHM", None)
    # 2 ranks over TCP: recursive doubling for 1 KiB, halving-doubling for 256 KiB (the default model), so
    # picked follows the size.
    proc = run_cli("-n", "2", "--backend", "tcp", "-b", "1K", "-e", "256K", "-f", "256", *FAST,
                   "--algorithm", "auto,ring", "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    names = {v: k for k, v in ALGORITHMS.items()}
    auto = {r["bytes"]: r["picked"] for r in rows if r["algorithm"] == "auto"}
    assert auto == {n: names[_sim.choose_all_reduce(2, n)] for n in (1 << 10, 256 << 10)}
    assert len(set(auto.values())) == 2, auto
    assert all(r["picked"] == "ring" for r in rows if r["algorithm"] == "ring")
    header = next(ln for ln in proc.stdout.splitlines() if "size(B)" in ln).lstrip("#").split()
    column = header.index("picked")
    assert column == header.index("algorithm") + 1
    shown = [(int(c[0]), c[column - 1], c[column]) for c in map(str.split, table_lines(proc.stdout))]
    assert shown == [(n, "auto", auto[n]) for n in sorted(auto)] + [(n, "ring", "ring") for n in sorted(auto)]


@pytest.mark.timeout(90)
def test_picked_follows_pycoll_algorithm(tmp_path):
    out = tmp_path / "rows.json"
    proc = run_cli("-n", "2", "-b", "64", "-e", "64", *FAST, "--out-of-place", "--json", str(out),
                   env=dict(os.environ, PYCOLL_ALGORITHM="mesh"))
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(out.read_text())
    assert (row["algorithm"], row["picked"]) == ("auto", "mesh")


# -- under a launcher -----------------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_bench_as_the_ranks_of_pycoll_run(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "pycoll", "run", "-n", "2", "-m", "pycoll", "bench",
                           "-b", "8", "-e", "64", "-f", "8", *FAST, "--json", str(out)],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["bytes"], r["world"], r["wrong"]) for r in rows] == [(8, 2, 0), (8, 2, 0), (64, 2, 0), (64, 2, 0)]
    lines = proc.stdout.splitlines()
    assert lines and all(ln.startswith("[rank 0] ") for ln in lines), proc.stdout  # rank 0 alone prints
    assert len(table_lines("\n".join(ln[len("[rank 0] "):] for ln in lines))) == 2


# -- progress -------------------------------------------------------------------------------------------------
class _Recorder(progress.Progress):
    def __init__(self):
        super().__init__(None)
        self.events = []

    def start(self, total, title):
        self.events.append(("start", total, title))

    def advance(self, what):
        self.events.append(("advance", what))

    def finish(self):
        self.events.append(("finish",))


@pytest.mark.timeout(10)
def test_progress_file_events_are_replayed_by_follow(tmp_path):
    path, shown = tmp_path / "progress", _Recorder()
    with progress.follow(path, shown):
        writer = progress.ProgressFile(path)
        thread = threading.Thread(target=lambda: (writer.start(2, "tcp x2"), writer.advance("8 B\tok"),
                                                  writer.advance("64 B"), writer.finish()))
        thread.start()
        thread.join()
    assert shown.events == [("start", 2, "tcp x2"), ("advance", "8 B ok"), ("advance", "64 B"), ("finish",)]


@pytest.mark.timeout(10)
def test_follow_takes_down_a_display_the_ranks_left_running(tmp_path):
    path, shown = tmp_path / "progress", _Recorder()
    with progress.follow(path, shown):
        progress.ProgressFile(path).start(5, "tcp x2")
    assert shown.events == [("start", 5, "tcp x2"), ("finish",)]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.timeout(10)
def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere():
    plain = io.StringIO()
    shown = progress.Progress.for_terminal(plain)
    shown.start(12, "tcp x2")
    shown.advance("float32 sum ring fast 8 B: 20.0 us")
    shown.finish()
    assert plain.getvalue() == "# tcp x2: 12 cases\n[ 1/12] float32 sum ring fast 8 B: 20.0 us\n"
    if importlib.util.find_spec("rich") is None and importlib.util.find_spec("tqdm") is None:
        pytest.skip("neither rich nor tqdm is installed: a terminal gets plain lines too")
    bar = progress.Progress.for_terminal(_Terminal())
    assert type(bar) is not progress.Progress
    bar.start(2, "tcp x2")
    bar.advance("8 B")
    bar.finish()


# -- the accuracy report --------------------------------------------------------------------------------------
REPORT_KEYS = {"transport", "world", "algorithm", "accuracy", "dtype", "data", "count", "max_ulp", "mean_ulp",
               "identical"}


@pytest.mark.timeout(60)
def test_accuracy_report_over_simulated_ranks(tmp_path):
    out = tmp_path / "ulps.json"
    proc = run_cli("--accuracy-report", "--worlds", "2,5", "-d", "float16,bfloat16,float32", "--count", "40",
                   "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert all(set(r) == REPORT_KEYS and r["transport"] == "sim" and r["count"] == 40 for r in rows)
    # Defaults: every algorithm but auto and those only a transport of its own runs (simulated ranks have no
    # shared memory), every mode (fast, compensated, reproducible), every data set.
    combos = {(r["world"], r["algorithm"], r["accuracy"], r["dtype"], r["data"]) for r in rows}
    portable = [a for a in COLL_ALGORITHMS["all_reduce"] if a not in NATIVE_ONLY]
    assert len(combos) == len(rows) == 2 * len(portable) * 3 * 3 * 3
    assert all(r["identical"] for r in rows)
    assert max(r["max_ulp"] for r in rows if r["accuracy"] in ("compensated", "reproducible")) <= 1
    # Crafted data: fast ring drops every other rank's 1.0, an error of (N-1)/2 ulps -- the report measures.
    crafted = {(r["world"], r["dtype"]): r["max_ulp"] for r in rows
               if (r["algorithm"], r["accuracy"], r["data"]) == ("ring", "fast", "crafted")}
    assert crafted == {(w, d): (w - 1) // 2 for w in (2, 5) for d in ("float16", "bfloat16", "float32")}
    assert "| transport | world | algorithm | accuracy | dtype | data | count | max ulp | mean ulp |" in proc.stdout
    assert len([ln for ln in proc.stdout.splitlines() if ln.startswith("| sim |")]) == len(rows)
    assert "[6/6] 5 ranks, float32" in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
def test_accuracy_report_over_real_processes(tmp_path):
    out = tmp_path / "ulps.csv"
    proc = run_cli("--accuracy-report", "--processes", "--worlds", "2", "-d", "float32", "--data", "mixed",
                   "--algorithm", "ring,auto", "--accuracy", "kahan", "--count", "32", "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "transport,world,algorithm,accuracy,dtype,data,count,max_ulp,mean_ulp,identical"
    assert [ln.split(",")[:6] for ln in lines[1:]] == [["tcp", "2", a, "compensated", "float32", "mixed"]
                                                      for a in ("ring", "auto")]
    assert "| tcp | 2 | ring | compensated | float32 | mixed | 32 |" in proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, names", [
    (["--accuracy-report", "-b", "8", "-n", "2"], "-n, -b"), (["--accuracy-report", "--compare", "gloo"], "--compare"),
    (["--accuracy-report", "-d", "int8"], "-d"), (["--accuracy-report", "--worlds", "2,x"], "--worlds"),
    (["--accuracy-report", "--worlds", "0"], "--worlds"), (["--accuracy-report", "--data", "noise"], "--data"),
    (["--accuracy-report", "--algorithm", "telepathy"], "--algorithm"),
    (["--accuracy-report", "--count", "0"], "--count"), (["--worlds", "2"], "--worlds"),
    (["-n", "2", "--processes"], "--processes"),
])
def test_accuracy_report_bad_arguments_name_the_argument(args, names):
    proc = run_cli(*args, timeout=30)
    assert proc.returncode == 2
    assert names in proc.stderr, proc.stderr


@pytest.mark.timeout(30)
def test_help_lists_the_modes_and_how_to_launch():
    proc = subprocess.run([sys.executable, "-m", "pycoll", "bench", "--help"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0
    for text in ("--accuracy-report", "--worlds", "--processes", "--compare", "picked",
                 "pycoll run -n 2 -m pycoll bench", "(default 32M)"):
        assert text in proc.stdout, text
    assert "barrier moves no data, so its sweep is one row" in " ".join(proc.stdout.split())


def test_a_peers_own_algorithm_label_survives_the_sweeps_filter():
    """Peers label their one schedule "default", which is not pycoll's: filtering the sweep's names by the
    algorithm table must keep it (gloo's comparison ran 0 cases when it did not)."""
    from pycoll.tools.bench import sweep

    kept = sweep.cases(collective="all_reduce", dtypes=["float32"], ops=["sum"], algorithms=["default"],
                       accuracies=["fast"], size_list=[64], in_place=[False])
    assert [c.algorithm for c in kept] == ["default"]
    dropped = sweep.cases(collective="reduce_scatter", dtypes=["float32"], ops=["sum"],
                          algorithms=["recursive_doubling", "ring"], accuracies=["fast"], size_list=[64],
                          in_place=[False])
    assert [c.algorithm for c in dropped] == ["ring"]
