/* A group view: some of a transport's ranks seen as a transport of their own, numbered 0..k-1, over the
 * parent's connections (no new sockets or segments). The hierarchical all-reduce runs the existing schedules
 * over views of one host's ranks and of one rank per host; communicator subgroups (comm.split) can reuse it.
 * Internal (not part of the C ABI): a view lives on the stack of the code that runs a schedule over it. */
#ifndef PYCOLL_TRANSPORT_GROUP_VIEW_H
#define PYCOLL_TRANSPORT_GROUP_VIEW_H

#include "pycoll/p2p.h"

typedef struct group_view {
    pycoll_p2p_t p2p;       /* first, so the view's ops can cast back; what schedules are handed */
    pycoll_p2p_t *parent;
    const int32_t *members; /* members[i]: the parent's rank of view rank i (the caller keeps it alive) */
    /* A split communicator's view (group_view_create) owns itself and its members, and keeps its own
     * descriptors between collectives; the parent's are set aside here while one of its collectives runs. */
    int owned;
    pycoll_coll_desc_t parent_desc, parent_prev_desc;
    int64_t parent_spin_ns;
} group_view_t;

/* A view of members[0..size) of parent; this rank must be one of them (PYCOLL_ERR_INVALID recorded on the
 * parent otherwise). Copies what the parent's collective in progress set: its descriptors, deadline, spin,
 * memory table and interrupt check, and its error if it already failed. */
pycoll_status_t group_view_init(group_view_t *view, pycoll_p2p_t *parent, const int32_t *members, int32_t size);

/* After a schedule ran over the view: an error recorded on the view only (a kernel or argument failure)
 * becomes the parent's, so the communicator reports and announces it. Returns the status to pass on. */
pycoll_status_t group_view_finish(group_view_t *view, pycoll_status_t status);

/* A view that lives as long as a split communicator (comm.split): members[0..size) copied, this rank at index
 * `rank`; destroyed with its p2p's destroy, which leaves the parent alone. NULL: out of memory. */
group_view_t *group_view_create(pycoll_p2p_t *parent, const int32_t *members, int32_t size, int32_t rank);

/* Around each collective of a split communicator: enter makes the parent carry the view's collective (its
 * descriptors, deadline, spin and memory table), so that every message is stamped with the split's group and
 * sequence; leave gives the parent its own descriptors back (its history and close checks are its own) and
 * makes an error recorded on either the other's. Returns the status to pass on. */
void group_view_enter(group_view_t *view);
pycoll_status_t group_view_leave(group_view_t *view, pycoll_status_t status);

#endif
