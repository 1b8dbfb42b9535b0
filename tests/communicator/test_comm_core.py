"""The communicator core's C ABI as Python sees it: ids and names bound from the C headers, the decision
tables, and the p2p ABI version check in pycoll_comm_create."""

from pycoll import plugins
from pycoll._bindings import abi, sim as _sim
from pycoll.algorithms import ALGORITHMS, COLL_ALGORITHMS
from pycoll.dtypes import DTYPES, OPS


def test_ids_come_from_c_in_id_order():
    for table in (abi.DTYPES, abi.OPS, abi.ACCURACIES, abi.COLLECTIVES):
        assert list(table.values()) == list(range(len(table)))
    for table in (abi.DTYPES, abi.OPS, abi.ALGORITHMS, abi.ACCURACIES, abi.COLLECTIVES):
        assert list(table.values()) == sorted(set(table.values()))
        assert "?" not in table  # an id the C library reserves without a name is not bound
    assert DTYPES is abi.DTYPES and OPS is abi.OPS and ALGORITHMS is abi.ALGORITHMS
    assert plugins.ALL_DTYPES == tuple(abi.DTYPES) and plugins.ALL_OPS == tuple(abi.OPS)
    assert ALGORITHMS["auto"] == abi.ALGO_AUTO == 0


def test_each_collective_lists_the_algorithms_it_has():
    assert COLL_ALGORITHMS["all_reduce"] == ("ring", "halving_doubling", "mesh", "recursive_doubling",
                                             "hierarchical", "shm_slots")
    for coll in ("all_gather_v", "reduce_scatter_v"):
        assert COLL_ALGORITHMS[coll] == ("ring",)
    assert COLL_ALGORITHMS["reduce"] == ("binomial_tree", "scatter_gather", "shm_slots")
    for coll in ("gather", "scatter"):
        assert COLL_ALGORITHMS[coll] == ("binomial_tree", "flat")
    # the shared-memory transport runs its own, listed last: never a collective's fallback
    assert COLL_ALGORITHMS["broadcast"] == ("binomial_tree", "shm_slots")
    assert COLL_ALGORITHMS["barrier"] == ("dissemination", "shm_slots")
    assert COLL_ALGORITHMS["all_to_all"] == ("pairwise", "shm_slots")
    assert COLL_ALGORITHMS["reduce_scatter"] == ("ring", "halving_doubling", "mesh", "shm_slots")
    assert COLL_ALGORITHMS["all_gather"] == ("ring", "shm_slots")
    assert set(COLL_ALGORITHMS) == set(abi.COLLECTIVES)
    for algorithms in COLL_ALGORITHMS.values():
        assert "auto" not in algorithms and set(algorithms) <= set(ALGORITHMS)
    # every algorithm serves some collective: no name without a schedule
    assert {a for algorithms in COLL_ALGORITHMS.values() for a in algorithms} == set(ALGORITHMS) - {"auto"}


def test_algorithm_traits_come_from_the_table():
    assert abi.NATIVE_ALGORITHMS == ("shm_slots",) and abi.HOST_ALGORITHMS == ("hierarchical",)


def test_comm_create_refuses_a_transport_of_another_p2p_version():
    status, message = _sim.comm_create_status(abi.P2P_VERSION - 1)
    assert status == abi.STATUS_INVALID
    assert f"version {abi.P2P_VERSION - 1}" in message and f"speaks {abi.P2P_VERSION}" in message
    status, message = _sim.comm_create_status(abi.P2P_VERSION + 1)
    assert status == abi.STATUS_INVALID
    # The right version is taken: every simulated rank creates its communicator that way.


def test_cost_model_functions_take_ids_from_the_table():
    # auto never comes back from the decision; every id it returns is an all-reduce algorithm.
    names = {ident: name for name, ident in ALGORITHMS.items()}
    for size in (2, 3, 8):
        for nbytes in (4, 1 << 16, 1 << 26):
            assert names[_sim.choose_all_reduce(size, nbytes)] in COLL_ALGORITHMS["all_reduce"]



def test_the_refusal_reads_clearly_in_python():
    from pycoll._bindings.comm import error_for_status

    status, message = _sim.comm_create_status(1)
    exc = error_for_status(status, message)
    assert isinstance(exc, ValueError)
    assert "p2p ABI version 1" in str(exc) and "rebuild the transport" in str(exc)


def test_auto_considers_a_native_algorithm_only_where_the_transport_has_it():
    # The shared-memory transport's "shm_slots" is cheapest by the default model at every size, but a transport
    # without native collectives (TCP, the simulator) never gets it.
    shm = ALGORITHMS["shm_slots"]
    for size in (2, 4):
        for nbytes in (4, 1 << 16, 1 << 26):
            assert _sim.choose_all_reduce(size, nbytes) != shm
            assert _sim.choose_all_reduce_among(size, nbytes, shm) == shm


def test_explicit_native_algorithm_over_a_transport_without_it_is_refused_naming_the_transport():
    import numpy as np

    from pycoll.dtypes import dtype_id

    x = [np.ones(4, dtype=np.float32) for _ in range(2)]
    calls = [(abi.COLLECTIVES["all_reduce"], a.ctypes.data, a.ctypes.data, 4, dtype_id("float32"), OPS["sum"],
              ALGORITHMS["shm_slots"], 0, -1) for a in x]
    status, _, ranks = _sim.run(calls, 10.0)
    assert status == abi.STATUS_INVALID, (status, ranks)
    for rank_status, _, message, _ in ranks:
        assert rank_status == abi.STATUS_INVALID and "transport is sim" in message, message
