/* See fake_vendor.h. */
#define _POSIX_C_SOURCE 200809L
#include "fake_vendor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

fake_vendor_comm_t *fake_vendor_comm_new(const char *id, int rank, int nranks, int mismatch)
{
    fake_vendor_comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->rank = rank;
    c->nranks = nranks;
    c->fake = fake_comm_start(id, rank, nranks);
    fake_comm_set_mismatch_error(c->fake, mismatch);
    return c;
}

void fake_vendor_comm_end(fake_vendor_comm_t *c, const char *call, int abort)
{
    fake_log("%s rank=%d", call, c->rank);
    if (abort)
        fake_comm_abort(c->fake);
    else
        fake_comm_destroy(c->fake);
    free(c);
}

int fake_vendor_async_error(const fake_vendor_comm_t *c)
{
    return fake_comm_async_error(c->fake);
}

int fake_vendor_collective(const fake_vendor_t *v, const char *name, int kind, const void *send, void *recv,
                           size_t count, int dtype, int op, int root, fake_vendor_comm_t *c, void *stream)
{
    fake_log("%s rank=%d count=%zu dtype=%d op=%d root=%d stream=%#lx send=%#lx recv=%#lx", name, c->rank, count,
             dtype, op, root, (unsigned long)(uintptr_t)stream, (unsigned long)(uintptr_t)send,
             (unsigned long)(uintptr_t)recv);
    int injected = fake_injected(name);
    if (injected)
        return injected;
    if ((unsigned)dtype >= (unsigned)v->num_dtypes || v->dtypes[dtype] < 0 || (unsigned)op >= (unsigned)v->num_ops ||
        root < -1 || root >= c->nranks)
        return v->invalid_argument;
    fake_comm_enqueue(c->fake, kind, send, recv, count, v->dtypes[dtype], v->ops[op], root, stream,
                      fake_injected("async"));
    return 0;
}

fake_event_t *fake_event_new(void)
{
    return calloc(1, sizeof(fake_event_t));
}

void fake_event_record(fake_event_t *e, void *stream, const char *call)
{
    /* A marker of its own on the stream, as the runtime's record is: on the legacy stream it also waits for the
     * blocking streams' earlier work. */
    long long mark = fake_stream_submit(stream, NULL, NULL, NULL, 0);
    e->stream = stream;
    e->mark = mark > 0 ? mark : fake_stream_mark(stream);
    fake_log("%s stream=%#lx", call, (unsigned long)(uintptr_t)stream);
}

int fake_event_done(const fake_event_t *e)
{
    return fake_stream_reached(e->stream, e->mark);
}

int fake_wait_or_deadlock(int (*fn)(void *), void *arg, const char *what)
{
    const char *limit = getenv("FAKE_DEADLOCK_S");
    double seconds = limit ? atof(limit) : 8.0;
    struct timespec start, now, pause = {0, 200000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (fn(arg)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9 > seconds) {
            fake_log("%s deadlocked", what);
            return 1;
        }
        nanosleep(&pause, NULL);
    }
    return 0;
}

typedef struct mark_wait {
    void *stream;
    long long mark;
} mark_wait_t;

static int mark_pending(void *arg)
{
    const mark_wait_t *w = arg;
    return !fake_stream_reached(w->stream, w->mark);
}

int fake_wait_mark(void *stream, long long mark, const char *what)
{
    mark_wait_t w = {stream, mark};
    return fake_wait_or_deadlock(mark_pending, &w, what);
}

int fake_stream_sync(void *stream, const char *what)
{
    return fake_wait_mark(stream, fake_stream_mark(stream), what);
}

static void sleep_us(void *arg)
{
    long long us = (long long)(intptr_t)arg;
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

EXPORT long long fake_stream_sleep(void *stream, long long us)
{
    return fake_stream_submit(stream, sleep_us, (void *)(intptr_t)us, NULL, 0);
}

typedef struct copy_job {
    void *dst;
    const void *src;
    size_t nbytes;
    void *staged; /* the source as it was when the copy was queued (a pageable host source), or NULL */
} copy_job_t;

static void run_copy(void *arg)
{
    copy_job_t *c = arg;
    memmove(c->dst, c->staged ? c->staged : c->src, c->nbytes);
    free(c->staged);
    free(c);
}

long long fake_copy_async(void *stream, void *dst, const void *src, size_t nbytes, int snapshot)
{
    copy_job_t *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    *c = (copy_job_t){dst, src, nbytes, NULL};
    if (snapshot && nbytes) {
        c->staged = malloc(nbytes);
        if (!c->staged) {
            free(c);
            return -1;
        }
        memcpy(c->staged, src, nbytes);
    }
    long long mark = fake_stream_submit(stream, run_copy, c, NULL, 0);
    if (mark < 0) {
        free(c->staged);
        free(c);
    }
    return mark;
}
