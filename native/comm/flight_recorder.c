/* The flight recorder's ring and its hooks on the call path (flight_recorder.h). The call path writes entries;
 * trace_dump.c turns a snapshot of them into the dump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/flight_recorder.h"
#include "comm/flight_ring.h"
#include "common/settings.h"
#include "common/wait_tally.h"

flight_recorder_t *flight_recorder_create(void)
{
    const char *text = setting_text(SETTING_TRACE_BUFFER);
    const long long capacity = text ? atoll(text) : 0;
    if (capacity <= 0)
        return NULL;
    flight_recorder_t *r = calloc(1, sizeof *r);
    /* calloc: pages of a ring a communicator never fills are never touched, so cost no memory */
    flight_entry_t *ring = r ? calloc((size_t)capacity, sizeof *ring) : NULL;
    if (!ring) {
        free(r);
        return NULL;
    }
    r->ring = ring;
    r->capacity = (uint64_t)capacity;
    flight_signal_install();
    return r;
}

void flight_recorder_close(pycoll_comm_t *comm)
{
    flight_recorder_t *r = comm->recorder;
    if (!r)
        return;
    if (setting_flag(SETTING_TRACE_ON_CLOSE))
        flight_dump_to_dir(comm, "close");
    comm->recorder = NULL;
    free(r->ring);
    free(r);
}

/* The sequence lock of one entry: odd while its writer is inside. Readers copy, then check that the count did not
 * move; on x86 the fences cost nothing but keep the compiler from reordering. */
static void write_open(flight_entry_t *e)
{
    atomic_store_explicit(&e->lock, atomic_load_explicit(&e->lock, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void write_close(flight_entry_t *e)
{
    atomic_store_explicit(&e->lock, atomic_load_explicit(&e->lock, memory_order_relaxed) + 1, memory_order_release);
}

int flight_entry_read(const flight_entry_t *e, flight_entry_t *copy)
{
    for (int tries = 0; tries < 1000; tries++) {
        const uint32_t before = atomic_load_explicit(&e->lock, memory_order_acquire);
        if (before & 1)
            continue;
        memcpy((char *)copy + sizeof copy->lock, (const char *)e + sizeof e->lock, sizeof *e - sizeof e->lock);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&e->lock, memory_order_relaxed) == before)
            return 1;
    }
    return 0; /* a writer kept it busy: the dump leaves this one entry out rather than show a torn one */
}

int64_t flight_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

uint64_t flight_recorder_begin(pycoll_comm_t *comm, const comm_call_t *call, int is_async)
{
    flight_recorder_t *r = comm->recorder;
    if (!r || comm->internal)
        return 0;
    const pycoll_call_t *a = &call->args;
    const int p2p = comm_call_is_p2p(call);
    /* Atomic: threads may call one communicator at once (they take turns only later, progress.c). */
    const uint64_t id = atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed) + 1;
    const uint64_t seq = atomic_fetch_add_explicit(p2p ? &r->p2p_seq : &r->coll_seq, 1, memory_order_relaxed);
    flight_entry_t *e = &r->ring[(id - 1) % r->capacity];
    write_open(e);
    e->id = id;
    e->seq = seq;
    e->start_unix_ns = flight_realtime_ns();
    e->start_ns = pycoll_now_ns();
    e->end_ns = 0;
    e->count = call->count ? call->count : (a->send_count > a->recv_count ? a->send_count : a->recv_count);
    atomic_store_explicit(&e->waits.wait_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->waits.longest_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&e->waits.peer, -1, memory_order_relaxed);
    e->root = a->root;
    e->peer = p2p ? (a->dest >= 0 ? a->dest : a->source) : -1;
    e->collective = (uint8_t)a->collective;
    e->sends = p2p && a->dest >= 0;
    e->dtype = (uint8_t)a->dtype;
    e->op = (uint8_t)a->op;
    e->algorithm = PYCOLL_NUM_ALGOS; /* none yet */
    e->accuracy = (uint8_t)a->accuracy;
    e->is_async = (uint8_t)(is_async != 0);
    e->state = FLIGHT_RUNNING;
    e->transport = comm->family->transport->ops->name;
    e->error[0] = 0;
    write_close(e);
    if (!is_async)
        flight_recorder_runs(comm, id);
    return id;
}

void flight_recorder_runs(pycoll_comm_t *comm, uint64_t id)
{
    flight_recorder_t *r = comm->recorder;
    wait_tally_current = r && id ? &r->ring[(id - 1) % r->capacity].waits : NULL;
}

pycoll_status_t flight_recorder_end(pycoll_comm_t *comm, uint64_t id, pycoll_status_t st,
                                    pycoll_algorithm_t algorithm, const char *error)
{
    flight_recorder_t *r = comm->recorder;
    if (!r || !id)
        return st;
    wait_tally_current = NULL; /* this thread's call ends (an async call's on the progress thread) */
    flight_entry_t *e = &r->ring[(id - 1) % r->capacity];
    if (e->id != id)
        return st; /* so many calls came since that the ring holds it no more */
    write_open(e);
    e->end_ns = pycoll_now_ns();
    if (e->end_ns == e->start_ns)
        e->end_ns++; /* 0 means running */
    e->state = st == PYCOLL_OK ? FLIGHT_COMPLETED : FLIGHT_FAILED;
    if (e->collective != PYCOLL_COLL_SEND_RECV && (unsigned)algorithm < PYCOLL_NUM_ALGOS)
        e->algorithm = (uint8_t)algorithm;
    if (st != PYCOLL_OK)
        snprintf(e->error, sizeof e->error, "%s", error && error[0] ? error : "failed");
    write_close(e);
    /* The first failure only: every later call of a broken communicator fails too, and says nothing new. */
    if (st != PYCOLL_OK && !atomic_exchange(&r->failed, 1))
        flight_dump_all("error");
    return st;
}
