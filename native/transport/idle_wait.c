/* See idle_wait.h. */
#include "transport/idle_wait.h"

#include <poll.h>
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
    idle_wait_pass_fd(w, now, deadline_ns < now + IDLE_NAP_NS ? deadline_ns : now + IDLE_NAP_NS, -1);
}

void idle_wait_pass_fd(idle_wait_t *w, int64_t now, int64_t until_ns, int fd)
{
    if (idle_wait_spinning(w, now)) {
        if (++w->idle > IDLE_YIELD_AFTER_POLLS)
            sched_yield();
        return;
    }
    const int64_t left = until_ns - now;
    if (fd < 0 || left <= 0) {
        idle_nap(left);
        return;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    struct timespec ts = {.tv_sec = (time_t)(left / 1000000000LL), .tv_nsec = (long)(left % 1000000000LL)};
    ppoll(&pfd, 1, &ts, NULL);
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
