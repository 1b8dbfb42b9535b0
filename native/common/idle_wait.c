/* See idle_wait.h. */
#include "common/idle_wait.h"

#include <sched.h>
#include <time.h>

void idle_nap(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000LL), .tv_nsec = (long)(ns % 1000000000LL)};
    nanosleep(&ts, NULL);
}

void idle_wait_pass(idle_wait_t *w, int64_t now, int64_t deadline_ns)
{
    if (now < w->spin_until) {
        if (++w->idle > IDLE_YIELD_AFTER_POLLS)
            sched_yield();
        return;
    }
    const int64_t left = deadline_ns - now;
    idle_nap(left < IDLE_NAP_NS ? left : IDLE_NAP_NS);
}

int idle_wait_interrupted(pycoll_p2p_t *p2p)
{
    const int why = p2p->check_interrupt ? p2p->check_interrupt(p2p->interrupt_ctx) : 0;
    if (!why)
        return 0;
    if (why == PYCOLL_ERR_REVOKED)
        pycoll_p2p_fail(p2p, PYCOLL_ERR_REVOKED, -1, "the communicator was revoked on rank %d", (int)p2p->rank);
    else
        pycoll_p2p_fail(p2p, PYCOLL_ERR_INTERRUPTED, -1, "rank %d was interrupted during a collective",
                        (int)p2p->rank);
    return 1;
}
