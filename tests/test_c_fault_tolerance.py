"""pycoll_comm_revoke, pycoll_comm_agree, pycoll_comm_shrink and pycoll_comm_failed_ranks from C
(tests/c/ft_test.c, built against the installed headers and library): three processes, one killed; the
survivors shrink, all-reduce, revoke, shrink again and agree."""

import subprocess

import pytest
from c_programs import build

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build(tmp_path_factory, "ft_test")


def test_a_c_program_survives_a_killed_rank(program):
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, result.stdout
