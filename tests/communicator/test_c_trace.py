"""The flight recorder's C ABI (tests/c/trace_test.c, built against the installed headers and library):
pycoll_comm_dump_trace into a directory, pycoll_comm_trace_path naming the file, pycoll_comm_trace_json, and a
dump with nowhere to go refused."""

import subprocess

import pytest
from c_programs import build

pytestmark = pytest.mark.timeout(120)


def test_dump_trace_from_c(tmp_path_factory, tmp_path):
    program = build(tmp_path_factory, "trace_test")
    result = subprocess.run([str(program), str(tmp_path)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, result.stdout
    assert len(list(tmp_path.glob("pycoll-trace-*-rank*.json"))) == 2
