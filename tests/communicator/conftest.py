"""Fixtures the communicator tests share."""

import pytest

import pycoll


@pytest.fixture
def comm():
    """A communicator over a world of one: argument checks and array handling need no peers."""
    with pycoll.init(rank=0, world_size=1, timeout=10) as c:
        yield c
