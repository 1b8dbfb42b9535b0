/* A subset of a transport's ranks as a transport of its own (group_view.h). Requests are translated to the
 * parent's ranks on post and then belong to the parent: waiting, progress, mismatch and dead-peer detection,
 * deadlines and aborts are all the parent's, so a view behaves exactly like its parent towards its members.
 * Errors the parent reports keep the parent's rank numbers, the ones users know. */
#include "transport/group_view.h"
#include "common/p2p_share.h"

#include <stdlib.h>
#include <string.h>

static group_view_t *view_of(pycoll_p2p_t *p2p) { return (group_view_t *)p2p; }

/* The parent's first error, copied onto the view so the schedule running over it stops with it. */
static pycoll_status_t take_parent_error(group_view_t *view, pycoll_status_t status)
{
    pycoll_p2p_t *parent = view->parent;
    p2p_adopt_error(&view->p2p, parent);
    return status != PYCOLL_OK && parent->status != PYCOLL_OK ? parent->status : status;
}

static pycoll_status_t view_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    group_view_t *view = view_of(p2p);
    if (req->peer < 0 || req->peer >= p2p->size)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "group of %d ranks: peer %d out of range", (int)p2p->size,
                               (int)req->peer);
    /* The request now belongs to the parent until it completes: it reads the parent's rank from here on. */
    req->peer = view->members[req->peer];
    return take_parent_error(view, view->parent->ops->post(view->parent, req));
}

static pycoll_status_t view_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    group_view_t *view = view_of(p2p);
    return take_parent_error(view, view->parent->ops->wait(view->parent, reqs, n));
}

static void view_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message)
{
    group_view_t *view = view_of(p2p);
    view->parent->ops->abort(view->parent, why, message);
}

/* The parent's connections stay with the parent; a split's view frees only itself. */
static void view_destroy(pycoll_p2p_t *p2p)
{
    group_view_t *view = view_of(p2p);
    if (view->owned) {
        free((void *)view->members);
        free(view);
    }
}

static const pycoll_p2p_ops_t group_view_ops = PYCOLL_P2P_OPS(view, "group_view", .finalize = NULL);

pycoll_status_t group_view_init(group_view_t *view, pycoll_p2p_t *parent, const int32_t *members, int32_t size)
{
    memset(view, 0, sizeof *view);
    view->parent = parent;
    view->members = members;
    int32_t me = -1;
    for (int32_t i = 0; i < size; i++)
        if (members[i] == parent->rank)
            me = i;
    if (me < 0)
        return pycoll_p2p_fail(parent, PYCOLL_ERR_INVALID, -1, "group view: rank %d is not among its %d members",
                               (int)parent->rank, (int)size);
    pycoll_p2p_t *p2p = &view->p2p;
    p2p->ops = &group_view_ops;
    p2p->rank = me;
    p2p->size = size;
    p2p->failed_rank = -1;
    p2p_share_collective(p2p, parent);
    return take_parent_error(view, parent->status);
}

pycoll_status_t group_view_finish(group_view_t *view, pycoll_status_t status)
{
    pycoll_p2p_t *p2p = &view->p2p, *parent = view->parent;
    if (p2p->status == PYCOLL_OK || parent->status != PYCOLL_OK)
        return status != PYCOLL_OK && parent->status != PYCOLL_OK ? parent->status : status;
    /* Recorded by the view itself: its rank numbers are the view's. */
    int32_t failed = p2p->failed_rank;
    return pycoll_p2p_fail(parent, p2p->status, failed >= 0 && failed < p2p->size ? view->members[failed] : -1,
                           "%s", p2p->error);
}

group_view_t *group_view_create(pycoll_p2p_t *parent, const int32_t *members, int32_t size, int32_t rank)
{
    group_view_t *view = calloc(1, sizeof *view);
    int32_t *copy = malloc((size_t)(size > 0 ? size : 1) * sizeof *copy);
    if (!view || !copy) {
        free(view);
        free(copy);
        return NULL;
    }
    for (int32_t i = 0; i < size; i++)
        copy[i] = members[i];
    view->parent = parent;
    view->members = copy;
    view->owned = 1;
    pycoll_p2p_t *p2p = &view->p2p;
    p2p->ops = &group_view_ops;
    p2p->rank = rank;
    p2p->size = size;
    p2p->failed_rank = -1;
    p2p->spin_ns = parent->spin_ns;
    p2p->kernels = parent->kernels;
    return view;
}

void group_view_enter(group_view_t *view)
{
    pycoll_p2p_t *p2p = &view->p2p, *parent = view->parent;
    view->parent_desc = parent->desc;
    view->parent_prev_desc = parent->prev_desc;
    view->parent_spin_ns = parent->spin_ns;
    p2p_share_call(parent, p2p);
    p2p_adopt_error(p2p, parent);
}

pycoll_status_t group_view_leave(group_view_t *view, pycoll_status_t status)
{
    pycoll_p2p_t *p2p = &view->p2p, *parent = view->parent;
    status = group_view_finish(view, status);
    p2p_adopt_error(p2p, parent);
    parent->desc = view->parent_desc;
    parent->prev_desc = view->parent_prev_desc;
    parent->spin_ns = view->parent_spin_ns;
    return status;
}
