"""Fixtures the integration tests share."""

import pytest
from multiproc import free_port


@pytest.fixture(scope="module")
def solo():
    """A one-rank TCP communicator for a module's in-process tests (pycoll.jax's, for one)."""
    import pycoll
    comm = pycoll.init(backend="tcp", rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port(),
                       timeout=20)
    yield comm
    comm.close()
