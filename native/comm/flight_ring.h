/* What the flight recorder's ring (flight_recorder.c) and its dumps (trace_dump.c, trace_signal.c) share:
 * one entry per call, of fixed size, and the recorder that holds the ring. Internal to native/comm. */
#ifndef PYCOLL_COMM_FLIGHT_RING_H
#define PYCOLL_COMM_FLIGHT_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/flight_recorder.h"
#include "common/wait_tally.h"

#define FLIGHT_ERROR_LEN 256

enum { FLIGHT_RUNNING = 0, FLIGHT_COMPLETED = 1, FLIGHT_FAILED = 2 };

typedef struct flight_entry {
    atomic_uint lock; /* the sequence lock: odd while written */
    uint64_t id;      /* the recorder's count of calls when this one entered (from 1; 0: never used) */
    uint64_t seq;     /* the call's number among the communicator's collectives (or among its sends and
                       * receives): the same on every rank for the same collective */
    int64_t start_unix_ns;                 /* CLOCK_REALTIME: comparable across processes and hosts */
    int64_t start_ns, end_ns;              /* pycoll_now_ns; end_ns 0 while it runs */
    int64_t count;
    wait_tally_t waits;                    /* time its waits blocked, and on which peer */
    int32_t root, peer;                    /* -1: none */
    uint8_t collective, sends, dtype, op, algorithm, accuracy, is_async, state;
    const char *transport;                 /* the family's transport's name (a static string) */
    char error[FLIGHT_ERROR_LEN];
} flight_entry_t;

struct flight_recorder {
    flight_entry_t *ring;
    uint64_t capacity;
    atomic_uint_fast64_t calls;             /* entered so far: the last entry's id */
    atomic_uint_fast64_t coll_seq, p2p_seq; /* the next seq of a collective, of a send or receive */
    atomic_int failed;                      /* a call failed: its error dump is written */
};

/* flight_recorder.c: a consistent copy of e (0: a writer kept it busy); the time in CLOCK_REALTIME ns. */
int flight_entry_read(const flight_entry_t *e, flight_entry_t *copy);
int64_t flight_realtime_ns(void);

struct pycoll_comm;
/* trace_dump.c: dump comm into PYCOLL_TRACE_DIR (nothing when it is unset), and every communicator of the
 * process so. */
void flight_dump_to_dir(struct pycoll_comm *comm, const char *reason);
void flight_dump_all(const char *reason);
/* trace_signal.c: once per process, where PYCOLL_TRACE_DIR is set and the signal has no other handler, the
 * signal (PYCOLL_TRACE_SIGNAL) wakes a thread that dumps every communicator. */
void flight_signal_install(void);

#endif
