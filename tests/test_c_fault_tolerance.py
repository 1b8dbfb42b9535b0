"""pycoll_comm_revoke, pycoll_comm_agree, pycoll_comm_shrink and pycoll_comm_failed_ranks from C
(tests/c/ft_test.c, built against the installed headers and library): three processes, one killed; the
survivors shrink, all-reduce, revoke, shrink again and agree."""

import os
import shutil
import subprocess

import pytest

import pycoll

pytestmark = pytest.mark.timeout(120)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c", "ft_test.c")
CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) on PATH")
    binary = tmp_path_factory.mktemp("c") / "ft_test"
    lib = pycoll.get_library()
    subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", SOURCE, "-o", str(binary),
                    f"-I{pycoll.get_include()}", lib, f"-Wl,-rpath,{os.path.dirname(lib)}"], check=True,
                   capture_output=True, text=True)
    return binary


def test_a_c_program_survives_a_killed_rank(program):
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, result.stdout
