/* Per-pair transports: one pycoll_p2p_t made of several (typically shared memory between the ranks of this
 * host and TCP to the other hosts), each a transport of the whole job that reaches only some peers.
 *
 * A request goes to the child that reaches its peer, with the peer's rank unchanged (every child numbers the
 * job's ranks alike). A wait drives every child through ops->progress -- one non-blocking pass each -- so data
 * moves on all of them at once and an ABORT, a STATE probe or a dead peer on any of them is seen at once; the
 * children's own checks (mismatches, probes naming whom this rank waits for, timeouts naming the end of a chain
 * of waiting ranks, pidfd liveness) run unchanged inside those passes. Between passes this transport spins,
 * yields, then sleeps, never past the deadline, and checks for interrupts, as the single transports do.
 *
 * Before a child is used, the collective's state (descriptors, deadline, spin, memory table, interrupt check)
 * is copied into it; a child's first error becomes this transport's (rank, status and text as the child wrote
 * them), and an error anywhere is told to every child's peers, so ranks behind either transport learn it.
 *
 * Fault tolerance (transport/ft_reset.h, at the end of this file): each child starts the epoch over its own peers,
 * and a peer is cut, probed or found gone on the child that reaches it; the agreement drives this transport
 * through ops->progress, one pass over every child, as a wait does. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/frame.h"
#include "transport/ft_reset.h"
#include "transport/idle_wait.h"
#include "transport/shm_doorbell.h"
#include "transport/shm_transport.h"
#include "common/p2p_share.h"
#include "transport/request_queue.h"
#include "common/wait_tally.h"
#include "pycoll/transports.h"
#include "transport/tcp_transport.h"

#define CHECK_EVERY_NS 100000000LL /* how often a blocked wait checks for interrupts */
/* A child reports the timeout of its own requests; this is the backstop should none do (it never should). */
#define TIMEOUT_BACKSTOP_NS 1000000000LL
/* The longest sleep on the shared-memory child's doorbell that no peer rings: what a wake-up that does not come
 * (a message from another host meanwhile) costs at most. */
#define BELL_SLEEP_MAX_NS 1000000LL

typedef struct routed_transport {
    pycoll_p2p_t base;
    int32_t n_children;
    pycoll_p2p_t **children;
    int32_t *route; /* route[r]: the child that reaches rank r */
    atomic_int wake; /* routed_ft_wake: run the interrupt check now */
} routed_transport_t;

static routed_transport_t *impl(pycoll_p2p_t *p2p) { return (routed_transport_t *)p2p; }

/* The communicator stamps each collective on this transport; the children need it too. */
static void share_state(routed_transport_t *t, pycoll_p2p_t *child) { p2p_share_collective(child, &t->base); }

/* A child's first error becomes this transport's (which keeps its own first one). */
static pycoll_status_t take_child_error(routed_transport_t *t, const pycoll_p2p_t *child)
{
    return p2p_adopt_error(&t->base, child);
}

static pycoll_status_t routed_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    routed_transport_t *t = impl(p2p);
    if (p2p->status != PYCOLL_OK)
        return p2p->status;
    if (req->peer < 0 || req->peer >= p2p->size || req->peer == p2p->rank)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "rank %d: peer %d out of range for world size %d",
                               (int)p2p->rank, (int)req->peer, (int)p2p->size);
    pycoll_p2p_t *child = t->children[t->route[req->peer]];
    share_state(t, child);
    if (child->ops->post(child, req) != PYCOLL_OK)
        return take_child_error(t, child);
    return PYCOLL_OK;
}

static void routed_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message);

/* One progress pass over every child: returns whether anything moved; stops at the first error. */
static int progress_children(routed_transport_t *t, pycoll_request_t *const *reqs, int n, int64_t started)
{
    int moved = 0;
    for (int32_t c = 0; c < t->n_children && t->base.status == PYCOLL_OK; c++) {
        pycoll_p2p_t *child = t->children[c];
        share_state(t, child);
        moved |= child->ops->progress(child, reqs, n, started);
        take_child_error(t, child);
    }
    return moved;
}

/* Whether every request of reqs[0..n) still pending goes to child c. */
static int only_child_pending(const routed_transport_t *t, pycoll_request_t *const *reqs, int n, int32_t c)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete && t->route[reqs[i]->peer] != c)
            return 0;
    return 1;
}

/* The last look before a sleep on the shared-memory child's doorbell: a full pass over every child. */
typedef struct last_look {
    routed_transport_t *t;
    pycoll_request_t *const *reqs;
    int n;
    int64_t started;
} last_look_t;

static int look_before_sleep(void *arg)
{
    const last_look_t *l = arg;
    return progress_children(l->t, l->reqs, l->n, l->started) || l->t->base.status != PYCOLL_OK ||
           pycoll_all_complete(l->reqs, l->n) || atomic_load_explicit(&l->t->wake, memory_order_relaxed);
}

static pycoll_status_t routed_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    routed_transport_t *t = impl(p2p);
    const int64_t started = pycoll_now_ns();
    idle_wait_t idle = idle_wait_start(p2p, started);
    int64_t next_check = started + CHECK_EVERY_NS;
    int wait_fd = -1;
    int32_t fd_child = 0;
    for (int32_t c = 0; c < t->n_children && wait_fd < 0; c++) /* asked per wait: a reset renews it */
        wait_fd = tcp_transport_wait_fd(t->children[fd_child = c]);
    int32_t blocked_on = WAIT_NOT_BLOCKED;
    while (p2p->status == PYCOLL_OK && !pycoll_all_complete(reqs, n)) {
        if (progress_children(t, reqs, n, started)) {
            idle_wait_moved(&idle);
            continue;
        }
        if (p2p->status != PYCOLL_OK)
            break;
        int64_t now = pycoll_now_ns();
        if (now >= p2p->deadline_ns + TIMEOUT_BACKSTOP_NS) {
            pycoll_p2p_fail(p2p, PYCOLL_ERR_TIMEOUT, pycoll_first_pending_peer(reqs, n),
                            "rank %d timed out waiting for rank %d", (int)p2p->rank,
                            (int)pycoll_first_pending_peer(reqs, n));
            break;
        }
        if (now >= next_check || (atomic_load_explicit(&t->wake, memory_order_relaxed) &&
                                  atomic_exchange_explicit(&t->wake, 0, memory_order_relaxed))) {
            next_check = now + CHECK_EVERY_NS;
            if (idle_wait_interrupted(p2p))
                break;
        }
        /* Once the spin is over, sleep on what can end the sleep when the message comes, not for a fixed nap:
         * the shared-memory child's doorbell where only its requests are pending (a local peer rings it), the
         * TCP child's events where only TCP's are (until the next interrupt check, or the time the children
         * probe the peers waited for); a nap's length at most where both are. The children see the deadline on
         * their next pass. */
        int64_t until = now + IDLE_NAP_NS;
        if (wait_fd >= 0 && only_child_pending(t, reqs, n, fd_child)) {
            const int64_t probe_at = started + PYCOLL_PROBE_AFTER_NS;
            until = now < probe_at && probe_at < next_check ? probe_at : next_check;
        }
        if (wait_tally_due(blocked_on, now, started))
            blocked_on = pycoll_first_pending_peer(reqs, n);
        shm_doorbell_t *bell = idle_wait_spinning(&idle, now) ? NULL : transport_doorbell(p2p, reqs, n);
        if (bell) {
            until = now + BELL_SLEEP_MAX_NS < next_check ? now + BELL_SLEEP_MAX_NS : next_check;
            last_look_t look = {t, reqs, n, started};
            shm_doorbell_sleep_unless(bell, look_before_sleep, &look,
                                      until < p2p->deadline_ns ? until : p2p->deadline_ns);
            continue;
        }
        idle_wait_pass_fd(&idle, now, until < p2p->deadline_ns ? until : p2p->deadline_ns, wait_fd);
    }
    wait_tally_end(blocked_on, started);
    if (p2p->status != PYCOLL_OK) {
        routed_abort(p2p, p2p->status, p2p->error);
        return p2p->status;
    }
    return PYCOLL_OK;
}

/* Every child's peers learn this transport's error, with the rank it is about. */
static void routed_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message)
{
    routed_transport_t *t = impl(p2p);
    if (p2p->status == PYCOLL_OK)
        pycoll_p2p_fail(p2p, why, -1, "%s", message ? message : "aborted");
    for (int32_t c = 0; c < t->n_children; c++) {
        pycoll_p2p_t *child = t->children[c];
        share_state(t, child);
        if (child->status == PYCOLL_OK) {
            child->status = p2p->status;
            child->failed_rank = p2p->failed_rank;
            snprintf(child->error, sizeof child->error, "%s", p2p->error);
        }
        child->ops->abort(child, child->status, child->error);
    }
}

/* Each child says goodbye to its peers and checks theirs, one after the other in the same order on every
 * rank, so no two ranks wait for each other on different children. */
static pycoll_status_t routed_finalize(pycoll_p2p_t *p2p, int64_t deadline_ns)
{
    routed_transport_t *t = impl(p2p);
    if (p2p->status != PYCOLL_OK)
        return PYCOLL_OK;
    for (int32_t c = 0; c < t->n_children; c++) {
        pycoll_p2p_t *child = t->children[c];
        share_state(t, child);
        if (child->ops->finalize && child->ops->finalize(child, deadline_ns) != PYCOLL_OK)
            take_child_error(t, child);
        if (p2p->status != PYCOLL_OK) {
            routed_abort(p2p, p2p->status, p2p->error); /* peers of the other children learn it too */
            return p2p->status;
        }
    }
    return PYCOLL_OK;
}

static void destroy_children(int32_t n_children, pycoll_p2p_t *const *children)
{
    for (int32_t c = 0; c < n_children; c++)
        if (children[c])
            children[c]->ops->destroy(children[c]);
}

static void routed_destroy(pycoll_p2p_t *p2p)
{
    routed_transport_t *t = impl(p2p);
    destroy_children(t->n_children, t->children);
    free(t->children);
    free(t->route);
    free(t);
}

/* ops->progress (p2p.h): one pass of routed_wait, never sleeping -- what an agreement (native/comm/agree.c)
 * drives the family transport with. */
static int routed_progress(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, int64_t started_ns)
{
    if (p2p->status != PYCOLL_OK)
        return 0;
    return progress_children(impl(p2p), reqs, n, started_ns);
}

static const pycoll_p2p_ops_t routed_ops = PYCOLL_P2P_OPS(routed, "routed", .finalize = routed_finalize,
                                                          .progress = routed_progress);

/* Why these children cannot make one transport, or NULL. */
static const char *check_children(int32_t n_children, pycoll_p2p_t *const *children, const int32_t *route,
                                  char *error, size_t error_len)
{
    for (int32_t c = 0; c < n_children; c++) {
        const pycoll_p2p_t *child = children[c];
        if (!child || !child->ops || child->ops->version != PYCOLL_P2P_VERSION || !child->ops->progress) {
            snprintf(error, error_len, "routed transport: child %d is %s", (int)c,
                     !child || !child->ops ? "missing"
                     : child->ops->version != PYCOLL_P2P_VERSION ? "of another p2p ABI version"
                                                                 : "without a progress operation");
            return error;
        }
        if (child->rank != children[0]->rank || child->size != children[0]->size) {
            snprintf(error, error_len, "routed transport: child %d is rank %d of %d, child 0 rank %d of %d", (int)c,
                     (int)child->rank, (int)child->size, (int)children[0]->rank, (int)children[0]->size);
            return error;
        }
    }
    for (int32_t r = 0; r < children[0]->size; r++) {
        if (route[r] < 0 || route[r] >= n_children) {
            snprintf(error, error_len, "routed transport: rank %d routed to child %d of %d", (int)r, (int)route[r],
                     (int)n_children);
            return error;
        }
    }
    return NULL;
}

pycoll_p2p_t *pycoll_routed_transport_create(int32_t n_children, pycoll_p2p_t *const *children,
                                             const int32_t *route, char *error, size_t error_len)
{
    if (n_children < 1 || !children || !route) {
        snprintf(error, error_len, "routed transport: needs at least one child and a route, got %d children",
                 (int)n_children);
        if (n_children > 0 && children)
            destroy_children(n_children, children);
        return NULL;
    }
    if (check_children(n_children, children, route, error, error_len)) {
        destroy_children(n_children, children);
        return NULL;
    }
    const int32_t size = children[0]->size;
    routed_transport_t *t = calloc(1, sizeof *t);
    pycoll_p2p_t **own = calloc((size_t)n_children, sizeof *own);
    int32_t *own_route = calloc((size_t)size, sizeof *own_route);
    if (!t || !own || !own_route) {
        snprintf(error, error_len, "cannot create the routed transport: out of memory");
        free(t);
        free(own);
        free(own_route);
        destroy_children(n_children, children);
        return NULL;
    }
    memcpy(own, children, (size_t)n_children * sizeof *own);
    memcpy(own_route, route, (size_t)size * sizeof *own_route);
    t->base.ops = &routed_ops;
    t->base.rank = children[0]->rank;
    t->base.size = size;
    t->base.failed_rank = -1;
    t->n_children = n_children;
    t->children = own;
    t->route = own_route;
    return &t->base;
}

/* ---- fault tolerance (transport/ft_reset.h) ---- */

static int is_routed(const pycoll_p2p_t *p2p) { return p2p->ops == &routed_ops; }

/* The child that reaches r, with the collective's state, or NULL (r out of range, or not a routed transport). */
static pycoll_p2p_t *child_of(pycoll_p2p_t *p2p, int32_t r)
{
    if (!is_routed(p2p) || r < 0 || r >= p2p->size)
        return NULL;
    routed_transport_t *t = impl(p2p);
    pycoll_p2p_t *child = t->children[t->route[r]];
    share_state(t, child);
    return child;
}

/* Every child starts the epoch; each cuts and marks in lost[] its own peers that cannot resume (it leaves the
 * entries of ranks other children reach alone), so one array serves all of them. */
pycoll_status_t routed_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost)
{
    routed_transport_t *t = impl(p2p);
    for (int32_t c = 0; c < t->n_children; c++)
        if (!pycoll_ft_can_reset(t->children[c]))
            return PYCOLL_ERR_UNSUPPORTED; /* before any child changed: the transport is as it was */
    pycoll_ft_clear_error(p2p);
    atomic_store_explicit(&t->wake, 0, memory_order_relaxed);
    for (int32_t c = 0; c < t->n_children; c++) {
        pycoll_p2p_t *child = t->children[c];
        share_state(t, child);
        const pycoll_status_t st = pycoll_ft_reset(child, epoch, lost);
        if (st == PYCOLL_ERR_UNSUPPORTED) /* a child finalized alone: the communicator is closed already */
            return pycoll_p2p_fail(p2p, PYCOLL_ERR_CLOSED, -1, "the %s transport under the routed one was closed",
                                   child->ops->name);
        if (st != PYCOLL_OK)
            return take_child_error(t, child);
    }
    return PYCOLL_OK;
}

void routed_ft_cut(pycoll_p2p_t *p2p, int32_t r)
{
    pycoll_p2p_t *child = child_of(p2p, r);
    if (child)
        pycoll_ft_cut(child, r);
}

int routed_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r)
{
    pycoll_p2p_t *child = child_of(p2p, r);
    return child && pycoll_ft_peer_gone(child, r);
}

void routed_ft_wake(pycoll_p2p_t *p2p)
{
    if (!is_routed(p2p))
        return;
    routed_transport_t *t = impl(p2p);
    atomic_store_explicit(&t->wake, 1, memory_order_relaxed);
    for (int32_t c = 0; c < t->n_children; c++) /* ends a sleep on a child's descriptor (routed_wait) */
        pycoll_ft_wake(t->children[c]);
}

/* A child that can tell without a system call (shared memory) checks now; its error becomes this one's. */
void routed_ft_poll(pycoll_p2p_t *p2p)
{
    routed_transport_t *t = impl(p2p);
    for (int32_t c = 0; c < t->n_children && p2p->status == PYCOLL_OK; c++) {
        share_state(t, t->children[c]);
        pycoll_ft_poll(t->children[c]);
        take_child_error(t, t->children[c]);
    }
}

/* Every child forgets its error (an abort copied this transport's into each) and reads what it left unread;
 * the first error one of them finds then becomes this transport's. */
void routed_ft_resume(pycoll_p2p_t *p2p)
{
    routed_transport_t *t = impl(p2p);
    pycoll_ft_clear_error(p2p);
    for (int32_t c = 0; c < t->n_children; c++) {
        share_state(t, t->children[c]);
        pycoll_ft_resume(t->children[c]);
    }
    for (int32_t c = 0; c < t->n_children && p2p->status == PYCOLL_OK; c++)
        take_child_error(t, t->children[c]);
}

shm_doorbell_t *transport_doorbell(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    shm_doorbell_t *bell = shm_transport_doorbell(p2p);
    if (bell || !is_routed(p2p))
        return bell;
    routed_transport_t *t = impl(p2p);
    for (int32_t c = 0; c < t->n_children; c++)
        if ((bell = shm_transport_doorbell(t->children[c])))
            return only_child_pending(t, reqs, n, c) ? bell : NULL;
    return NULL;
}
