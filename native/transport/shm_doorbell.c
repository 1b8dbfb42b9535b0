/* See shm_doorbell.h. */
#include "transport/shm_doorbell.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pycoll/transports.h"

/* This process's sleeps, and those a ring ended (pycoll_test_shm_sleeps): how a test tells a wake-up from a
 * sleep that ran to its bound. */
static atomic_int_fast64_t sleeps_total, sleeps_rung;

/* Not FUTEX_PRIVATE_FLAG: the word is in a segment every rank of the host maps at its own address. */
static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

void shm_doorbell_ring(shm_doorbell_t *b)
{
    if (!b)
        return;
    atomic_thread_fence(memory_order_seq_cst); /* the publication before the look at the mark */
    if (!atomic_load_explicit(&b->asleep, memory_order_relaxed) ||
        !atomic_exchange_explicit(&b->asleep, 0, memory_order_relaxed))
        return; /* awake, or another publisher is waking it */
    atomic_fetch_add_explicit(&b->rings, 1, memory_order_release);
    futex(&b->rings, FUTEX_WAKE, INT_MAX, NULL);
}

void shm_doorbell_sleep_unless(shm_doorbell_t *mine, int (*look)(void *arg), void *arg, int64_t until_ns)
{
    atomic_store_explicit(&mine->asleep, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* the mark before the last look */
    const uint32_t armed = atomic_load_explicit(&mine->rings, memory_order_acquire);
    const int64_t left = look(arg) ? 0 : until_ns - pycoll_now_ns();
    if (left > 0) {
        const struct timespec ts = {.tv_sec = (time_t)(left / 1000000000LL), .tv_nsec = (long)(left % 1000000000LL)};
        /* 0: woken; EAGAIN: rung between the arming and the sleep; ETIMEDOUT, EINTR: not rung. */
        const int rung = futex(&mine->rings, FUTEX_WAIT, armed, &ts) == 0 || errno == EAGAIN;
        atomic_fetch_add_explicit(&sleeps_total, 1, memory_order_relaxed);
        if (rung)
            atomic_fetch_add_explicit(&sleeps_rung, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&mine->asleep, 0, memory_order_relaxed);
}

void pycoll_test_shm_sleeps(int64_t *total, int64_t *rung)
{
    *total = (int64_t)atomic_load_explicit(&sleeps_total, memory_order_relaxed);
    *rung = (int64_t)atomic_load_explicit(&sleeps_rung, memory_order_relaxed);
}
