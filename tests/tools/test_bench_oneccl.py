"""`pycoll bench --compare oneccl`: what it says when oneCCL is not installed or its shim does not compile, its
arguments, the shim's tables against the Python side's, and (where PYCOLL_BENCH_ONECCL names an environment
holding oneCCL) real runs of every collective it times."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from pycoll.cli import bench as bench_cli
from pycoll.tools.bench import oneccl, peers, sweep

FAST = ["--iters", "3", "--warmup", "1"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache for the compiled shim."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_environment(path, header):
    """An environment with oneCCL's files where the peer looks for them; header is its ccl.hpp."""
    (path / "include" / "oneapi").mkdir(parents=True)
    (path / "include" / "oneapi" / "ccl.hpp").write_text(header)
    (path / "lib").mkdir()
    for name in ("libccl.so", "libccl.so.2"):
        (path / "lib" / name).write_bytes(b"")
    return path


@pytest.mark.timeout(10)
def test_a_missing_oneccl_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv(oneccl.ENV, raising=False)
    why = peers.PEERS["oneccl"].unavailable()
    assert f"{oneccl.ENV} is not set" in why and "pip install oneccl" in why, why
    monkeypatch.setenv(oneccl.ENV, str(tmp_path))  # an empty environment
    why = peers.PEERS["oneccl"].unavailable()
    assert "ccl.hpp is missing: oneccl-devel is not installed" in why and "pip install oneccl" in why, why
    fake_environment(tmp_path / "env", "")
    (tmp_path / "env" / "lib" / "libccl.so.2").unlink()  # what oneccl-cpu's wheel lacks
    monkeypatch.setenv(oneccl.ENV, str(tmp_path / "env"))
    assert "libccl.so.2 is missing: oneccl is not installed" in peers.PEERS["oneccl"].unavailable()


@pytest.mark.timeout(10)
def test_no_compiler_is_a_reason_to_skip(monkeypatch, tmp_path, cache):
    monkeypatch.setenv(oneccl.ENV, str(fake_environment(tmp_path / "env", "")))
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert "no C++ compiler (no-such-compiler-here)" in peers.PEERS["oneccl"].unavailable()


@pytest.mark.timeout(60)
def test_a_shim_that_does_not_compile_gives_the_compilers_message(monkeypatch, tmp_path, cache):
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(oneccl.ENV, str(fake_environment(tmp_path / "env", "#error not the real oneCCL\n")))
    why = peers.PEERS["oneccl"].unavailable()
    assert "compiling oneccl_shim.cpp failed" in why and "not the real oneCCL" in why, why
    assert not any(cache.rglob("*.so"))  # nothing half-built is left to be taken for the shim


@pytest.mark.timeout(10)
def test_mpi_prefix_names_oneccls_environment(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(oneccl.ENV, "")  # restored after the test, which set_prefixes changes
    peers.set_prefixes(f"oneccl={tmp_path}")
    assert os.environ[oneccl.ENV] == str(tmp_path)
    with pytest.raises(ValueError, match="oneccl"):
        peers.set_prefixes("ccl=/x")
    assert bench_cli.main(["-n", "2", "--mpi-prefix", "oneccl=/x"]) == 2
    assert "only with --compare impi, mpich or oneccl" in capsys.readouterr().err


@pytest.mark.timeout(10)
def test_the_shims_tables_are_the_python_sides():
    """The shim takes dtypes and ops as indices into its tables: they must list what DTYPES and OPS list, in
    the same order."""
    source = open(oneccl.SOURCE).read()
    dtypes = re.search(r"kDtypes\[\] = \{(.*?)\};", source, re.S).group(1)
    ops = re.search(r"kOps\[\] = \{(.*?)\};", source, re.S).group(1)
    assert tuple(re.findall(r"ccl::datatype::(\w+)", dtypes)) == oneccl.DTYPES
    assert tuple(re.findall(r"ccl::reduction::(\w+)", ops)) == oneccl.OPS
    assert peers.PEERS["oneccl"].dtypes == oneccl.DTYPES


@pytest.mark.timeout(10)
def test_a_rank_not_told_the_store_address_gives_up(tmp_path):
    with pytest.raises(RuntimeError, match="rank 0 wrote no store address"):
        oneccl._exchange_address(None, 1, str(tmp_path), timeout=0.05)


def _available():
    why = peers.PEERS["oneccl"].unavailable()
    if why:
        pytest.skip(why)


@pytest.mark.peers
@pytest.mark.timeout(180)
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                        "all_to_all"])
def test_compare_with_oneccl_gives_its_rows(collective, tmp_path, monkeypatch):
    _available()
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYCOLL_BACKEND"}
    out_json = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "pycoll", "bench", "-n", "2", "-b", "64", "-e", "256", "-f", "4",
                           "-d", "float32,int32", *FAST, "--collective", collective, "--compare", "oneccl",
                           "--json", str(out_json)], capture_output=True, text=True, timeout=170, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "# time ratio" in proc.stdout, proc.stdout
    rows = [r for r in json.loads(out_json.read_text()) if r["backend"] == "oneccl"]
    # One row per dtype, size and form oneCCL runs: every size and dtype in the collective's first form (out of
    # place where it has one), correct rows only in forms the collective has.
    first = sweep.FORMS[collective][0]
    got = sorted(((r["dtype"], r["bytes"], r["wrong"]) for r in rows if r["in_place"] == first))
    assert got == [("float32", 64, 0), ("float32", 256, 0), ("int32", 64, 0), ("int32", 256, 0)], rows
    assert all(r["wrong"] == 0 and r["in_place"] in sweep.FORMS[collective] for r in rows), rows


@pytest.mark.timeout(120)
def test_the_shim_is_compiled_once(monkeypatch):
    _available()
    prefix = os.environ[oneccl.ENV]
    path = oneccl.build(prefix)
    before = os.stat(path).st_mtime_ns
    assert oneccl.build(prefix) == path and os.stat(path).st_mtime_ns == before
