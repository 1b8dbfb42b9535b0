"""Build a test program of tests/c/ against the installed pycoll headers and library (pycoll.get_include,
get_library), warnings as errors; skips the test where there is no C compiler."""

import os
import shutil
import subprocess

import pytest

import pycoll

C_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c")


def build(tmp_path_factory, name):
    """The path of tests/c/<name>.c compiled and linked (with an rpath to libpycoll)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc) on PATH")
    binary = tmp_path_factory.mktemp("c") / name
    lib = pycoll.get_library()
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", os.path.join(C_DIR, f"{name}.c"),
                    "-o", str(binary), f"-I{pycoll.get_include()}", lib, f"-Wl,-rpath,{os.path.dirname(lib)}"],
                   check=True, capture_output=True, text=True)
    return binary


def run_ok(program, ranks, timeout=90):
    """Run a built program; it must exit 0 having printed "rank R ok" for each of its ranks."""
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    for r in range(ranks):
        assert f"rank {r} ok" in result.stdout, result.stdout
