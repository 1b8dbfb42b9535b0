/* Transport-independent parts of the point-to-point interface: error recording and blocking helpers. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/error_format.h"
#include "common/p2p_share.h"
#include "pycoll/p2p.h"

int64_t pycoll_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

pycoll_status_t pycoll_p2p_fail(pycoll_p2p_t *p2p, pycoll_status_t status, int32_t failed_rank, const char *fmt,
                                ...)
{
    /* The first error is the cause; later ones are usually its consequences. */
    if (p2p->status != PYCOLL_OK)
        return p2p->status;
    va_list ap;
    va_start(ap, fmt);
    p2p->status = pycoll_vformat_error(p2p->error, sizeof p2p->error, status, fmt, ap);
    va_end(ap);
    p2p->failed_rank = failed_rank;
    return status;
}

void p2p_share_call(pycoll_p2p_t *to, const pycoll_p2p_t *from)
{
    to->deadline_ns = from->deadline_ns;
    to->desc = from->desc;
    to->prev_desc = from->prev_desc;
    to->spin_ns = from->spin_ns;
    to->kernels = from->kernels;
}

void p2p_share_collective(pycoll_p2p_t *to, const pycoll_p2p_t *from)
{
    p2p_share_call(to, from);
    to->check_interrupt = from->check_interrupt;
    to->interrupt_ctx = from->interrupt_ctx;
}

pycoll_status_t p2p_adopt_error(pycoll_p2p_t *to, const pycoll_p2p_t *from)
{
    if (from->status != PYCOLL_OK && to->status == PYCOLL_OK)
        pycoll_p2p_fail(to, from->status, from->failed_rank, "%s", from->error);
    return to->status;
}

pycoll_status_t pycoll_send(pycoll_p2p_t *p2p, int32_t peer, const void *buf, int64_t nbytes, uint32_t tag)
{
    pycoll_request_t req = {.buf = (void *)buf, .nbytes = nbytes, .peer = peer, .tag = tag, .is_send = 1};
    pycoll_request_t *reqs[1] = {&req};
    pycoll_status_t st = p2p->ops->post(p2p, &req);
    return st != PYCOLL_OK ? st : p2p->ops->wait(p2p, reqs, 1);
}

pycoll_status_t pycoll_recv(pycoll_p2p_t *p2p, int32_t peer, void *buf, int64_t nbytes, uint32_t tag)
{
    pycoll_request_t req = {.buf = buf, .nbytes = nbytes, .peer = peer, .tag = tag, .is_send = 0};
    pycoll_request_t *reqs[1] = {&req};
    pycoll_status_t st = p2p->ops->post(p2p, &req);
    return st != PYCOLL_OK ? st : p2p->ops->wait(p2p, reqs, 1);
}

pycoll_status_t pycoll_sendrecv(pycoll_p2p_t *p2p, int32_t send_peer, const void *send_buf, int64_t send_nbytes,
                                int32_t recv_peer, void *recv_buf, int64_t recv_nbytes, uint32_t tag)
{
    pycoll_request_t recv = {.buf = recv_buf, .nbytes = recv_nbytes, .peer = recv_peer, .tag = tag};
    pycoll_request_t send = {.buf = (void *)send_buf, .nbytes = send_nbytes, .peer = send_peer, .tag = tag,
                             .is_send = 1};
    pycoll_request_t *reqs[2] = {&recv, &send};
    pycoll_status_t st = p2p->ops->post(p2p, &recv);
    if (st == PYCOLL_OK)
        st = p2p->ops->post(p2p, &send);
    return st != PYCOLL_OK ? st : p2p->ops->wait(p2p, reqs, 2);
}

/* Whether two ranks made the same call (everything but the history, which says whether they agree about the
 * calls before it). */
static int same_call(const pycoll_coll_desc_t *a, const pycoll_coll_desc_t *b)
{
    return a->seq == b->seq && a->count == b->count && a->root == b->root && a->coll == b->coll &&
           a->dtype == b->dtype && a->op == b->op && a->algorithm == b->algorithm && a->accuracy == b->accuracy;
}

static pycoll_status_t name_both(pycoll_p2p_t *p2p, int32_t peer, const pycoll_coll_desc_t *mine,
                                 const pycoll_coll_desc_t *theirs, const char *context, const char *why)
{
    char a[160], b[160];
    pycoll_describe_coll(mine, a, sizeof a);
    pycoll_describe_coll(theirs, b, sizeof b);
    return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, peer, "collective mismatch%s: rank %d called %s, but rank %d "
                           "called %s%s", context, (int)p2p->rank, a, (int)peer, b, why);
}

_Static_assert(sizeof(pycoll_coll_desc_t) == 40, "the descriptor is sent as is: its size is part of the wire format");

static _Atomic(p2p_group_namer_t) group_namer;

void p2p_set_group_namer(p2p_group_namer_t namer) { atomic_store(&group_namer, namer); }

void p2p_group_name(const pycoll_p2p_t *p2p, uint32_t group, char *out, size_t len)
{
    p2p_group_namer_t namer = atomic_load(&group_namer);
    if (!namer || !namer(p2p, group, out, len))
        snprintf(out, len, "group #%08x", (unsigned)group);
}

/* Rank `peer` is in `theirs`, a collective of another communicator of this family (desc.group differs), where
 * this rank needs it in its current one: the two called the family's communicators in different orders. */
static pycoll_status_t order_mismatch(pycoll_p2p_t *p2p, int32_t peer, const pycoll_coll_desc_t *theirs)
{
    char a[160], b[160], ga[96], gb[96];
    pycoll_describe_coll(&p2p->desc, a, sizeof a);
    pycoll_describe_coll(theirs, b, sizeof b);
    p2p_group_name(p2p, p2p->desc.group, ga, sizeof ga);
    p2p_group_name(p2p, theirs->group, gb, sizeof gb);
    return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, peer,
                           "collective order mismatch: rank %d is in %s on %s, but rank %d is in %s on %s; ranks "
                           "that share several communicators (a parent and its splits) must call collectives on them "
                           "in the same order", (int)p2p->rank, a, ga, (int)peer, b, gb);
}

pycoll_status_t pycoll_p2p_mismatch(pycoll_p2p_t *p2p, int32_t peer, const pycoll_coll_desc_t *theirs,
                                    const pycoll_coll_desc_t *theirs_prev, const char *context)
{
    const pycoll_coll_desc_t *mine = &p2p->desc, *mine_prev = &p2p->prev_desc;
    if (theirs->group != mine->group)
        return order_mismatch(p2p, peer, theirs);
    if (theirs->seq == mine->seq) {
        if (!same_call(theirs, mine))
            return name_both(p2p, peer, mine, theirs, context, "");
        if (pycoll_desc_thread(theirs) != pycoll_desc_thread(mine)) {
            char a[160];
            pycoll_describe_coll(mine, a, sizeof a);
            return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, peer,
                                   "collective mismatch%s: rank %d called %s from thread #%06x, but rank %d called "
                                   "it from thread #%06x: threads that share a communicator took their turns in "
                                   "different orders on the two ranks (a thread's tag hashes its name)",
                                   context, (int)p2p->rank, a, (unsigned)pycoll_desc_thread(mine), (int)peer,
                                   (unsigned)pycoll_desc_thread(theirs));
        }
        if (theirs_prev && !same_call(theirs_prev, mine_prev))
            return name_both(p2p, peer, mine_prev, theirs_prev, context, "");
        return name_both(p2p, peer, mine, theirs, context,
                         " -- the same call, after different earlier ones (their collective histories differ)");
    }
    if (theirs->seq + 1 == mine->seq && !same_call(theirs, mine_prev))
        return name_both(p2p, peer, mine_prev, theirs, context, " (its message was never received)");
    if (theirs->seq == mine->seq + 1 && theirs_prev && !same_call(theirs_prev, mine))
        return name_both(p2p, peer, mine, theirs_prev, context, "");
    return name_both(p2p, peer, mine, theirs, context, "");
}

uint64_t pycoll_history_next(const pycoll_coll_desc_t *desc)
{
    /* FNV-1a over the descriptor's bytes (history included, so it chains); the same on every host. */
    const unsigned char *p = (const unsigned char *)desc;
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < sizeof *desc; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}
