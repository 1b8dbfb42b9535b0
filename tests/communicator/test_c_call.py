"""pycoll_comm_run from C (tests/c/call_test.c, built against the installed headers and library): collectives
and messages through the one call description, blocking and non-blocking, and bad calls -- another struct
version or size, an unknown collective, counts that do not fit the collective -- refused with
PYCOLL_ERR_INVALID naming the field."""


import pytest
from c_programs import build, run_ok

pytestmark = pytest.mark.timeout(120)


def test_calls_run_blocking_and_not_and_bad_calls_are_refused(tmp_path_factory):
    run_ok(build(tmp_path_factory, "call_test"))
