"""The C ABI's per-collective entry points that no binding calls (tests/c/entry_points_test.c, built against the
installed headers and library): every pycoll_comm_start_* and the blocking pycoll_comm_send / recv, between two
processes, each result checked exactly."""

import pytest
from c_programs import build, run_ok

pytestmark = pytest.mark.timeout(120)


def test_every_start_call_and_the_blocking_messages_run(tmp_path_factory):
    run_ok(build(tmp_path_factory, "entry_points_test"))
