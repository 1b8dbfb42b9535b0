/* A rank's doorbell in shared memory: how a rank that waits on its host's shared memory sleeps once its spin is
 * over, and how the peer it waits for ends that sleep the moment it publishes what was waited for.
 *
 * Without it a sleeping rank could only nap and look again; on many machines even a 1 us nanosleep lasts about
 * a timer tick (tens to hundreds of microseconds), so every wait that outlived its spin cost that tick, whenever
 * the message came -- most of all where ranks outnumber cores, since there the rank waited for often runs only
 * once the waiter sleeps. With the doorbell the waiter sleeps on a futex in its own segment and the peer wakes
 * it: a message that arrives during the sleep ends it at once.
 *
 * The protocol (Dekker's, with one full fence on each side): the sleeper marks itself asleep, fences, reads the
 * bell's count, looks at its condition one last time, and sleeps while the count is unchanged; a publisher
 * stores what it publishes, fences, and if the owner is asleep clears that mark, bumps the count and wakes it.
 * Either the sleeper's last look sees the publication or the publisher sees the mark, so no wake-up is lost.
 *
 * Every sleep is bounded (the caller's until_ns): a peer that never rings -- dead, lying, or a publication this
 * library does not ring for -- costs at most that bound, never a hang, and the sleeper re-checks everything when
 * it wakes. The words are written by other ranks too, so their values are never trusted: the count is only
 * compared by the kernel, and a wrong asleep mark costs a wake-up or a bounded sleep. */
#ifndef PYCOLL_TRANSPORT_SHM_DOORBELL_H
#define PYCOLL_TRANSPORT_SHM_DOORBELL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct shm_doorbell {
    alignas(128) _Atomic uint32_t rings; /* the futex word: bumped by whoever wakes the owner */
    _Atomic uint32_t asleep;             /* set by the owner before it sleeps; cleared by the first waker */
} shm_doorbell_t;

/* After publishing something the owner of b may wait for: wake it if it sleeps. One fence and one load when it
 * does not. NULL: nothing. */
void shm_doorbell_ring(shm_doorbell_t *b);

/* The owner, once its spin is over: marks itself asleep, then takes its last look (look(arg): non-zero when it
 * found something to act on, or a reason not to sleep); if that found nothing, sleeps until rung or until_ns
 * (CLOCK_MONOTONIC, pycoll_now_ns). Clears its mark either way. */
void shm_doorbell_sleep_unless(shm_doorbell_t *mine, int (*look)(void *arg), void *arg, int64_t until_ns);

#endif
