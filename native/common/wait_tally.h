/* Time the transports' waits spend blocked, and on which peer, counted to the call the waiting thread runs: the
 * flight recorder (native/comm/flight_recorder.h) points this thread's tally at the entry of that call, and a wait
 * that blocked (a poll found nothing) for WAIT_TALLY_MIN_NS adds its time when it ends. A shorter wait costs one
 * compare. */
#ifndef PYCOLL_COMMON_WAIT_TALLY_H
#define PYCOLL_COMMON_WAIT_TALLY_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct wait_tally {
    /* Where the time goes, in all, and the peer of the longest wait (-1: unknown); NULL: nowhere. Atomic: a dump
     * on another thread reads them while the wait adds. */
    atomic_int_fast64_t *wait_ns;
    atomic_int *peer;
    int64_t longest_ns; /* of this call's waits so far */
} wait_tally_t;

#define WAIT_NOT_BLOCKED (-2) /* a wait's `blocked_on` before any poll found nothing */
#define WAIT_TALLY_MIN_NS 20000 /* the shortest wait that is counted */

/* Whether a wait that started at started_ns and still finds nothing at now_ns should note the peer it waits for
 * (once). A wait shorter than WAIT_TALLY_MIN_NS is the ordinary cost of a small collective, the peer a few
 * microseconds behind, not a peer holding this rank up; counting it would cost every small collective a clock
 * read and a tally. */
static inline int wait_tally_due(int32_t blocked_on, int64_t now_ns, int64_t started_ns)
{
    return blocked_on == WAIT_NOT_BLOCKED && now_ns - started_ns >= WAIT_TALLY_MIN_NS;
}

/* The calling thread's (hidden: a direct thread-local access, no lookup through the dynamic linker's table). */
extern _Thread_local wait_tally_t wait_tally __attribute__((visibility("hidden")));

/* A wait that started at started_ns (pycoll_now_ns) ends; blocked_on: the peer it waited for when it first
 * blocked (-1: unknown), or WAIT_NOT_BLOCKED. */
void wait_tally_blocked(int32_t blocked_on, int64_t started_ns);
static inline void wait_tally_end(int32_t blocked_on, int64_t started_ns)
{
    if (blocked_on != WAIT_NOT_BLOCKED)
        wait_tally_blocked(blocked_on, started_ns);
}

#endif
