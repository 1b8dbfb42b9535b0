"""A grow's unique id through the job's rendezvous store, for processes a launcher starts: rank 0 of the members
of comm.grow() without an id makes one and publishes it under the grow's generation (the store counts the job's
grows: the k-th is generation k), and pycoll.join() with no id reads it there, generation PYCOLL_GROW_GENERATION.
The store is the one init() made, hosted by the original rank 0: a job whose store's host is gone grows by
unique id instead."""

from pycoll import settings
from pycoll.errors import PycollError, Timeout
from pycoll.rendezvous.tcp_store import create_store

GENERATION_KEY = "pycoll/grow/generation"


def id_key(generation):
    return f"pycoll/grow/{generation}/unique_id"


def publish(store, timeout):
    """A fresh unique id, published as the next generation's in `store` (None: PycollError saying why not)."""
    from pycoll.bootstrap import get_unique_id

    if store is None:
        raise PycollError("grow without a unique_id publishes one in the job's rendezvous store, and this "
                          "communicator has none (init_rank made it, or init got a store of the caller's): pass "
                          "unique_id=pycoll.get_unique_id() on rank 0 and hand it to the new processes")
    unique_id = get_unique_id(toward=store.host)
    generation = store.add(GENERATION_KEY, 1)
    store.set(id_key(generation), unique_id)
    return unique_id


def fetch(env, timeout, secret):
    """The unique id of generation PYCOLL_GROW_GENERATION, waiting up to `timeout` for the members to publish
    it, from the store at env's MASTER_ADDR:MASTER_PORT (env: launch_env.resolve()'s, rank >= 1)."""
    if env.rank < 1:
        raise ValueError(f"pycoll.join: the launcher says rank {env.rank}, but rank 0 is always a member: a new "
                         "process joins as one of the ranks after the members'")
    generation = settings.get("PYCOLL_GROW_GENERATION")
    store = create_store(env, timeout=timeout, secret=secret)
    try:
        return store.get(id_key(generation), timeout)
    except Timeout:
        raise Timeout(f"pycoll.join as rank {env.rank} of {env.world_size} waited {timeout:g} s for the unique id "
                      f"of grow generation {generation} in the rendezvous store at {store.host}:{store.port}: the "
                      f"members' comm.grow({env.world_size}) without a unique_id publishes it there (the "
                      f"{generation}-th grow of the job; PYCOLL_GROW_GENERATION)") from None
    finally:
        store.close(linger=0)
