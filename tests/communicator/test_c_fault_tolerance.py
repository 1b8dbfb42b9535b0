"""The C ABI's fault-tolerance calls from C programs built against the installed headers and library:
tests/c/ft_test.c (pycoll_comm_revoke, _agree, _shrink, _failed_ranks: three processes, one killed; the survivors
shrink, all-reduce, revoke, shrink again and agree) and tests/c/grow_test.c (pycoll_comm_grow and pycoll_comm_join:
three processes grow to four with a new one)."""


import pytest
from c_programs import build, run_ok

pytestmark = pytest.mark.timeout(120)


def test_a_c_program_survives_a_killed_rank(tmp_path_factory):
    run_ok(build(tmp_path_factory, "ft_test"))


def test_a_c_program_grows_a_job_with_a_new_process(tmp_path_factory):
    run_ok(build(tmp_path_factory, "grow_test"), ranks=range(4))
