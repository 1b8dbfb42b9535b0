"""pycoll's exceptions. Every error a collective reports derives from PycollError."""


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


class CommunicatorRevoked(PycollError):
    """The communicator was revoked (Communicator.revoke, on this rank or another): its collectives and its
    subgroups' fail; shrink() it to go on with the survivors."""


class AuthenticationError(PycollError):
    """A rank or a stranger failed the shared-secret check (PYCOLL_SECRET); the message names who."""


class SettingError(PycollError, ValueError):
    """A PYCOLL_* environment variable holds a value it cannot take. ``name`` is the variable, ``value`` its
    text and ``expects`` what it must be (pycoll config --env lists them all)."""

    def __init__(self, name, value, expects):
        super().__init__(f"{name}={value!r}: expected {expects}")
        self.name, self.value, self.expects = name, value, expects
