"""The all-reduce schedules that tests loop over, read from the algorithm table (pycoll.algorithms.COLL_ALGORITHMS,
bound from native/algorithms/table.c) instead of restated in each test: a schedule added to the table is tested
at once. tests/communicator/test_comm_core.py is the one test that spells the table out against C."""

from pycoll.algorithms import COLL_ALGORITHMS, HOST_ALGORITHMS, NATIVE_ONLY

# pycoll's own all-reduce schedules over a flat world of ranks: every message transport (and the simulator) runs
# them; not the transports' own (NATIVE_ONLY) nor those that need a host map (HOST_ALGORITHMS).
ALL_REDUCE_SCHEDULES = [a for a in COLL_ALGORITHMS["all_reduce"] if a not in NATIVE_ONLY + HOST_ALGORITHMS]
# The same with those that need a host map: the simulator gives them one host where the test gives none.
ALL_REDUCE_SIM_SCHEDULES = [a for a in COLL_ALGORITHMS["all_reduce"] if a not in NATIVE_ONLY]
