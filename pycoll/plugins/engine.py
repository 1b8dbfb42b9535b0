"""The Engine: what a backend gives each communicator (plugin API 2). One shape for every backend: an abstract
class whose one required member is run(call, async_op); every other member is optional, with the default
documented beside it."""

from __future__ import annotations

import abc


def _lacks(engine, what, has):
    return NotImplementedError(f"{what}: backend {getattr(engine, 'name', type(engine).__name__)} {has}")


def _no_fault_tolerance(engine, what):
    return _lacks(engine, what, "cannot survive a lost rank yet (the host-memory backends cpu, shm and tcp can)")


def run_now(step, *args):
    """For an engine with no background path: step(*args) run now, as the handle an async call returns -- a
    pycoll.work.CompletedHandle holding the algorithm step returned, or the error it raised (delivered by
    Work.wait, as a background failure would be)."""
    from pycoll.work import CompletedHandle

    try:
        return CompletedHandle(algorithm=step(*args))
    except Exception as exc:  # noqa: BLE001 -- delivered by Work.wait
        return CompletedHandle(error=exc)


class Engine(abc.ABC):
    """One communicator's state inside a backend. The Communicator checks every argument (dtype, length and
    memory kind of each buffer included) and hands the engine one Call per collective: run() is the only member
    an engine must have. The optional ones, each with its default:

    - transport: what the collectives run over ("shm", "tcp", "shm+tcp"); None: the backend's name.
    - hosts: a pycoll.rendezvous.hosts.Hosts, where the backend finds the hosts (Backend.finds_hosts); None.
    - close_linger: the most seconds close() waits for the peers' goodbyes, which the Communicator shortens to
      its own close deadline; None: it waits for none.
    - native: the libpycoll communicator the collectives run in on the CPU (pycoll._bindings.comm.NativeComm),
      which pycoll.jax's handlers call; None where they run elsewhere (a vendor library, islands).
    - uneven_all_to_all: all_to_all calls may carry per-peer counts (Call.counts); False.
    - validates_calls: run() passes each call to libpycoll's own check (a NativeComm does); False: the
      Communicator checks it by the same rules (pycoll_call_check) before run() sees it.
    - failed_ranks: the ranks known to have failed; ().
    - fast_path(accepted), request_abort(failed_rank, reason), abort(), close(): do nothing (fast_path: None).
    - split(color, key), revoke(), agree(flag, timeout), shrink(exclude, timeout): raise NotImplementedError
      naming the backend."""

    transport = None
    hosts = None
    close_linger = None
    native = None
    uneven_all_to_all = False
    validates_calls = False
    failed_ranks = ()

    @abc.abstractmethod
    def run(self, call, async_op=False):
        """Run `call` (a pycoll.plugins.Call). Blocking: return the name of the algorithm that ran (None where
        none applies: send/recv, barrier). async_op: start it in the background, after every call made before
        it, and return its handle for pycoll.Work: wait(timeout) -> bool, done(), error() (the exception it
        failed with, or None), algorithm. An engine with no background path runs it now and returns
        run_now's handle."""

    def fast_path(self, accepted):
        """An object whose all_reduce(x, op, out, algorithm, accuracy) and broadcast(x, root) run the common case
        without Buffers (see pycoll/_bindings/fast_path.pxi) and return None for any other; None when the engine
        has none. `accepted` maps each argument the communicator accepts to its id: "ops", "algorithms",
        "accuracies", "dtypes" (numpy dtype name -> id)."""
        return None

    def request_abort(self, failed_rank, reason):
        """From any thread: a peer failure learnt of elsewhere (failed_rank -1 where unknown). Where an engine
        can, the call waiting on it, else the next, raises PeerFailure saying `reason`; by default its waits end
        at their deadline, as any wait on a departed peer does."""

    def abort(self):
        """Leave now, without goodbyes, after a failure this rank raised: the peers waiting on it fail at once
        (PeerFailure naming it) instead of at their deadline. By default nothing is sent."""

    def split(self, color, key):
        """The engine of a new communicator for the ranks that pass the same color >= 0 (-1: none for this rank,
        return None), over this engine's connections. Collective over this engine's ranks."""
        raise _lacks(self, "split", "has no sub-communicators yet (the host-memory backends cpu, shm and tcp "
                     "have)")

    def revoke(self):
        """Fault tolerance (docs/fault_tolerance.md): revoke(), agree(flag, timeout), shrink(exclude, timeout)
        -> a new engine."""
        raise _no_fault_tolerance(self, "revoke")

    def agree(self, flag, timeout):
        raise _no_fault_tolerance(self, "agree")

    def shrink(self, exclude, timeout):
        raise _no_fault_tolerance(self, "shrink")

    def close(self):
        """Idempotent."""
