/* Point-to-point over a vendor communicator: pycoll_vendor_send_recv, and the communicator as a pycoll transport
 * (pycoll_p2p_ops_t), so pycoll's own algorithms (native/algorithms) run over the vendor's send/recv. Every
 * batch of sends and receives is one vendor group (ncclGroupStart/End): the vendor progresses a group's
 * operations together, so two ranks that send to each other before receiving never wait on each other, while
 * separate groups run one after another and a send completes only once its peer receives it (past the per-peer
 * buffer, NCCL_BUFFSIZE): nccl.h, "sends and receives that must progress concurrently must be in one group". */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/memory_kernels.h"
#include "vendor_common.h"

static int accepted(const pycoll_vendor_t *v, int r)
{
    return r == 0 || r == v->in_progress;
}

/* How long the host waits after issuing a group: until the device has run it (WAIT_DONE: the host reads or
 * reuses the buffers next), or only until the vendor has enqueued it (WAIT_ENQUEUED: what follows is queued
 * on the same stream, which orders it after the group). */
enum { WAIT_DONE, WAIT_ENQUEUED };

/* Issue the requests of the list `head` in one group on `stream`, each of nbytes / elem_size elements of the
 * vendor's dtype vd, and wait for them (`wait`) until deadline. The deadline message names the calls made; a
 * failed call names itself. */
static pycoll_status_t issue_group_locked(pycoll_vendor_comm_t *c, pycoll_request_t *head, int vd,
                                          int64_t elem_size, void *stream, int wait, int64_t deadline);

/* Under the communicator's lock (vendor_async.c: its watchdog may abort it). */
static pycoll_status_t issue_group(pycoll_vendor_comm_t *c, pycoll_request_t *head, int vd, int64_t elem_size,
                                   void *stream, int wait, int64_t deadline)
{
    vendor_comm_lock(c);
    pycoll_status_t st = c->state.status != PYCOLL_OK
                             ? c->state.status
                             : issue_group_locked(c, head, vd, elem_size, stream, wait, deadline);
    vendor_comm_unlock(c);
    return st;
}

static pycoll_status_t issue_group_locked(pycoll_vendor_comm_t *c, pycoll_request_t *head, int vd,
                                          int64_t elem_size, void *stream, int wait, int64_t deadline)
{
    const pycoll_vendor_t *v = c->v;
    const char *send = vendor_call_name(v, PYCOLL_VENDOR_CALL_SEND);
    const char *recv = vendor_call_name(v, PYCOLL_VENDOR_CALL_RECV);
    int r = v->group_start();
    if (r != 0 && v->refused && v->refused(r)) /* nothing issued (HCCL without HcclBatchSendRecv) */
        return vendor_reject(c, v->status_of(r), "%s: %s refused the group: %s (%s, %s %d); the communicator is "
                             "still usable", v->name, vendor_call_name(v, PYCOLL_VENDOR_CALL_GROUP_START),
                             v->error_string(r), vendor_result_name(v, r), v->code_label, r);
    if (r != 0)
        return vendor_fail_result(c, vendor_call_name(v, PYCOLL_VENDOR_CALL_GROUP_START), r);
    int sends = 0, recvs = 0;
    const char *failed = NULL;
    for (pycoll_request_t *req = head; req && !failed; req = req->next) {
        uint64_t count = (uint64_t)(req->nbytes / elem_size);
        r = req->is_send ? v->send(req->buf, count, vd, req->peer, c->comm, stream)
                         : v->recv(req->buf, count, vd, req->peer, c->comm, stream);
        sends += req->is_send;
        recvs += !req->is_send;
        if (!accepted(v, r))
            failed = req->is_send ? send : recv;
    }
    /* The group is closed even after a failed call: the vendor keeps the group depth per thread. */
    int end = v->group_end();
    if (!failed && !accepted(v, end)) {
        failed = vendor_call_name(v, PYCOLL_VENDOR_CALL_GROUP_END);
        r = end;
    }
    if (failed)
        return vendor_fail_result(c, failed, r);
    char both[96];
    snprintf(both, sizeof both, "%s/%s", send, recv);
    if (strcmp(send, recv) == 0) /* one call serves both (HcclBatchSendRecv) */
        snprintf(both, sizeof both, "%s", send);
    const char *what = sends && recvs ? both : sends ? send : recv;
    return wait == WAIT_ENQUEUED ? vendor_accepted(c, what, end, deadline)
                                 : vendor_finish(c, what, end, stream, deadline);
}

static pycoll_status_t check_peer(pycoll_vendor_comm_t *c, const char *what, int32_t peer)
{
    if (peer != -1 && (peer < 0 || peer >= c->state.size || peer == c->state.rank))
        return vendor_reject(c, PYCOLL_ERR_INVALID,
                             "%s: %s peer %d is not another rank of a %d-rank communicator (rank %d)", c->v->name,
                             what, (int)peer, (int)c->state.size, (int)c->state.rank);
    return PYCOLL_OK;
}

static pycoll_status_t check_send_recv(pycoll_vendor_comm_t *c)
{
    const pycoll_vendor_t *v = c->v;
    if (!v->send || !v->recv || !v->group_start || !v->group_end)
        return vendor_reject(c, PYCOLL_ERR_UNSUPPORTED, "%s: the vendor has no point-to-point calls", v->name);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_vendor_send_recv(pycoll_vendor_comm_t *c, const void *sendbuf, int64_t send_count,
                                        int32_t send_peer, void *recvbuf, int64_t recv_count, int32_t recv_peer,
                                        pycoll_dtype_t dtype, void *stream)
{
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
    int vd = 0;
    pycoll_status_t st = check_send_recv(c);
    if (st == PYCOLL_OK)
        st = vendor_begin(c, send_count, dtype, -1, -1, &vd, NULL);
    if (st == PYCOLL_OK)
        st = vendor_begin(c, recv_count, dtype, -1, -1, &vd, NULL);
    if (st == PYCOLL_OK)
        st = check_peer(c, "send", send_peer);
    if (st == PYCOLL_OK)
        st = check_peer(c, "receive", recv_peer);
    if (st != PYCOLL_OK || (send_peer == -1 && recv_peer == -1))
        return st;
    if (!stream)
        stream = c->own_stream; /* the caller gave none: the communicator's own, if it has one */
    int64_t size = (int64_t)pycoll_dtype_size(dtype);
    pycoll_request_t recv = {.buf = recvbuf, .nbytes = recv_count * size, .peer = recv_peer};
    pycoll_request_t send = {.buf = (void *)sendbuf, .nbytes = send_count * size, .peer = send_peer, .is_send = 1,
                             .next = recv_peer == -1 ? NULL : &recv};
    vendor_join_collectives(c, stream);
    return issue_group(c, send_peer == -1 ? &recv : &send, vd, size, stream, WAIT_DONE, deadline);
}

/* ---- the transport ---- */

static pycoll_vendor_comm_t *comm_of(pycoll_p2p_t *p2p)
{
    return (pycoll_vendor_comm_t *)p2p; /* state is the first member */
}

/* Queued until a wait needs it: the vendor matches sends and receives per pair of ranks in the order they are
 * issued, which is the order they were posted (tags are not sent; the algorithms post in the same order on both
 * sides). */
static pycoll_status_t p2p_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    pycoll_vendor_comm_t *c = comm_of(p2p);
    if (p2p->status != PYCOLL_OK)
        return p2p->status;
    if (req->peer < 0 || req->peer >= p2p->size || req->peer == p2p->rank || req->nbytes < 0)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "%s transport: %s of %lld bytes with peer %d on rank "
                               "%d of %d", c->v->name, req->is_send ? "send" : "receive", (long long)req->nbytes,
                               (int)req->peer, (int)p2p->rank, (int)p2p->size);
    req->complete = 0;
    req->next = NULL;
    if (c->posted_tail)
        c->posted_tail->next = req;
    else
        c->posted = req;
    c->posted_tail = req;
    return PYCOLL_OK;
}

/* Which requests go in the group a wait issues. A group completes only as a whole, so it must hold exactly what
 * has to progress together on every rank at once: a send beyond the peer's buffer completes only when the peer's
 * matching receive runs in a group of its own that is active at the same time, and a receive completes only
 * when the peer's send is. The schedules number their units with tags (phase_tag: phase, then step or segment),
 * the same unit having the same tag on both sides of every transfer, and wait for units in that order. So a wait
 * issues every posted request whose tag is at most the highest tag it waits for, sends and receives alike:
 * - a ring's unit t is {send t to the right, receive t from the left} on every rank -- lock step, where issuing
 *   every step-0 segment send beside one receive left both ranks blocked in their sends past the buffer;
 * - a receive posted ahead (the ring's next segments, a broadcast's later segments) stays queued until its unit
 *   is waited for: its peer makes the matching send only after the wait for an earlier unit;
 * - a schedule that exchanges with everyone in one step (mesh, all-to-all) posts it all under one tag: one group.
 * Nothing is issued when every request waited for has already completed (an earlier group carried it). */
static pycoll_status_t p2p_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    pycoll_vendor_comm_t *c = comm_of(p2p);
    int pending = 0;
    uint32_t upto = 0;
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete) {
            pending = 1;
            upto = reqs[i]->tag > upto ? reqs[i]->tag : upto;
        }
    if (!pending)
        return p2p->status;
    pycoll_request_t *issue = NULL, **issue_end = &issue, *queue = c->posted;
    c->posted = c->posted_tail = NULL;
    for (pycoll_request_t *req = queue, *next; req; req = next) {
        next = req->next;
        req->next = NULL;
        if (req->tag <= upto) {
            *issue_end = req;
            issue_end = &req->next;
        } else if (c->posted_tail) {
            c->posted_tail = c->posted_tail->next = req;
        } else {
            c->posted = c->posted_tail = req;
        }
    }
    /* A stream-ordered table queues the schedule's kernels and copies on c->stream behind this group: no host
     * wait per step; pycoll_vendor_comm_sync waits once for the whole schedule. */
    int wait = memory_stream_ordered(c->state.kernels) ? WAIT_ENQUEUED : WAIT_DONE;
    pycoll_status_t st = p2p->status;
    if (st == PYCOLL_OK && issue)
        st = issue_group(c, issue, c->v->dtypes[PYCOLL_UINT8], 1, c->stream, wait, p2p->deadline_ns);
    for (pycoll_request_t *req = issue; req; req = req->next)
        req->complete = st == PYCOLL_OK;
    for (int i = 0; st == PYCOLL_OK && i < n; i++)
        if (!reqs[i]->complete)
            st = pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "%s transport: waited on a request never posted",
                                 c->v->name);
    return st;
}

/* The peers learn of it through the vendor: aborting the communicator fails their pending calls. Bounded as
 * every teardown is (vendor_abort_now): HCCL's abort is its destroy, which behind a task stuck on a dead peer
 * never returns. */
static void p2p_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message)
{
    (void)why;
    (void)message;
    pycoll_vendor_comm_t *c = comm_of(p2p);
    vendor_comm_lock(c);
    vendor_abort_now(c);
    vendor_comm_unlock(c);
}

/* Nothing to free: the vendor communicator outlives its pycoll communicator (pycoll_vendor_comm_destroy frees
 * it), and the algorithms' scratch belongs to the pycoll communicator. */
static void p2p_destroy(pycoll_p2p_t *p2p)
{
    (void)p2p;
}

/* No finalize: the vendor carries no collective history to compare at close. */
static const pycoll_p2p_ops_t vendor_p2p_ops = PYCOLL_P2P_OPS(p2p, "vendor", .finalize = NULL);

/* Set by tests only (vendor_set_test_device_kernels): a process-wide table for every vendor's device memory. */
static _Atomic(const pycoll_memory_kernels_t *) test_device_kernels;

void vendor_set_test_device_kernels(const pycoll_memory_kernels_t *table)
{
    atomic_store(&test_device_kernels, table);
}

/* The memory table for buf's memory into *kernels (NULL: the host's, for memory the host reaches; device memory
 * needs its device's table); refused, saying why, where pycoll has none for it. */
static pycoll_status_t bind_kernels(pycoll_vendor_comm_t *c, void *stream, const void *buf,
                                    const pycoll_memory_kernels_t **out)
{
    const pycoll_memory_kernels_t *kernels = NULL;
    if (!c->v->host_memory || !c->v->host_memory(buf)) {
        char why[160] = "";
        kernels = atomic_load(&test_device_kernels);
        if (!kernels && c->v->device_kernels)
            kernels = c->v->device_kernels(&c->state, stream, buf, why, sizeof why);
        else if (!kernels)
            snprintf(why, sizeof why, "pycoll has no kernels for %s's device memory", c->v->name);
        if (!kernels)
            return vendor_reject(c, PYCOLL_ERR_UNSUPPORTED, "%s: this buffer is device memory (%s), where pycoll's "
                                 "own algorithms need its device kernel table, and %s", c->v->name,
                                 c->v->host_memory ? "the runtime says so" : "the vendor cannot say where a buffer "
                                 "lives", why);
    }
    *out = kernels;
    return PYCOLL_OK;
}

pycoll_p2p_t *pycoll_vendor_comm_p2p(pycoll_vendor_comm_t *c, void *stream, const void *buf)
{
    if (check_send_recv(c) != PYCOLL_OK)
        return NULL;
    if (!stream)
        stream = c->own_stream; /* HCCL refuses a NULL stream (HCCL_E_PTR) */
    /* The schedules touch collective data only through p2p->kernels (kernels/memory_kernels.h). */
    const pycoll_memory_kernels_t *kernels = NULL;
    if (bind_kernels(c, stream, buf, &kernels) != PYCOLL_OK)
        return NULL;
    c->state.kernels = kernels;
    c->state.ops = &vendor_p2p_ops;
    c->stream = stream;
    vendor_join_collectives(c, stream);
    return &c->state;
}

pycoll_status_t pycoll_vendor_comm_sync(pycoll_vendor_comm_t *c, void *stream)
{
    if (c->state.status != PYCOLL_OK)
        return c->state.status;
    if (!stream)
        stream = c->own_stream; /* where pycoll_vendor_comm_p2p put the transport's groups */
    vendor_comm_lock(c);
    pycoll_status_t st = vendor_finish(c, "pycoll's kernels", 0, stream, pycoll_now_ns() + c->timeout_ns);
    vendor_comm_unlock(c);
    return st;
}

/* ---- gather, scatter, all-to-all: one group of sends and receives, as ProcessGroupNCCL runs them ---- */

static pycoll_status_t check_counts(pycoll_vendor_comm_t *c, const char *what, const int64_t *counts)
{
    for (int32_t r = 0; counts && r < c->state.size; r++)
        if (counts[r] < 0)
            return vendor_reject(c, PYCOLL_ERR_INVALID, "%s: %s count for rank %d is %lld (< 0)", c->v->name, what,
                                 (int)r, (long long)counts[r]);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_vendor_exchange(pycoll_vendor_comm_t *c, const void *sendbuf, const int64_t *send_counts,
                                       void *recvbuf, const int64_t *recv_counts, int32_t ncounts,
                                       pycoll_dtype_t dtype, void *stream)
{
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
    const int32_t size = c->state.size, me = c->state.rank;
    int vd = 0;
    pycoll_status_t st = check_send_recv(c);
    if (st == PYCOLL_OK)
        st = vendor_begin(c, 0, dtype, -1, -1, &vd, NULL);
    if (st == PYCOLL_OK && (send_counts || recv_counts) && ncounts != size)
        st = vendor_reject(c, PYCOLL_ERR_INVALID, "%s: %d counts for a %d-rank communicator (one per rank)",
                           c->v->name, (int)ncounts, (int)size);
    if (st == PYCOLL_OK)
        st = check_counts(c, "send", send_counts);
    if (st == PYCOLL_OK)
        st = check_counts(c, "receive", recv_counts);
    int64_t own_send = send_counts ? send_counts[me] : 0, own_recv = recv_counts ? recv_counts[me] : 0;
    if (st == PYCOLL_OK && own_send != own_recv)
        st = vendor_reject(c, PYCOLL_ERR_INVALID, "%s: rank %d sends itself %lld elements but receives %lld from "
                           "itself", c->v->name, (int)me, (long long)own_send, (long long)own_recv);
    if (st != PYCOLL_OK)
        return st;
    if (!stream)
        stream = c->own_stream;
    const int64_t elem = (int64_t)pycoll_dtype_size(dtype);
    /* The block a rank sends itself never meets the vendor (NCCL takes a send to oneself, HCCL's point-to-point
     * does not say it does): it is copied on the stream, before the group, by the memory's own table. */
    const pycoll_memory_kernels_t *kernels = NULL;
    if (own_send > 0 && (st = bind_kernels(c, stream, recvbuf, &kernels)) != PYCOLL_OK)
        return st;
    vendor_join_collectives(c, stream);
    pycoll_request_t *reqs = calloc((size_t)(2 * size), sizeof *reqs);
    if (!reqs)
        return vendor_reject(c, PYCOLL_ERR_NOMEM, "%s: out of memory for a group of %d messages", c->v->name,
                             (int)(2 * size));
    pycoll_request_t *head = NULL, **tail = &head;
    int64_t send_at = 0, recv_at = 0, own_send_at = 0, own_recv_at = 0;
    for (int32_t r = 0; r < size; r++) {
        int64_t ns = send_counts ? send_counts[r] : 0, nr = recv_counts ? recv_counts[r] : 0;
        if (r == me) {
            own_send_at = send_at;
            own_recv_at = recv_at;
        } else {
            if (nr > 0) {
                pycoll_request_t *q = &reqs[2 * r];
                *q = (pycoll_request_t){.buf = (char *)recvbuf + recv_at * elem, .nbytes = nr * elem, .peer = r};
                *tail = q;
                tail = &q->next;
            }
            if (ns > 0) {
                pycoll_request_t *q = &reqs[2 * r + 1];
                *q = (pycoll_request_t){.buf = (char *)sendbuf + send_at * elem, .nbytes = ns * elem, .peer = r,
                                        .is_send = 1};
                *tail = q;
                tail = &q->next;
            }
        }
        send_at += ns;
        recv_at += nr;
    }
    if (own_send > 0) {
        void *dst = (char *)recvbuf + own_recv_at * elem;
        const void *src = (const char *)sendbuf + own_send_at * elem;
        if (!kernels)
            memmove(dst, src, (size_t)(own_send * elem));
        else if ((st = kernels->copy(dst, src, own_send * elem)) != PYCOLL_OK)
            st = vendor_reject(c, st, "%s: copying rank %d's own block: %s", c->v->name, (int)me,
                               kernels->last_error ? kernels->last_error() : "the device copy failed");
    }
    if (st == PYCOLL_OK && head) {
        st = issue_group(c, head, vd, elem, stream, WAIT_DONE, deadline);
    } else if (st == PYCOLL_OK && own_send > 0) { /* one rank, or nothing to exchange: the copy still finishes */
        vendor_comm_lock(c);
        st = vendor_finish(c, "pycoll's kernels", 0, stream, deadline);
        vendor_comm_unlock(c);
    }
    free(reqs);
    return st;
}
