/* What the communicator (communicator.c) and its progress thread (progress.c) share: the communicator's
 * struct, one collective call as data, and the functions each file offers the other. Internal to native/comm. */
#ifndef PYCOLL_COMM_INTERNAL_H
#define PYCOLL_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "algorithms/context.h"
#include "pycoll/comm.h"

#define COMM_ERROR_LEN (PYCOLL_ERROR_LEN + 64) /* room for a prefix before the transport's message */

/* One collective as the caller asked for it, so a blocking call and a queued one run the same code. */
typedef struct comm_call {
    pycoll_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    int64_t count; /* as the collective's public function names it: count, recv_count or send_count */
    pycoll_dtype_t dtype;
    pycoll_op_t op;
    pycoll_algorithm_t algorithm;
    pycoll_accuracy_t accuracy;
    int32_t root; /* -1 where the collective has none */
    /* The _V collectives' per-rank counts (size entries; count is then their sum), else NULL. The caller's
     * array, not a copy: like the buffers it must stay valid until the collective completes. */
    const int64_t *counts;
} comm_call_t;

/* The progress thread's state. The lock guards the queue, `running` and `stopping`; the transport is used by
 * one thread at a time: the progress thread while it runs a queued collective, else the caller (a blocking
 * call first waits, under the lock, until the queue is empty and nothing runs). */
typedef struct comm_progress {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a collective was queued or finished, or the thread is asked to stop */
    pthread_t thread;
    int started;            /* the thread exists; read and written only by the communicator's caller */
    int stopping;
    struct pycoll_work *head, *tail; /* queued, not yet started, in call order */
    struct pycoll_work *running;
    atomic_int cancel;      /* close gave up waiting: the collective in flight stops at its next interrupt check */
    /* The transport's interrupt check as the caller installed it: it runs only on the caller's threads (it may
     * be Python's signal check, which takes the GIL); the progress thread checks `cancel` instead. */
    int (*caller_interrupt)(void *ctx);
    void *caller_interrupt_ctx;
} comm_progress_t;

struct pycoll_comm {
    pycoll_p2p_t *p2p;
    coll_ctx_t ctx; /* p2p, segment size and the algorithms' scratch, kept between collectives */
    pycoll_comm_options_t options;
    uint64_t seq;
    pycoll_cost_model_t model;
    pycoll_algorithm_t last_algorithm; /* of the last blocking collective */
    int32_t *host_of; /* the host map (pycoll_comm_set_hosts), NULL: one host; ctx.host_of points here */
    int32_t hosts, max_local; /* its shape, for the decision: 1 and size without a map */
    int finalized;
    char error[COMM_ERROR_LEN]; /* written only on the caller's thread */
    comm_progress_t progress;
};

/* communicator.c: check a call's arguments (no state changes; PYCOLL_ERR_INVALID with `error` saying which),
 * and run one (check, stamp, set the deadline, run the algorithm, break the communicator on failure).
 * `ran` gets the algorithm that ran. */
pycoll_status_t comm_check_call(const pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len);
pycoll_status_t comm_run_call(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                              pycoll_algorithm_t *ran);

/* progress.c */
pycoll_status_t progress_init(pycoll_comm_t *comm);
/* Wait until every queued collective has run, so the caller may use the transport. With `interruptible`, the
 * caller's interrupt check runs every 100 ms and ends the wait with PYCOLL_ERR_INTERRUPTED (the queued
 * collectives keep running). Bounded: each queued collective has its deadline. */
pycoll_status_t progress_wait_turn(pycoll_comm_t *comm, int interruptible);
/* Fail the queued collectives with PYCOLL_ERR_CLOSED, give the one in flight up to linger_s to finish, then
 * interrupt it, and join the thread. Idempotent. */
void progress_stop(pycoll_comm_t *comm, double linger_s);
void progress_release(pycoll_comm_t *comm);
pycoll_status_t progress_start(pycoll_comm_t *comm, const comm_call_t *call, pycoll_work_t **work);

#endif
