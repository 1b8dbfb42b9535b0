/* What the flight recorder's ring (flight_recorder.c) and its dumps (trace_dump.c, trace_signal.c) share:
 * one entry per call, of one cache line, and the recorder that holds the ring. Internal to native/comm. */
#ifndef PYCOLL_COMM_FLIGHT_RING_H
#define PYCOLL_COMM_FLIGHT_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/flight_recorder.h"

#define FLIGHT_ERROR_LEN 256

enum { FLIGHT_RUNNING = 0, FLIGHT_COMPLETED = 1, FLIGHT_FAILED = 2 };

/* One cache line: the call path writes one line per call, and the default ring (2048 calls, 128 KiB) stays in
 * the core's cache. The 32-bit numbers are the low bits of 64-bit counts (flight_recorder_t's), which a dump
 * restores: the ring never holds calls 2^32 apart. */
typedef struct flight_entry {
    atomic_uint lock;  /* the sequence lock: odd while written */
    uint32_t id;       /* the recorder's count of calls when this one entered (from 1; 0: never used) */
    uint32_t seq;      /* the call's number among the communicator's collectives (or among its sends and receives):
                        * the same on every rank for the same collective */
    int32_t rank;      /* a rooted collective's root, a send's or receive's peer, else -1 */
    atomic_int wait_peer;       /* the peer its longest wait waited for, -1: none */
    uint8_t collective, sends, dtype, op, algorithm, accuracy, is_async, state;
    int64_t start_ticks, end_ticks; /* flight_clock.h's; end_ticks 0 while it runs */
    int64_t count;
    atomic_int_fast64_t wait_ns; /* time its waits blocked */
} flight_entry_t;
_Static_assert(sizeof(flight_entry_t) == 64, "one cache line per call");

struct flight_recorder {
    flight_entry_t *ring;
    char (*errors)[FLIGHT_ERROR_LEN];       /* the failed calls' messages, by slot (written only on failure) */
    uint64_t capacity;                      /* the calls a dump shows, the latest (PYCOLL_TRACE_BUFFER) */
    uint64_t mask;                          /* the ring's slots less one: a power of two, >= capacity */
    atomic_uint_fast64_t calls;             /* entered so far: the last entry's id */
    atomic_uint_fast64_t p2p_calls;         /* the sends and receives among them */
    atomic_int failed;                      /* a call failed: its error dump is written */
};

/* flight_recorder.c: a consistent copy of slot `slot` and its error message (0: a writer kept it busy). */
int flight_entry_read(const flight_recorder_t *r, uint64_t slot, flight_entry_t *copy, char *error);

struct pycoll_comm;
/* trace_dump.c: dump comm into PYCOLL_TRACE_DIR (nothing when it is unset), and every communicator of the
 * process so. */
void flight_dump_to_dir(struct pycoll_comm *comm, const char *reason);
void flight_dump_all(const char *reason);
/* trace_signal.c: once per process, where PYCOLL_TRACE_DIR is set and the signal has no other handler, the
 * signal (PYCOLL_TRACE_SIGNAL) wakes a thread that dumps every communicator. */
void flight_signal_install(void);

#endif
