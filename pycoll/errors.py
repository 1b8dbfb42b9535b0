"""pycoll's exceptions. Every error a collective reports derives from PycollError."""

import re


class PycollError(RuntimeError):
    """Base of every pycoll error."""


class Timeout(PycollError, TimeoutError):
    """A wait passed its deadline. ``rank`` names the rank that stopped answering, where known (else None)."""

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class PeerFailure(PycollError):
    """A peer died, closed its connection or aborted. ``rank`` names it (None when unknown). A peer's own error
    (its bad argument, its memory, an OS call) is a PeerFailure on the other ranks, saying what it reported."""

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class MismatchError(PycollError):
    """Ranks called different collectives, dtypes, counts, ops or algorithms."""


class BackendUnavailable(PycollError):
    """A backend cannot run here; the message says what to install or set."""


class CommunicatorClosed(PycollError):
    """The communicator was closed, or an earlier error broke it."""


class WrongProcess(PycollError):
    """A communicator (or its store, or a Work of it) was used by a process other than the one that made it: a
    child of fork(). Its connections and shared memory belong to that process (``owner_pid``); the child cannot
    use or close them, and the owner and the other ranks go on unaffected. Make a new communicator in the child
    instead."""

    def __init__(self, message, owner_pid=None):
        super().__init__(message)
        self.owner_pid = owner_pid


def check_process(owner_pid, what):
    """Raise WrongProcess unless this is process owner_pid (the one that made `what`)."""
    import os
    if os.getpid() != owner_pid:
        raise WrongProcess(f"{what} belongs to process {owner_pid}, not to this process ({os.getpid()}): it was "
                           "made before a fork(), and its connections and shared memory are that process's, so this "
                           "process cannot use or close it; create a new communicator here (pycoll.init) if this "
                           "process is to be a rank", owner_pid=owner_pid)


class CommunicatorRevoked(PycollError):
    """The communicator was revoked (Communicator.revoke, on this rank or another): its collectives and its
    subgroups' fail; shrink() it to go on with the survivors."""


class AuthenticationError(PycollError):
    """A rank or a stranger failed the shared-secret check (PYCOLL_SECRET); the message names who."""


class DuplicateRank(PycollError, ValueError):
    """Two processes joined one job as the same rank. ``rank`` is that rank; the message names both processes
    (pid and host). Raised on the second process at once, and on every rank still waiting for the job to form."""

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class SettingError(PycollError, ValueError):
    """A PYCOLL_* environment variable holds a value it cannot take. ``name`` is the variable, ``value`` its
    text and ``expects`` what it must be (pycoll config --env lists them all)."""

    def __init__(self, name, value, expects):
        super().__init__(f"{name}={value!r}: expected {expects}")
        self.name, self.value, self.expects = name, value, expects


# The exception class of each status of the C library, by the name it exports (pycoll_status_name): the one
# table, for the bindings' status codes and for JAX, whose FFI errors carry the name. Any other is a PycollError.
STATUS_CLASSES = {"invalid": ValueError, "timeout": Timeout, "peer_failure": PeerFailure, "mismatch": MismatchError,
                  "closed": CommunicatorClosed, "nomem": MemoryError, "busy": RuntimeError,
                  "auth": AuthenticationError, "forked": WrongProcess, "revoked": CommunicatorRevoked}


# The C library checks every call (native/comm/call.c) and names the fields of its call description; a Python
# caller knows them as the arguments of the method it called.
_ARGUMENT_OF_FIELD = {"send_count": "the elements of x", "recv_count": "the elements of out", "dest": "dst",
                      "source": "src"}


def _with_argument_names(message):
    named = [f"{field}: {arg}" for field, arg in _ARGUMENT_OF_FIELD.items() if re.search(rf"\b{field}\b", message)]
    return f"{message} ({'; '.join(named)})" if named else message


def error_for_status_name(status, message, failed_rank=None):
    """The exception for a C status by its name: Timeout and PeerFailure carry the rank that failed (None:
    unknown), WrongProcess the process the communicator belongs to where the message names it; a bad argument's
    message also gives the Python argument each C field it names stands for."""
    cls = STATUS_CLASSES.get(status, PycollError)
    if cls is ValueError:
        return cls(_with_argument_names(message))
    if cls is Timeout or cls is PeerFailure:
        return cls(message, rank=failed_rank)
    if cls is WrongProcess:
        owner = re.search(r"by process (\d+)|belongs to process (\d+)", message)
        return cls(message, owner_pid=int(owner.group(owner.lastindex)) if owner else None)
    return cls(message)
