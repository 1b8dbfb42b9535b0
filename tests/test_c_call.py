"""pycoll_comm_run from C (tests/c/call_test.c, built against the installed headers and library): collectives
and messages through the one call description, blocking and non-blocking, and bad calls -- another struct
version or size, an unknown collective, counts that do not fit the collective -- refused with
PYCOLL_ERR_INVALID naming the field."""

import os
import shutil
import subprocess

import pytest

import pycoll

pytestmark = pytest.mark.timeout(120)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c", "call_test.c")
CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) on PATH")
    binary = tmp_path_factory.mktemp("c") / "call_test"
    lib = pycoll.get_library()
    subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", SOURCE, "-o", str(binary),
                    f"-I{pycoll.get_include()}", lib, f"-Wl,-rpath,{os.path.dirname(lib)}"], check=True,
                   capture_output=True, text=True)
    return binary


def test_calls_run_blocking_and_not_and_bad_calls_are_refused(program):
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, result.stdout
