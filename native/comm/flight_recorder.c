/* The flight recorder's ring and its hooks on the call path (flight_recorder.h). The call path writes entries;
 * trace_dump.c turns a snapshot of them into the dump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/flight_clock.h"
#include "comm/flight_recorder.h"
#include "comm/flight_ring.h"
#include "common/settings.h"
#include "common/wait_tally.h"

flight_recorder_t *flight_recorder_create(void)
{
    const char *text = setting_text(SETTING_TRACE_BUFFER);
    const long long capacity = text ? atoll(text) : 0;
    if (capacity <= 0 || (unsigned long long)capacity > UINT32_MAX / 2)
        return NULL;
    /* Slots: the power of two from capacity up, so that a call finds its slot by a mask, not a division (tens of
     * cycles, on every call); a dump shows the last `capacity` of them. */
    uint64_t slots = 1;
    while (slots < (uint64_t)capacity)
        slots *= 2;
    flight_recorder_t *r = calloc(1, sizeof *r);
    flight_entry_t *ring = r ? aligned_alloc(64, (size_t)slots * sizeof *ring) : NULL;
    /* calloc: the pages of messages a communicator never fails with are never touched, so cost no memory */
    char(*errors)[FLIGHT_ERROR_LEN] = ring ? calloc((size_t)slots, sizeof *errors) : NULL;
    if (!errors) {
        free(ring);
        free(r);
        return NULL;
    }
    r->errors = errors;
    memset(ring, 0, (size_t)slots * sizeof *ring);
    r->ring = ring;
    r->mask = slots - 1;
    r->capacity = (uint64_t)capacity;
    flight_clock_init();
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
    free(r->errors);
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

int flight_entry_read(const flight_recorder_t *r, uint64_t slot, flight_entry_t *copy, char *error)
{
    const flight_entry_t *e = &r->ring[slot];
    for (int tries = 0; tries < 1000; tries++) {
        const uint32_t before = atomic_load_explicit(&e->lock, memory_order_acquire);
        if (before & 1)
            continue;
        memcpy(copy, e, sizeof *copy);
        memcpy(error, r->errors[slot], FLIGHT_ERROR_LEN);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&e->lock, memory_order_relaxed) == before) {
            error[FLIGHT_ERROR_LEN - 1] = 0;
            return 1;
        }
    }
    return 0; /* a writer kept it busy: the dump leaves this one entry out rather than show a torn one */
}

uint64_t flight_recorder_begin(pycoll_comm_t *comm, const comm_call_t *call, int is_async)
{
    flight_recorder_t *r = comm->recorder;
    if (!r || comm->internal)
        return 0;
    const pycoll_call_t *a = &call->args;
    const int p2p = comm_call_is_p2p(call);
    /* Atomic: threads may call one communicator at once (they take turns only later, progress.c). One
     * read-modify-write for a collective: its seq is the calls before it less the sends and receives. */
    const uint64_t id = atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed) + 1;
    const uint64_t seq = p2p ? atomic_fetch_add_explicit(&r->p2p_calls, 1, memory_order_relaxed)
                             : id - 1 - atomic_load_explicit(&r->p2p_calls, memory_order_relaxed);
    flight_entry_t *e = &r->ring[(id - 1) & r->mask];
    write_open(e);
    e->id = (uint32_t)id;
    e->seq = (uint32_t)seq;
    e->rank = p2p ? (a->dest >= 0 ? a->dest : a->source) : a->root;
    atomic_store_explicit(&e->wait_peer, -1, memory_order_relaxed);
    e->collective = (uint8_t)a->collective;
    e->sends = p2p && a->dest >= 0;
    e->dtype = (uint8_t)a->dtype;
    e->op = (uint8_t)a->op;
    e->algorithm = PYCOLL_NUM_ALGOS; /* none yet */
    e->accuracy = (uint8_t)a->accuracy;
    e->is_async = (uint8_t)(is_async != 0);
    e->state = FLIGHT_RUNNING;
    e->start_ticks = flight_clock_ticks();
    e->end_ticks = 0;
    e->count = call->count ? call->count : (a->send_count > a->recv_count ? a->send_count : a->recv_count);
    atomic_store_explicit(&e->wait_ns, 0, memory_order_relaxed);
    write_close(e);
    if (!is_async)
        flight_recorder_runs(comm, id);
    return id;
}

void flight_recorder_runs(pycoll_comm_t *comm, uint64_t id)
{
    flight_recorder_t *r = comm->recorder;
    flight_entry_t *e = r && id ? &r->ring[(id - 1) & r->mask] : NULL;
    wait_tally = (wait_tally_t){.wait_ns = e ? &e->wait_ns : NULL, .peer = e ? &e->wait_peer : NULL};
}

pycoll_status_t flight_recorder_end(pycoll_comm_t *comm, uint64_t id, pycoll_status_t st,
                                    pycoll_algorithm_t algorithm, const char *error)
{
    flight_recorder_t *r = comm->recorder;
    if (!r || !id)
        return st;
    wait_tally.wait_ns = NULL; /* this thread's call ends (an async call's on the progress thread) */
    const uint64_t slot = (id - 1) & r->mask;
    flight_entry_t *e = &r->ring[slot];
    if (e->id != (uint32_t)id)
        return st; /* so many calls came since that the ring holds it no more */
    write_open(e);
    e->end_ticks = flight_clock_ticks();
    if (e->end_ticks == e->start_ticks)
        e->end_ticks++; /* 0 means running */
    e->state = st == PYCOLL_OK ? FLIGHT_COMPLETED : FLIGHT_FAILED;
    if (e->collective != PYCOLL_COLL_SEND_RECV && (unsigned)algorithm < PYCOLL_NUM_ALGOS)
        e->algorithm = (uint8_t)algorithm;
    if (st != PYCOLL_OK)
        snprintf(r->errors[slot], FLIGHT_ERROR_LEN, "%s", error && error[0] ? error : "failed");
    write_close(e);
    /* The first failure only: every later call of a broken communicator fails too, and says nothing new. */
    if (st != PYCOLL_OK && !atomic_exchange(&r->failed, 1))
        flight_dump_all("error");
    return st;
}
