/* What other transports of this library need from the TCP transport (tcp_transport.c). */
#ifndef PYCOLL_TRANSPORT_TCP_TRANSPORT_H
#define PYCOLL_TRANSPORT_TCP_TRANSPORT_H

#include "pycoll/p2p.h"

/* A descriptor that becomes readable (poll) when a TCP transport has something to act on -- input, room to
 * write, a hang-up, a tcp_ft_wake -- so that a transport made of several (routed_transport.c) can sleep until
 * then instead of for a fixed nap; -1 for any other transport. */
int tcp_transport_wait_fd(const pycoll_p2p_t *p2p);

/* pycoll_tcp_transport_create with `streams` connections per pair of ranks (PYCOLL_TCP_STREAMS, 1 to
 * TCP_MAX_STREAMS): fds[k * size + r] is connection k to rank r, k = 0 the one every frame header travels on. */
pycoll_p2p_t *tcp_transport_create_striped(int32_t rank, int32_t size, int streams, const int *fds, char *error,
                                           size_t error_len);

#endif
