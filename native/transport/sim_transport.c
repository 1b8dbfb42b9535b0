/* In-process simulated transport: `size` ranks as threads of one process, each with its own pycoll_p2p_t,
 * exchanging through per-pair FIFO queues in memory. A send either pairs with the receive already posted for
 * it (and copies straight into it) or is copied into the receiver's queue, so a send never blocks, like a
 * well-buffered socket. Messages carry the sender's collective descriptor and tag, checked like a real
 * transport checks its headers. One mutex guards all queues (ranks are many, critical sections short); large
 * copies run outside it. */
#include "pycoll/transports.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sim_message {
    struct sim_message *next;
    uint32_t tag;
    int64_t nbytes;
    pycoll_coll_desc_t desc;
    char data[];
} sim_message_t;

typedef struct sim_world sim_world_t;

typedef struct sim_rank {
    pycoll_p2p_t p2p; /* first, so a pycoll_p2p_t * is a sim_rank_t * */
    sim_world_t *world;
    pthread_t thread;
    pthread_cond_t wakeup;
    pycoll_coll_desc_t posted_desc;  /* this rank's desc at its latest post, read by senders under the lock */
    sim_message_t **msg_head, **msg_tail;     /* per source: sent, not yet received */
    pycoll_request_t **recv_head, **recv_tail; /* per source: posted receives, not yet matched */
    int64_t inflight;  /* copies into this rank's buffers running outside the lock */
    bool needs_match;  /* a message was queued while receives were waiting: pair them in wait */
} sim_rank_t;

struct sim_world {
    int32_t size;
    pthread_mutex_t lock;
    bool failed;
    int32_t failed_rank;
    pycoll_status_t failed_status;
    char failed_message[PYCOLL_ERROR_LEN];
    sim_rank_t *ranks;
    pycoll_sim_rank_fn fn;
    void *arg;
};

static bool same_desc(const pycoll_coll_desc_t *a, const pycoll_coll_desc_t *b)
{
    return a->seq == b->seq && a->count == b->count && a->root == b->root && a->coll == b->coll &&
           a->dtype == b->dtype && a->op == b->op && a->algorithm == b->algorithm && a->accuracy == b->accuracy;
}

/* Called with the lock held, by the rank that fails: records the error on its p2p and on the world (the
 * first failure is the cause), wakes everyone, and waits until no sender is still copying into this rank's
 * buffers, which the caller may free once the error is returned. */
static pycoll_status_t fail_locked(sim_rank_t *me, pycoll_status_t status, int32_t failed_rank, const char *fmt,
                                   ...) __attribute__((format(printf, 4, 5)));
static pycoll_status_t fail_locked(sim_rank_t *me, pycoll_status_t status, int32_t failed_rank, const char *fmt,
                                   ...)
{
    sim_world_t *world = me->world;
    if (me->p2p.status == PYCOLL_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(me->p2p.error, sizeof me->p2p.error, fmt, ap);
        va_end(ap);
        me->p2p.status = status;
        me->p2p.failed_rank = failed_rank;
    }
    if (!world->failed) {
        world->failed = true;
        world->failed_rank = me->p2p.rank;
        world->failed_status = me->p2p.status;
        memcpy(world->failed_message, me->p2p.error, sizeof world->failed_message);
        for (int32_t r = 0; r < world->size; r++)
            pthread_cond_broadcast(&world->ranks[r].wakeup);
    }
    while (me->inflight > 0)
        pthread_cond_wait(&me->wakeup, &world->lock);
    return me->p2p.status;
}

static pycoll_status_t peer_failed_locked(sim_rank_t *me)
{
    sim_world_t *world = me->world;
    return fail_locked(me, PYCOLL_ERR_PEER_FAILURE, world->failed_rank, "rank %d: peer rank %d failed: %s",
                       (int)me->p2p.rank, (int)world->failed_rank, world->failed_message);
}

/* Check that a message from `src` is the one receive `req` expects; on a mismatch fail naming both sides. */
static pycoll_status_t check_match_locked(sim_rank_t *me, int32_t src, const pycoll_coll_desc_t *desc,
                                          uint32_t tag, int64_t nbytes, const pycoll_request_t *req)
{
    char mine[160], theirs[160];
    if (!same_desc(desc, &me->p2p.desc)) {
        pycoll_describe_coll(desc, theirs, sizeof theirs);
        pycoll_describe_coll(&me->p2p.desc, mine, sizeof mine);
        return fail_locked(me, PYCOLL_ERR_MISMATCH, src, "rank %d called %s but rank %d called %s", (int)src,
                           theirs, (int)me->p2p.rank, mine);
    }
    if (tag != req->tag || nbytes != req->nbytes) {
        pycoll_describe_coll(&me->p2p.desc, mine, sizeof mine);
        return fail_locked(me, PYCOLL_ERR_MISMATCH, src,
                           "in %s rank %d received a message of %lld bytes with tag 0x%x from rank %d but expected "
                           "%lld bytes with tag 0x%x: the ranks run different schedules",
                           mine, (int)me->p2p.rank, (long long)nbytes, (unsigned)tag, (int)src,
                           (long long)req->nbytes, (unsigned)req->tag);
    }
    return PYCOLL_OK;
}

/* The per-source queues of messages and of receives: FIFO lists kept as a head and a tail, linked by next. */
#define QUEUE_PUSH(head, tail, entry)                                                                         \
    do {                                                                                                      \
        if (tail)                                                                                             \
            (tail)->next = (entry);                                                                           \
        else                                                                                                  \
            (head) = (entry);                                                                                 \
        (tail) = (entry);                                                                                     \
    } while (0)
#define QUEUE_POP(head, tail, entry)                                                                          \
    do {                                                                                                      \
        (entry) = (head);                                                                                     \
        (head) = (entry)->next;                                                                               \
        if (!(head))                                                                                          \
            (tail) = NULL;                                                                                    \
        (entry)->next = NULL;                                                                                 \
    } while (0)

static sim_message_t *pop_message(sim_rank_t *rank, int32_t src)
{
    sim_message_t *m;
    QUEUE_POP(rank->msg_head[src], rank->msg_tail[src], m);
    return m;
}

static pycoll_request_t *pop_recv(sim_rank_t *rank, int32_t src)
{
    pycoll_request_t *r;
    QUEUE_POP(rank->recv_head[src], rank->recv_tail[src], r);
    return r;
}

/* Deliver a queued message into a receive (lock held, on the receiver's thread). */
static pycoll_status_t deliver_locked(sim_rank_t *me, int32_t src, sim_message_t *m, pycoll_request_t *req)
{
    pycoll_status_t status = check_match_locked(me, src, &m->desc, m->tag, m->nbytes, req);
    if (status == PYCOLL_OK) {
        if (m->nbytes > 0)
            memcpy(req->buf, m->data, (size_t)m->nbytes);
        req->progress = m->nbytes;
        req->complete = 1;
    }
    free(m);
    return status;
}

static pycoll_status_t match_queued_locked(sim_rank_t *me)
{
    me->needs_match = false;
    for (int32_t src = 0; src < me->world->size; src++) {
        while (me->msg_head[src] && me->recv_head[src]) {
            sim_message_t *m = pop_message(me, src);
            pycoll_status_t status = deliver_locked(me, src, m, pop_recv(me, src));
            if (status != PYCOLL_OK)
                return status;
        }
    }
    return PYCOLL_OK;
}

static pycoll_status_t sim_post_send(sim_rank_t *me, pycoll_request_t *req)
{
    sim_world_t *world = me->world;
    sim_rank_t *dst = &world->ranks[req->peer];
    const int32_t src = me->p2p.rank;
    pycoll_request_t *waiting = dst->recv_head[src];
    if (waiting && !dst->msg_head[src] && waiting->tag == req->tag && waiting->nbytes == req->nbytes &&
        same_desc(&me->p2p.desc, &dst->posted_desc)) {
        /* The receive is already posted: copy straight into it, outside the lock. */
        pop_recv(dst, src);
        dst->inflight++;
        pthread_mutex_unlock(&world->lock);
        if (req->nbytes > 0)
            memcpy(waiting->buf, req->buf, (size_t)req->nbytes);
        pthread_mutex_lock(&world->lock);
        waiting->progress = req->nbytes;
        waiting->complete = 1;
        dst->inflight--;
        pthread_cond_broadcast(&dst->wakeup);
    } else {
        pthread_mutex_unlock(&world->lock);
        sim_message_t *m = malloc(sizeof *m + (size_t)req->nbytes);
        if (m) {
            *m = (sim_message_t){.tag = req->tag, .nbytes = req->nbytes, .desc = me->p2p.desc};
            if (req->nbytes > 0)
                memcpy(m->data, req->buf, (size_t)req->nbytes);
        }
        pthread_mutex_lock(&world->lock);
        if (!m)
            return fail_locked(me, PYCOLL_ERR_NOMEM, -1, "rank %d: out of memory queueing %lld bytes for rank %d",
                               (int)src, (long long)req->nbytes, (int)req->peer);
        if (world->failed) {
            free(m);
            return peer_failed_locked(me);
        }
        QUEUE_PUSH(dst->msg_head[src], dst->msg_tail[src], m);
        if (dst->recv_head[src])
            dst->needs_match = true;
        pthread_cond_broadcast(&dst->wakeup);
    }
    req->progress = req->nbytes;
    req->complete = 1;
    return PYCOLL_OK;
}

static pycoll_status_t sim_post_recv(sim_rank_t *me, pycoll_request_t *req)
{
    const int32_t src = req->peer;
    if (me->msg_head[src] && !me->recv_head[src])
        return deliver_locked(me, src, pop_message(me, src), req);
    QUEUE_PUSH(me->recv_head[src], me->recv_tail[src], req);
    return PYCOLL_OK;
}

static pycoll_status_t sim_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    sim_rank_t *me = (sim_rank_t *)p2p;
    sim_world_t *world = me->world;
    if (req->peer < 0 || req->peer >= p2p->size || req->peer == p2p->rank || req->nbytes < 0 ||
        (req->nbytes > 0 && !req->buf))
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, req->peer,
                               "rank %d: invalid request (peer %d, %lld bytes)", (int)p2p->rank, (int)req->peer,
                               (long long)req->nbytes);
    req->complete = 0;
    req->progress = 0;
    req->next = NULL;
    pthread_mutex_lock(&world->lock);
    pycoll_status_t status;
    if (p2p->status != PYCOLL_OK)
        status = p2p->status;
    else if (world->failed)
        status = peer_failed_locked(me);
    else {
        me->posted_desc = p2p->desc;
        status = req->is_send ? sim_post_send(me, req) : sim_post_recv(me, req);
    }
    pthread_mutex_unlock(&world->lock);
    return status;
}

static bool all_complete(pycoll_request_t *const *reqs, int n)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete)
            return false;
    return true;
}

static pycoll_status_t timeout_locked(sim_rank_t *me, pycoll_request_t *const *reqs, int n)
{
    const pycoll_request_t *pending = NULL;
    for (int i = 0; i < n && !pending; i++)
        if (!reqs[i]->complete)
            pending = reqs[i];
    char desc[160];
    pycoll_describe_coll(&me->p2p.desc, desc, sizeof desc);
    return fail_locked(me, PYCOLL_ERR_TIMEOUT, pending->peer,
                       "rank %d timed out in %s waiting to %s %lld bytes (tag 0x%x) %s rank %d", (int)me->p2p.rank,
                       desc, pending->is_send ? "send" : "receive", (long long)pending->nbytes,
                       (unsigned)pending->tag, pending->is_send ? "to" : "from", (int)pending->peer);
}

static pycoll_status_t sim_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    sim_rank_t *me = (sim_rank_t *)p2p;
    sim_world_t *world = me->world;
    pthread_mutex_lock(&world->lock);
    pycoll_status_t status = p2p->status;
    while (status == PYCOLL_OK) {
        if (me->needs_match && (status = match_queued_locked(me)) != PYCOLL_OK)
            break;
        if (all_complete(reqs, n))
            break;
        if (world->failed) {
            status = peer_failed_locked(me);
            break;
        }
        if (p2p->deadline_ns > 0) {
            const int64_t deadline = p2p->deadline_ns;
            if (pycoll_now_ns() >= deadline) {
                status = timeout_locked(me, reqs, n);
                break;
            }
            struct timespec until = {.tv_sec = deadline / 1000000000LL, .tv_nsec = deadline % 1000000000LL};
            pthread_cond_timedwait(&me->wakeup, &world->lock, &until);
        } else {
            pthread_cond_wait(&me->wakeup, &world->lock);
        }
    }
    pthread_mutex_unlock(&world->lock);
    return status;
}

static void sim_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message)
{
    sim_rank_t *me = (sim_rank_t *)p2p;
    pthread_mutex_lock(&me->world->lock);
    fail_locked(me, why, p2p->rank, "%s", message);
    pthread_mutex_unlock(&me->world->lock);
}

/* Ranks live and die with pycoll_sim_run, which frees them. */
static void sim_destroy(pycoll_p2p_t *p2p)
{
    (void)p2p;
}

static const pycoll_p2p_ops_t sim_ops = PYCOLL_P2P_OPS(sim, "sim", .finalize = NULL);

static void *rank_main(void *arg)
{
    sim_rank_t *me = arg;
    pycoll_p2p_t *p2p = &me->p2p;
    pycoll_status_t status = me->world->fn(p2p, me->world->arg, p2p->rank);
    if (status != PYCOLL_OK) {
        if (p2p->status == PYCOLL_OK)
            pycoll_p2p_fail(p2p, status, -1, "rank %d failed with status %d", (int)p2p->rank, (int)status);
        p2p->ops->abort(p2p, p2p->status, p2p->error);
    }
    return NULL;
}

static void free_rank(sim_rank_t *rank, int32_t size)
{
    for (int32_t src = 0; rank->msg_head && src < size; src++)
        while (rank->msg_head[src])
            free(pop_message(rank, src));
    free(rank->msg_head);
    free(rank->msg_tail);
    free(rank->recv_head);
    free(rank->recv_tail);
    pthread_cond_destroy(&rank->wakeup);
}

static void copy_error(char *error, size_t error_len, const char *message)
{
    if (error && error_len > 0)
        snprintf(error, error_len, "%s", message);
}

pycoll_status_t pycoll_sim_run(int32_t size, double timeout_s, pycoll_sim_rank_fn fn, void *arg, char *error,
                               size_t error_len)
{
    copy_error(error, error_len, "");
    if (size < 1 || !fn) {
        copy_error(error, error_len, size < 1 ? "sim: size must be >= 1" : "sim: no rank function");
        return PYCOLL_ERR_INVALID;
    }
    sim_world_t world = {.size = size, .fn = fn, .arg = arg, .failed_rank = -1};
    world.ranks = calloc((size_t)size, sizeof *world.ranks);
    if (!world.ranks) {
        copy_error(error, error_len, "sim: out of memory");
        return PYCOLL_ERR_NOMEM;
    }
    pthread_mutex_init(&world.lock, NULL);
    pthread_condattr_t cond_attr;
    pthread_condattr_init(&cond_attr);
    pthread_condattr_setclock(&cond_attr, CLOCK_MONOTONIC);
    const int64_t deadline = timeout_s > 0 ? pycoll_now_ns() + (int64_t)(timeout_s * 1e9) : 0;
    pycoll_status_t status = PYCOLL_OK;
    for (int32_t r = 0; r < size; r++) {
        sim_rank_t *rank = &world.ranks[r];
        rank->world = &world;
        rank->p2p = (pycoll_p2p_t){.ops = &sim_ops, .rank = r, .size = size, .deadline_ns = deadline,
                                   .status = PYCOLL_OK, .failed_rank = -1};
        pthread_cond_init(&rank->wakeup, &cond_attr);
        rank->msg_head = calloc((size_t)size, sizeof *rank->msg_head);
        rank->msg_tail = calloc((size_t)size, sizeof *rank->msg_tail);
        rank->recv_head = calloc((size_t)size, sizeof *rank->recv_head);
        rank->recv_tail = calloc((size_t)size, sizeof *rank->recv_tail);
        if (!rank->msg_head || !rank->msg_tail || !rank->recv_head || !rank->recv_tail)
            status = PYCOLL_ERR_NOMEM;
    }
    pthread_condattr_destroy(&cond_attr);
    int32_t started = 0;
    if (status == PYCOLL_OK) {
        pthread_attr_t thread_attr;
        pthread_attr_init(&thread_attr);
        pthread_attr_setstacksize(&thread_attr, 1 << 20); /* many ranks, shallow call stacks */
        for (; started < size; started++) {
            int rc = pthread_create(&world.ranks[started].thread, &thread_attr, rank_main, &world.ranks[started]);
            if (rc != 0) {
                /* Fail the ranks already running so they return instead of waiting for this one. */
                pthread_mutex_lock(&world.lock);
                fail_locked(&world.ranks[started], PYCOLL_ERR_SYSTEM, started,
                            "sim: could not start the thread of rank %d: %s", (int)started, strerror(rc));
                pthread_mutex_unlock(&world.lock);
                break;
            }
        }
        pthread_attr_destroy(&thread_attr);
    }
    for (int32_t r = 0; r < started; r++)
        pthread_join(world.ranks[r].thread, NULL);
    if (status != PYCOLL_OK) {
        copy_error(error, error_len, "sim: out of memory");
    } else if (world.failed) {
        status = world.failed_status;
        copy_error(error, error_len, world.failed_message);
    }
    for (int32_t r = 0; r < size; r++)
        free_rank(&world.ranks[r], size);
    free(world.ranks);
    pthread_mutex_destroy(&world.lock);
    return status;
}
