# The routed transport's construction for over_routed (included by testing.pyx): a shared-memory child
# for this host's ranks, a TCP child for the other hosts', and the route between them.

from posix.unistd cimport close

cdef enum:
    ROUTE_SHM = 0
    ROUTE_TCP = 1


cdef pycoll_p2p_t *_routed_p2p(int rank, int size, fds, segment_fds, pids, int64_t ring_bytes,
                               char *err) except? NULL:
    """NULL with err set when a transport cannot be created. Owns the sockets fds[r] in every case: the TCP
    child once created, else this closes them."""
    cdef int *cfds = <int *>malloc(max(size, 1) * sizeof(int))
    cdef int *csegs = <int *>malloc(max(size, 1) * sizeof(int))
    cdef int32_t *cpids = <int32_t *>malloc(max(size, 1) * sizeof(int32_t))
    cdef int32_t *route = <int32_t *>malloc(max(size, 1) * sizeof(int32_t))
    cdef pycoll_p2p_t *children[2]
    try:
        if cfds == NULL or csegs == NULL or cpids == NULL or route == NULL:
            raise MemoryError()
        for r in range(size):
            cfds[r] = -1 if fds[r] is None else int(fds[r])
            csegs[r] = -1 if segment_fds[r] is None else int(segment_fds[r])
            cpids[r] = int(pids[r])
            route[r] = ROUTE_SHM if segment_fds[r] is not None else ROUTE_TCP
        children[ROUTE_SHM] = pycoll_shm_transport_create(rank, size, csegs, cpids, ring_bytes, err, 512)
        children[ROUTE_TCP] = NULL
        if children[ROUTE_SHM] != NULL:
            children[ROUTE_TCP] = pycoll_tcp_transport_create(rank, size, cfds, err, 512)
        if children[ROUTE_TCP] == NULL:
            for r in range(size):
                if cfds[r] >= 0:
                    close(cfds[r])
            if children[ROUTE_SHM] != NULL:
                children[ROUTE_SHM].ops.destroy(children[ROUTE_SHM])
            return NULL
        return pycoll_routed_transport_create(2, children, route, err, 512)
    finally:
        free(cfds)
        free(csegs)
        free(cpids)
        free(route)
