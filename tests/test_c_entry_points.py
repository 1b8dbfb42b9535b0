"""The C ABI's per-collective entry points that no binding calls (tests/c/entry_points_test.c, built against the
installed headers and library): every pycoll_comm_start_* and the blocking pycoll_comm_send / recv, between two
processes, each result checked exactly."""

import subprocess

import pytest
from c_programs import build

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build(tmp_path_factory, "entry_points_test")


def test_every_start_call_and_the_blocking_messages_run(program):
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, result.stdout
