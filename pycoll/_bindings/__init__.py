"""The Cython layer over libpycoll (mpi4py's layout): libpycoll.pxd declares the C ABI once; each module wraps
one part of it and releases the GIL around every call that can block.

abi      the ids and names of the C enums and decision.c's algorithm tables, bound from C once
buffer   memory addresses of arrays: the buffer protocol and DLPack capsules
kernels  the SIMD reduction kernels (pycoll.kernels)
comm     the native communicator (pycoll_comm_*), and the one map from status codes to exceptions
sim      N ranks as threads over the in-process transport, each calling its own pycoll_comm_t (pycoll.tools.simulate)
vendor   the NCCL and HCCL communicators (pycoll.plugins.nccl, .hccl)
"""
