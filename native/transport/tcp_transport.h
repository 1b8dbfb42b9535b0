/* What other transports of this library need from the TCP transport (tcp_transport.c). */
#ifndef PYCOLL_TRANSPORT_TCP_TRANSPORT_H
#define PYCOLL_TRANSPORT_TCP_TRANSPORT_H

#include "pycoll/p2p.h"

/* A descriptor that becomes readable (poll) when a TCP transport has something to act on -- input, room to
 * write, a hang-up, a tcp_ft_wake -- so that a transport made of several (routed_transport.c) can sleep until
 * then instead of for a fixed nap; -1 for any other transport. */
int tcp_transport_wait_fd(const pycoll_p2p_t *p2p);

#endif
