/* How the transports' waits pass the time when nothing moved: spin first (a message usually arrives sooner than
 * a sleep ends), giving the core away between polls after a while (often to the very peer waited for), then nap
 * -- never past the deadline. No system call while spinning; one nanosleep per nap. One copy for every
 * transport that polls (shared memory, the routed composite). */
#ifndef PYCOLL_TRANSPORT_IDLE_WAIT_H
#define PYCOLL_TRANSPORT_IDLE_WAIT_H

#include "pycoll/p2p.h"

#define IDLE_NAP_NS 50000LL        /* one sleep once spinning is over: short next to a collective's cost */
/* Idle polls before the spin phase gives the core away between polls. Few: where ranks outnumber cores, the rank
 * waited for is usually runnable on this very core, and every poll before the yield delays it; where each rank
 * has a core, a message that comes at all usually comes within a few polls, and a yield with nothing else to
 * run returns at once. */
#define IDLE_YIELD_AFTER_POLLS 4

typedef struct idle_wait {
    int64_t spin_until; /* CLOCK_MONOTONIC ns: spin until then, nap after */
    int idle;           /* polls in a row that moved nothing */
} idle_wait_t;

/* A wait that began at started_ns, spinning for p2p->spin_ns (the communicator's option). */
static inline idle_wait_t idle_wait_start(const pycoll_p2p_t *p2p, int64_t started_ns)
{
    return (idle_wait_t){.spin_until = started_ns + p2p->spin_ns, .idle = 0};
}

/* Whether the spin phase still runs at `now` (after it, a wait sleeps). */
static inline int idle_wait_spinning(const idle_wait_t *w, int64_t now) { return now < w->spin_until; }

/* Something moved: the next idle poll spins again without yielding. */
static inline void idle_wait_moved(idle_wait_t *w) { w->idle = 0; }

/* A poll moved nothing at `now`: spin on (yielding after a while), or nap until deadline_ns at the latest. */
void idle_wait_pass(idle_wait_t *w, int64_t now, int64_t deadline_ns);

/* The same, but a sleep ends at until_ns or as soon as fd polls readable (fd < 0: a nap until until_ns): a wait
 * that has a descriptor for what it waits for never sleeps past its arrival. */
void idle_wait_pass_fd(idle_wait_t *w, int64_t now, int64_t until_ns, int fd);

/* Sleep ns nanoseconds (nothing for ns <= 0). */
void idle_nap(int64_t ns);

/* The caller's interrupt check (p2p->check_interrupt, e.g. Python's signal handlers): when it fires, record
 * PYCOLL_ERR_INTERRUPTED on p2p (PYCOLL_ERR_REVOKED where the check returned that: pycoll_comm_revoke) and
 * return 1. */
int idle_wait_interrupted(pycoll_p2p_t *p2p);

#endif
