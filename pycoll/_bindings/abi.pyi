"""Type stubs for pycoll._bindings.abi: the ids and names of the C enums (native/include/pycoll/types.h) and
the algorithm table (native/algorithms/table.c), bound from C once."""

DTYPE_TABLE: tuple[dict, ...]
DTYPES: dict[str, int]
OPS: dict[str, int]
ALGORITHMS: dict[str, int]
ACCURACIES: dict[str, int]
COLLECTIVES: dict[str, int]
COLL_ALGORITHMS: dict[str, tuple[str, ...]]
NATIVE_ALGORITHMS: tuple[str, ...]
HOST_ALGORITHMS: tuple[str, ...]
ALGO_AUTO: int
P2P_VERSION: int
DEFAULT_SEGMENT_BYTES: int
STATUS_OK: int
STATUS_INVALID: int
STATUS_PEER_FAILURE: int
