/* For transports built over others -- a group view over its parent (native/comm/group_view.c), the routed
 * transport over its children (native/transport/routed_transport.c): moving the collective in progress and the
 * first error between the outer p2p and the inner one. Internal (native/common/p2p.c). */
#ifndef PYCOLL_COMMON_P2P_SHARE_H
#define PYCOLL_COMMON_P2P_SHARE_H

#include "pycoll/p2p.h"

/* What the communicator set on `from` for the collective in progress -- descriptors, deadline, spin, memory
 * table, interrupt check -- copied onto `to`. */
void p2p_share_collective(pycoll_p2p_t *to, const pycoll_p2p_t *from);

/* `from`'s first error (status, failed rank, message) recorded on `to`, unless `to` already has one of its own
 * (the first error is the cause). Returns to->status. */
pycoll_status_t p2p_adopt_error(pycoll_p2p_t *to, const pycoll_p2p_t *from);

#endif
