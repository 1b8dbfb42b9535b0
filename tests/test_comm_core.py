"""The communicator core's C ABI as Python sees it: ids and names bound from the C headers, the decision
tables, and the p2p ABI version check in pycoll_comm_create."""

from pycoll import plugins
from pycoll._bindings import abi
from pycoll._bindings import sim as _sim
from pycoll.algorithms import ALGORITHMS, COLL_ALGORITHMS
from pycoll.dtypes import DTYPES, OPS


def test_ids_come_from_c_in_id_order():
    for table in (abi.DTYPES, abi.OPS, abi.ALGORITHMS, abi.ACCURACIES, abi.COLLECTIVES):
        assert list(table.values()) == list(range(len(table)))
        assert "?" not in table
    assert DTYPES is abi.DTYPES and OPS is abi.OPS and ALGORITHMS is abi.ALGORITHMS
    assert plugins.ALL_DTYPES == tuple(abi.DTYPES) and plugins.ALL_OPS == tuple(abi.OPS)
    assert ALGORITHMS["auto"] == abi.ALGO_AUTO == 0


def test_each_collective_lists_the_algorithms_it_has():
    assert COLL_ALGORITHMS["all_reduce"] == ("ring", "halving_doubling", "mesh", "recursive_doubling",
                                             "hierarchical")
    assert COLL_ALGORITHMS["reduce_scatter"] == ("ring", "halving_doubling", "mesh")
    for coll in ("all_gather", "broadcast", "reduce", "barrier"):
        assert COLL_ALGORITHMS[coll] == ("ring",)
    assert set(COLL_ALGORITHMS) == set(abi.COLLECTIVES)
    for algorithms in COLL_ALGORITHMS.values():
        assert "auto" not in algorithms and set(algorithms) <= set(ALGORITHMS)


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
