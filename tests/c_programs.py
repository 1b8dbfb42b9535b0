"""C programs against the installed pycoll: a test program of tests/c/ built against its headers and library
(pycoll.get_include, get_library), warnings as errors, and the C example a user copies (examples/c_allreduce.c)
built with `pycoll config` and run as ranks; skips the test where there is no C compiler."""

import os
import shutil
import subprocess
import sys

import pytest
from repo_paths import ROOT

import pycoll

C_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c")
EXAMPLE = os.path.join(ROOT, "examples", "c_allreduce.c")
CC = shutil.which("cc") or shutil.which("gcc")


def build(tmp_path_factory, name):
    """The path of tests/c/<name>.c compiled and linked (with an rpath to libpycoll)."""
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) on PATH")
    binary = tmp_path_factory.mktemp("c") / name
    lib = pycoll.get_library()
    subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", os.path.join(C_DIR, f"{name}.c"),
                    "-o", str(binary), f"-I{pycoll.get_include()}", lib, f"-Wl,-rpath,{os.path.dirname(lib)}"],
                   check=True, capture_output=True, text=True)
    return binary


def run_ok(binary, ranks=(0, 1), timeout=90):
    """Runs a tests/c program, which starts its own ranks: it must exit 0 with each of `ranks` saying "ok"."""
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(f"rank {r} ok" in result.stdout for r in ranks), result.stdout
    return result.stdout


def pycoll_cli(*args):
    """`python -m pycoll ...` as a user runs it: from outside the source tree, whose uncompiled pycoll/ would
    shadow the installed package."""
    return subprocess.run([sys.executable, "-m", "pycoll", *args], capture_output=True, text=True,
                          cwd=os.path.dirname(ROOT), env=dict(os.environ, PYTHONSAFEPATH="1"))


def pycoll_config(*flags):
    result = pycoll_cli("config", *flags)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def build_example(tmp_path_factory):
    """examples/c_allreduce.c compiled as its docs say: with `pycoll config --cflags --libs`."""
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) on PATH")
    binary = tmp_path_factory.mktemp("c") / "c_allreduce"
    subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", EXAMPLE, "-o", str(binary),
                    *pycoll_config("--cflags", "--libs")], check=True, capture_output=True, text=True)
    return binary


def run_ranks(binary, world, id_path, extra=(), env=None):
    """The C example as `world` processes passing the unique id through id_path: [(exit code, output)]."""
    env = dict(os.environ, PYCOLL_SOCKET_IFNAME="lo", **(env or {}))
    procs = [subprocess.Popen([str(binary), str(r), str(world), str(id_path), *extra], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for r in range(world)]
    return [(p.wait(timeout=90), p.stdout.read()) for p in procs]
