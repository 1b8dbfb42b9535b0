/* The wait tally (wait_tally.h). */
#include "common/wait_tally.h"

#include "pycoll/p2p.h"

_Thread_local wait_tally_t wait_tally;

void wait_tally_blocked(int32_t blocked_on, int64_t started_ns)
{
    wait_tally_t *t = &wait_tally;
    if (!t->wait_ns)
        return;
    const int64_t ns = pycoll_now_ns() - started_ns;
    /* one writer, the thread that runs the call: no read-modify-write needed */
    atomic_store_explicit(t->wait_ns, atomic_load_explicit(t->wait_ns, memory_order_relaxed) + ns,
                          memory_order_relaxed);
    if (ns > t->longest_ns) {
        t->longest_ns = ns;
        atomic_store_explicit(t->peer, blocked_on, memory_order_relaxed);
    }
}
