/* Collectives that return once enqueued, and the one watchdog thread per communicator that finishes them: the
 * model of torch's ProcessGroupNCCL (its watchdog polls each work's CUDA event and ncclCommGetAsyncError, and
 * aborts the communicator when a work passes its timeout). Here each work is an event the vendor's runtime
 * records behind the call on its stream; the watchdog looks at every pending work in turn, sleeping briefly
 * between rounds (yielding the core for the first POLL_SPIN_NS, as the synchronous wait does), and sleeps on a
 * condition while there is none. A work is finished when its event has completed (PYCOLL_OK), or when the
 * communicator broke -- the vendor's asynchronous error, a work past its deadline, a failed later call: then
 * the communicator is aborted (bounded: vendor_abort_now) and every pending work fails with its first error. */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vendor_common.h"

#define POLL_SPIN_NS 2000000
#define POLL_SLEEP_NS 50000

struct pycoll_vendor_work {
    pthread_mutex_t lock;
    pthread_cond_t finished_cond;
    int finished;               /* under lock: 1 once status is final */
    pycoll_status_t status;
    char error[512];
    int refs;                   /* under lock: the caller's and the watchdog's */
    const pycoll_vendor_t *v;
    void *event;                /* recorded behind the collective, on the stream it ran on */
    int host_visible;           /* the host reads its buffers: a stream wait cannot serve it */
    int64_t deadline_ns;
    char what[64];
    struct pycoll_vendor_work *next; /* in the communicator's pending list */
};

void vendor_comm_lock_init(pycoll_vendor_comm_t *c)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_cond_init(&c->watchdog_wake, NULL);
}

void vendor_comm_lock(pycoll_vendor_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
}

void vendor_comm_unlock(pycoll_vendor_comm_t *c)
{
    pthread_mutex_unlock(&c->lock);
}

static void work_release(pycoll_vendor_work_t *w)
{
    pthread_mutex_lock(&w->lock);
    int left = --w->refs;
    pthread_mutex_unlock(&w->lock);
    if (left > 0)
        return;
    if (w->event)
        w->v->event_destroy(w->event);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->finished_cond);
    free(w);
}

static void work_finish(pycoll_vendor_work_t *w, pycoll_status_t status, const char *error)
{
    pthread_mutex_lock(&w->lock);
    w->status = status;
    snprintf(w->error, sizeof w->error, "%s", error ? error : "");
    w->finished = 1;
    pthread_cond_broadcast(&w->finished_cond);
    pthread_mutex_unlock(&w->lock);
}

/* Under c->lock: every pending work finished with the communicator's error, and dropped from the list. */
static void fail_pending(pycoll_vendor_comm_t *c, pycoll_status_t status, const char *error)
{
    for (pycoll_vendor_work_t *w = c->pending, *next; w; w = next) {
        next = w->next;
        work_finish(w, status, error);
        work_release(w);
    }
    c->pending = NULL;
}

/* One look at the pending works, under c->lock: finished ones leave the list; 1 while some are left. */
static int watch_once(pycoll_vendor_comm_t *c)
{
    const pycoll_vendor_t *v = c->v;
    pycoll_vendor_work_t **p = &c->pending;
    while (*p && c->state.status == PYCOLL_OK) {
        pycoll_vendor_work_t *w = *p;
        int q = v->event_query(w->event);
        if (q == 0) {
            *p = w->next;
            work_finish(w, PYCOLL_OK, NULL);
            work_release(w);
            continue;
        }
        int busy = 0;
        if (vendor_poll_async(c, w->what, &busy) != PYCOLL_OK)
            break; /* aborted by vendor_fail_result: every pending work fails below */
        if (q != v->stream_busy) {
            pycoll_p2p_fail(&c->state, PYCOLL_ERR_SYSTEM, -1, "%s: waiting for %s failed: %s (code %d)", v->name,
                            w->what, v->runtime_error ? v->runtime_error(q) : "runtime error", q);
            vendor_abort_now(c);
            break;
        }
        if (pycoll_now_ns() >= w->deadline_ns) {
            vendor_abort_on_deadline(c, w->what);
            break;
        }
        p = &w->next;
    }
    if (c->state.status != PYCOLL_OK)
        fail_pending(c, c->state.status, c->state.error);
    return c->pending != NULL;
}

/* Before its first query the watchdog takes the communicator's device (or ACL context): without it, CUDA
 * would make device 0's primary context current on this thread, and AscendCL refuses the queries. A failure
 * there breaks the communicator (its works fail with the reason) rather than querying on the wrong device. */
static void bind_watchdog(pycoll_vendor_comm_t *c)
{
    const pycoll_vendor_t *v = c->v;
    int r = v->bind_thread ? v->bind_thread(c->device, c->comm) : 0;
    if (r == 0)
        return;
    vendor_comm_lock(c);
    pycoll_p2p_fail(&c->state, PYCOLL_ERR_SYSTEM, -1,
                    "%s: the watchdog thread could not make the communicator's device (%d) current: %s (code %d)",
                    v->name, (int)c->device, v->runtime_error ? v->runtime_error(r) : "runtime error", r);
    vendor_abort_now(c);
    vendor_comm_unlock(c);
}

static void *watchdog(void *arg)
{
    pycoll_vendor_comm_t *c = arg;
    int64_t busy_since = 0;
    bind_watchdog(c);
    vendor_comm_lock(c);
    while (!c->watchdog_stop) {
        if (!watch_once(c)) {
            busy_since = 0;
            pthread_cond_wait(&c->watchdog_wake, &c->lock);
            continue;
        }
        vendor_comm_unlock(c);
        int64_t now = pycoll_now_ns();
        if (!busy_since)
            busy_since = now;
        if (now - busy_since < POLL_SPIN_NS) {
            sched_yield();
        } else {
            struct timespec ts = {0, POLL_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
        vendor_comm_lock(c);
    }
    vendor_comm_unlock(c);
    return NULL;
}

pycoll_status_t vendor_enqueued(pycoll_vendor_comm_t *c, const char *what, void *stream, int host_visible,
                                int64_t deadline)
{
    const pycoll_vendor_t *v = c->v;
    pycoll_vendor_work_t *w = calloc(1, sizeof *w);
    if (!w)
        return vendor_wait_collective(c, what, stream, deadline); /* no memory for a work: complete it now */
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->finished_cond, NULL);
    w->v = v;
    w->refs = 2; /* the caller's (take_work) and the list's */
    w->deadline_ns = deadline;
    w->host_visible = host_visible;
    snprintf(w->what, sizeof w->what, "%s", what);
    int r = v->event_create(&w->event);
    if (r == 0)
        r = v->event_record(w->event, stream);
    if (r != 0 || (!c->watchdog_started && pthread_create(&c->watchdog, NULL, watchdog, c) != 0)) {
        if (r != 0 && w->event) {
            v->event_destroy(w->event);
            w->event = NULL;
        }
        w->refs = 1;
        work_release(w);
        return vendor_wait_collective(c, what, stream, deadline); /* no event or no thread: complete it now */
    }
    c->watchdog_started = 1;
    pycoll_vendor_work_t **tail = &c->pending;
    while (*tail)
        tail = &(*tail)->next;
    *tail = w;
    if (c->last_work)
        work_release(c->last_work); /* never taken */
    c->last_work = w;
    pthread_cond_signal(&c->watchdog_wake);
    return PYCOLL_OK;
}

void vendor_watchdog_stop(pycoll_vendor_comm_t *c)
{
    vendor_comm_lock(c);
    int started = c->watchdog_started;
    c->watchdog_stop = 1;
    pthread_cond_signal(&c->watchdog_wake);
    vendor_comm_unlock(c);
    if (started)
        pthread_join(c->watchdog, NULL);
    vendor_comm_lock(c);
    /* close() after async calls: their works finish first, each still bounded by its deadline (watch_once
     * aborts there), so a Work waited on after close() reports how its collective ended. */
    while (watch_once(c)) {
        vendor_comm_unlock(c);
        struct timespec ts = {0, POLL_SLEEP_NS};
        nanosleep(&ts, NULL);
        vendor_comm_lock(c);
    }
    fail_pending(c, PYCOLL_ERR_CLOSED, "the communicator was closed before the collective was seen to complete");
    if (c->last_work) {
        work_release(c->last_work);
        c->last_work = NULL;
    }
    c->watchdog_started = 0;
    vendor_comm_unlock(c);
}

void pycoll_vendor_comm_set_async(pycoll_vendor_comm_t *c, int on)
{
    const pycoll_vendor_t *v = c->v;
    vendor_comm_lock(c);
    c->async = on && v->event_create && v->event_record && v->event_query && v->event_destroy;
    vendor_comm_unlock(c);
}

pycoll_vendor_work_t *pycoll_vendor_comm_take_work(pycoll_vendor_comm_t *c)
{
    vendor_comm_lock(c);
    pycoll_vendor_work_t *w = c->last_work;
    c->last_work = NULL;
    vendor_comm_unlock(c);
    return w;
}

int pycoll_vendor_work_wait(pycoll_vendor_work_t *w, double timeout_s)
{
    pthread_mutex_lock(&w->lock);
    if (timeout_s < 0) {
        while (!w->finished)
            pthread_cond_wait(&w->finished_cond, &w->lock);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ns = (int64_t)until.tv_nsec + (int64_t)(timeout_s > 1e9 ? 1e18 : timeout_s * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        while (!w->finished && pthread_cond_timedwait(&w->finished_cond, &w->lock, &until) == 0) {
        }
    }
    int finished = w->finished;
    pthread_mutex_unlock(&w->lock);
    return finished;
}

pycoll_status_t pycoll_vendor_work_order_stream(pycoll_vendor_work_t *w, void *stream)
{
    const pycoll_vendor_t *v = w->v;
    if (w->host_visible || !v->stream_wait_event)
        return PYCOLL_ERR_UNSUPPORTED;
    /* A finished work needs no order (a failed one's error is the caller's to raise). */
    pthread_mutex_lock(&w->lock);
    int finished = w->finished;
    pthread_mutex_unlock(&w->lock);
    if (finished)
        return PYCOLL_OK;
    return v->stream_wait_event(stream, w->event) == 0 ? PYCOLL_OK : PYCOLL_ERR_UNSUPPORTED;
}

pycoll_status_t pycoll_vendor_work_status(pycoll_vendor_work_t *w, char *error, size_t error_len)
{
    pthread_mutex_lock(&w->lock);
    pycoll_status_t st = w->finished ? w->status : PYCOLL_ERR_BUSY;
    if (error && error_len)
        snprintf(error, error_len, "%s", w->finished ? w->error : "");
    pthread_mutex_unlock(&w->lock);
    return st;
}

void pycoll_vendor_work_release(pycoll_vendor_work_t *w)
{
    if (w)
        work_release(w);
}
