/* See fake_vendor.h. */
#define _POSIX_C_SOURCE 200809L
#include "fake_vendor.h"

#include <stdint.h>
#include <stdlib.h>
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
    e->stream = stream;
    e->mark = fake_stream_mark(stream);
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
