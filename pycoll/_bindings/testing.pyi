"""Type stubs for pycoll._bindings.testing: native communicators over transports a test wires itself, for tests
only."""

from collections.abc import Sequence

from pycoll._bindings.comm import NativeComm, error_for_status as error_for_status
from pycoll.errors import PycollError as PycollError

def over_tcp(rank: int, size: int, fds: Sequence[int | None], timeout: float, spin_us: float = 0.0,
             segment_bytes: int = 0) -> NativeComm: ...
def over_routed(rank: int, size: int, fds: Sequence[int | None], segment_fds: Sequence[int | None],
                pids: Sequence[int], ring_bytes: int, timeout: float, spin_us: float = 0.0,
                segment_bytes: int = 0) -> NativeComm: ...
def set_hosts(native: NativeComm, host_of: Sequence[int]) -> None: ...
