/* For transports built over others -- a group view over its parent (native/transport/group_view.c), the routed
 * transport over its children (native/transport/routed_transport.c): moving the collective in progress and the
 * first error between the outer p2p and the inner one. Internal (native/common/p2p.c). */
#ifndef PYCOLL_COMMON_P2P_SHARE_H
#define PYCOLL_COMMON_P2P_SHARE_H

#include "pycoll/p2p.h"

/* What the communicator set on `from` for the collective in progress -- descriptors, deadline, spin, memory
 * table, interrupt check -- copied onto `to`. */
void p2p_share_collective(pycoll_p2p_t *to, const pycoll_p2p_t *from);
/* The same without the interrupt check: a group view entering its parent leaves the parent's check, the one the
 * communicator installed there, in place. */
void p2p_share_call(pycoll_p2p_t *to, const pycoll_p2p_t *from);

/* `from`'s first error (status, failed rank, message) recorded on `to`, unless `to` already has one of its own
 * (the first error is the cause). Returns to->status. */
pycoll_status_t p2p_adopt_error(pycoll_p2p_t *to, const pycoll_p2p_t *from);

/* Messages name a communicator of a family by its members ("group [0, 2]"), not by its group id: the
 * communicator layer, which knows the members, installs the function that does it (native/comm/live_comms.c).
 * It writes the name of `group` (a pycoll_coll_desc_t.group seen on p2p, the family's transport) into out and
 * returns 1, or returns 0 when it knows no such group; without one installed, p2p_group_name writes the id. */
typedef int (*p2p_group_namer_t)(const pycoll_p2p_t *p2p, uint32_t group, char *out, size_t len);
void p2p_set_group_namer(p2p_group_namer_t namer);
void p2p_group_name(const pycoll_p2p_t *p2p, uint32_t group, char *out, size_t len);

#endif
