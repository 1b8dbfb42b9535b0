/* The progress thread of a communicator family (comm_internal.h): runs non-blocking collectives
 * (pycoll_comm_run with a work) of the root and its splits one at a time, in call order, with comm_run_call -- the
 * very code a blocking call runs -- so descriptors, deadlines and the first-error rule are the same; and keeps
 * non-blocking sends and receives in flight (p2p_flight_t below). It never calls back into the caller: the
 * transport's interrupt check, which may be Python's signal check, is replaced on this thread by the close's
 * `cancel` flag, and the thread blocks asynchronous signals so that they reach the caller's threads. Started by the first non-blocking call, joined
 * by finalize or destroy. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/flight_recorder.h"
#include "transport/idle_wait.h"
#include "transport/shm_doorbell.h"
#include "transport/shm_transport.h"
#include "common/p2p_share.h"
#include "transport/tcp_transport.h"

#define CHECK_EVERY_NS 100000000LL /* how often a waiting caller runs its interrupt check */
#define PROGRESS_SPIN_NS 100000LL  /* the most the progress thread's transport waits poll before sleeping */

struct pycoll_work {
    pycoll_comm_t *comm; /* the communicator it runs on (its destroy first fails or finishes it) */
    comm_call_t call;
    pycoll_request_t req; /* a send or receive in flight */
    struct pycoll_work *next;
    atomic_int refs; /* the caller's handle and the queue's */
    int pid; /* the process that started it: a fork's child has no progress thread to complete it */
    int64_t spin_ns; /* the communicator's spin option: how long a wait polls before it sleeps */
    atomic_int spun; /* only the first blocking wait polls (a long collective is waited on in slices) */
    /* Its own lock and condition, not the communicator's: a work outlives the communicator. */
    pthread_mutex_t lock;
    pthread_cond_t done;
    atomic_int complete; /* the fields below are final once this is set (release / acquire) */
    pycoll_status_t status;
    int32_t failed_rank;
    pycoll_algorithm_t algorithm;
    char error[COMM_ERROR_LEN];
};

/* The family whose progress thread this is (NULL on every other thread). */
static _Thread_local const comm_family_t *progress_thread_of;

/* Condition variables here wait on CLOCK_MONOTONIC, pycoll_now_ns's clock (a wall-clock jump must not stretch
 * a wait). */
static int init_monotonic_cond(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return -1;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

static void wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000LL, .tv_nsec = deadline_ns % 1000000000LL};
    pthread_cond_timedwait(cond, lock, &ts);
}

/* The transport's interrupt check, as installed by progress_init. */
static int interrupt_check(void *ctx)
{
    comm_family_t *family = ctx;
    comm_progress_t *p = &family->progress;
    if (atomic_load(&family->revoked))
        return PYCOLL_ERR_REVOKED; /* the transport records it as such (idle_wait_interrupted) */
    if (progress_thread_of == family)
        return atomic_load(&p->cancel);
    return p->caller_interrupt ? p->caller_interrupt(p->caller_interrupt_ctx) : 0;
}

pycoll_status_t progress_init(comm_family_t *family)
{
    comm_progress_t *p = &family->progress;
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return PYCOLL_ERR_SYSTEM;
    if (init_monotonic_cond(&p->changed) != 0) {
        pthread_mutex_destroy(&p->lock);
        return PYCOLL_ERR_SYSTEM;
    }
    atomic_init(&p->cancel, 0);
    pycoll_p2p_t *transport = family->transport;
    p->caller_interrupt = transport->check_interrupt;
    p->caller_interrupt_ctx = transport->interrupt_ctx;
    transport->check_interrupt = interrupt_check;
    transport->interrupt_ctx = family;
    return PYCOLL_OK;
}

void progress_release(comm_family_t *family)
{
    pthread_cond_destroy(&family->progress.changed);
    pthread_mutex_destroy(&family->progress.lock);
}

static void work_unref(pycoll_work_t *work)
{
    if (atomic_fetch_sub(&work->refs, 1) == 1) {
        pthread_cond_destroy(&work->done);
        pthread_mutex_destroy(&work->lock);
        free(work);
    }
}

/* Publish the outcome and drop the queue's reference. `message` NULL: the work's own error buffer holds it. */
static void work_complete(pycoll_work_t *work, pycoll_status_t status, const char *message, int32_t failed_rank)
{
    pthread_mutex_lock(&work->lock);
    work->status = status;
    work->failed_rank = status == PYCOLL_OK ? -1 : failed_rank;
    if (status == PYCOLL_OK)
        work->error[0] = 0;
    else if (message)
        snprintf(work->error, sizeof work->error, "%s", message);
    flight_recorder_end(work->comm, work->call.record, status, work->algorithm, work->error); /* before it shows */
    atomic_store_explicit(&work->complete, 1, memory_order_release);
    pthread_cond_broadcast(&work->done);
    pthread_mutex_unlock(&work->lock);
    work_unref(work);
}

/* Sends and receives in flight on the progress thread, all of one communicator (the transport stamps its
 * point-to-point descriptor on their frames). Each completes on its own, and ones queued later join while the
 * earlier are under way, as MPI's non-blocking point-to-point does: a rank may post receives, then the sends
 * they wait for on other ranks, in any order. Transports without a non-blocking pass (ops->progress) run each
 * queued run of sends and receives posted together and waited for as one. */
typedef struct p2p_flight {
    pycoll_comm_t *comm; /* NULL: nothing in flight */
    comm_p2p_saved_t saved;
    pycoll_work_t *works[COMM_P2P_BATCH];
    pycoll_request_t *reqs[COMM_P2P_BATCH];
    int n;
    int64_t started_ns, next_check_ns;
    idle_wait_t idle;
} p2p_flight_t;

static pycoll_status_t cancelled_status(pycoll_comm_t *comm, pycoll_status_t st)
{
    return st == PYCOLL_ERR_INTERRUPTED && atomic_load(&comm->family->progress.cancel) ? PYCOLL_ERR_CLOSED : st;
}

/* The flight ends (nothing left, or an error): every work still in it fails with the cause. */
static void flight_end(p2p_flight_t *f, pycoll_status_t st)
{
    pycoll_comm_t *comm = f->comm;
    st = comm_p2p_end(comm, &f->saved, st);
    const char *message = cancelled_status(comm, st) == PYCOLL_ERR_CLOSED && st == PYCOLL_ERR_INTERRUPTED
                              ? "the communicator was closed while this send or receive ran"
                              : comm->p2p->error;
    for (int i = 0; i < f->n; i++)
        work_complete(f->works[i], cancelled_status(comm, st), message, comm->p2p->failed_rank);
    f->n = 0;
    f->comm = NULL;
}

/* Post works[0..n) (taken off the queue, all of one communicator), starting a flight if none is going. */
static void flight_add(p2p_flight_t *f, pycoll_work_t **works, int n)
{
    pycoll_comm_t *comm = works[0]->comm;
    if (!f->comm) {
        char error[COMM_ERROR_LEN];
        pycoll_status_t st = comm_p2p_begin(comm, &f->saved, error, sizeof error);
        if (st != PYCOLL_OK) {
            for (int i = 0; i < n; i++)
                work_complete(works[i], st, error, comm->p2p->failed_rank);
            return;
        }
        f->comm = comm;
        f->started_ns = pycoll_now_ns();
        f->next_check_ns = f->started_ns + CHECK_EVERY_NS;
        const int64_t spin_ns = comm->family->transport->spin_ns; /* polling briefly at most, as run_work */
        f->idle = (idle_wait_t){.spin_until =
                                    f->started_ns + (spin_ns < PROGRESS_SPIN_NS ? spin_ns : PROGRESS_SPIN_NS)};
    } else {
        comm_p2p_extend_deadline(comm); /* each request gets the full timeout from its post */
    }
    for (int i = 0; i < n; i++) {
        pycoll_work_t *w = works[i];
        f->works[f->n] = w;
        f->reqs[f->n] = &w->req;
        f->n++;
        pycoll_status_t st = comm_p2p_post(comm, &w->call, &w->req);
        if (st != PYCOLL_OK) {
            for (int j = i + 1; j < n; j++)
                f->works[f->n++] = works[j];
            flight_end(f, st);
            return;
        }
    }
}

/* The last look before the flight sleeps on a doorbell: one pass over its requests. */
static int flight_moved(void *arg)
{
    p2p_flight_t *f = arg;
    pycoll_p2p_t *transport = f->comm->family->transport;
    return transport->ops->progress(transport, f->reqs, f->n, f->started_ns) || transport->status != PYCOLL_OK;
}

/* One pass: move what can move, complete what is done, or pass the time. */
static void flight_step(p2p_flight_t *f)
{
    pycoll_comm_t *comm = f->comm;
    pycoll_p2p_t *transport = comm->family->transport;
    const int moved = transport->ops->progress(transport, f->reqs, f->n, f->started_ns);
    if (transport->status != PYCOLL_OK) {
        flight_end(f, transport->status);
        return;
    }
    int kept = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->reqs[i]->complete) {
            work_complete(f->works[i], PYCOLL_OK, NULL, -1);
        } else {
            f->works[kept] = f->works[i];
            f->reqs[kept] = f->reqs[i];
            kept++;
        }
    }
    f->n = kept;
    if (kept == 0) {
        flight_end(f, PYCOLL_OK);
        return;
    }
    if (moved) {
        idle_wait_moved(&f->idle);
        return;
    }
    const int64_t now = pycoll_now_ns();
    if (now >= f->next_check_ns) {
        f->next_check_ns = now + CHECK_EVERY_NS;
        if (idle_wait_interrupted(transport)) { /* the close's cancel flag, on this thread */
            flight_end(f, PYCOLL_ERR_INTERRUPTED);
            return;
        }
    }
    /* A nap at most (work queued meanwhile joins the flight after it), ended early by what a message's arrival
     * wakes: a local peer's ring of the shared-memory doorbell, or a TCP transport's events. */
    const int64_t until = now + IDLE_NAP_NS < transport->deadline_ns ? now + IDLE_NAP_NS : transport->deadline_ns;
    shm_doorbell_t *bell = idle_wait_spinning(&f->idle, now) ? NULL : transport_doorbell(transport, f->reqs, f->n);
    if (bell) {
        shm_doorbell_sleep_unless(bell, flight_moved, f, until); /* what the look moved, the next step takes */
        return;
    }
    idle_wait_pass_fd(&f->idle, now, until, tcp_transport_wait_fd(transport));
}

/* The sends and receives at the head of the queue that may join the flight (at most `room`): of the flight's
 * communicator, or any one communicator's when nothing flies. Under p->lock. */
static int take_p2p(comm_progress_t *p, const p2p_flight_t *f, pycoll_work_t **out, int room)
{
    int n = 0;
    while (p->head && n < room && comm_call_is_p2p(&p->head->call) &&
           p->head->comm == (f->comm ? f->comm : n ? out[0]->comm : p->head->comm)) {
        out[n++] = p->head;
        p->head = p->head->next;
    }
    if (!p->head)
        p->tail = NULL;
    return n;
}

/* On the progress thread, with the transport to itself. */
static void run_work(pycoll_work_t *work)
{
    pycoll_comm_t *comm = work->comm;
    pycoll_p2p_t *p2p = comm->p2p;
    p2p_adopt_error(p2p, comm->family->transport); /* broken by any collective of the family */
    if (p2p->status != PYCOLL_OK) {
        /* Broken by an earlier collective: fail with that cause, not a generic "closed". */
        work_complete(work, p2p->status, p2p->error, p2p->failed_rank);
        return;
    }
    /* Poll briefly at most: the caller queued this collective to compute meanwhile, and a progress thread that
     * polls for long takes a core from that computation (a DDP step measured slower than gloo's with the
     * default poll, faster with PROGRESS_SPIN_NS), while a short poll still catches a small collective's
     * replies. */
    const int64_t spin_ns = p2p->spin_ns;
    p2p->spin_ns = spin_ns < PROGRESS_SPIN_NS ? spin_ns : PROGRESS_SPIN_NS;
    flight_recorder_runs(comm, work->call.record);
    pycoll_status_t st = comm_run_call(comm, &work->call, work->error, sizeof work->error, &work->algorithm);
    p2p->spin_ns = spin_ns;
    if (st == PYCOLL_ERR_INTERRUPTED && atomic_load(&comm->family->progress.cancel)) {
        work_complete(work, PYCOLL_ERR_CLOSED,
                      "the communicator was closed while this collective ran (it did not finish within the "
                      "close's linger)", -1);
        return;
    }
    work_complete(work, st, work->error[0] ? NULL : p2p->error, p2p->failed_rank);
}

static void *progress_main(void *arg)
{
    comm_family_t *family = arg;
    comm_progress_t *p = &family->progress;
    const int can_fly = family->transport->ops->progress != NULL;
    p2p_flight_t flight = {0};
    progress_thread_of = family;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (!flight.comm) {
            /* Idle until work is queued (and no caller holds the transport) or the family stops (each signals
             * `changed`): no deadline to keep. */
            while ((!p->head || p->caller_running) && !p->stopping)
                pthread_cond_wait(&p->changed, &p->lock);
            if (!p->head)
                break;
        }
        pycoll_work_t *taken[COMM_P2P_BATCH];
        int n = take_p2p(p, &flight, taken, COMM_P2P_BATCH - flight.n);
        pycoll_work_t *collective = NULL;
        if (!flight.comm && !n) { /* a collective, alone */
            collective = p->head;
            p->head = collective->next;
            if (!p->head)
                p->tail = NULL;
        }
        p->running = collective ? collective : n ? taken[0] : flight.works[0];
        pthread_mutex_unlock(&p->lock);
        if (collective)
            run_work(collective);
        else if (n)
            flight_add(&flight, taken, n);
        if (flight.comm && can_fly) {
            flight_step(&flight);
        } else if (flight.comm) { /* posted together, waited for as one */
            pycoll_p2p_t *p2p = flight.comm->p2p;
            pycoll_status_t st = p2p->ops->wait(p2p, flight.reqs, flight.n);
            for (int i = 0; st == PYCOLL_OK && i < flight.n; i++)
                work_complete(flight.works[i], PYCOLL_OK, NULL, -1);
            if (st == PYCOLL_OK)
                flight.n = 0;
            flight_end(&flight, st);
        }
        pthread_mutex_lock(&p->lock);
        p->running = flight.comm ? flight.works[0] : NULL;
        pthread_cond_broadcast(&p->changed);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static pycoll_status_t start_thread(pycoll_comm_t *comm)
{
    comm_progress_t *p = &comm->family->progress;
    /* Signals sent to the process go to the caller's threads, where the handlers (Ctrl-C) can act. */
    sigset_t blocked, previous;
    sigfillset(&blocked);
    sigdelset(&blocked, SIGSEGV);
    sigdelset(&blocked, SIGBUS);
    sigdelset(&blocked, SIGFPE);
    sigdelset(&blocked, SIGILL);
    pthread_sigmask(SIG_SETMASK, &blocked, &previous);
    int rc = pthread_create(&p->thread, NULL, progress_main, comm->family);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (rc != 0) {
        snprintf(comm->error, sizeof comm->error, "cannot start the progress thread: %s", strerror(rc));
        return PYCOLL_ERR_SYSTEM;
    }
    p->started = 1;
    return PYCOLL_OK;
}

pycoll_status_t progress_start(pycoll_comm_t *comm, const comm_call_t *call, pycoll_work_t **out)
{
    *out = NULL;
    if (comm->finalized || comm->family->closed) {
        snprintf(comm->error, sizeof comm->error, comm->finalized ? "communicator is finalized (closed)"
                 : "the communicator this one was split from is closed");
        return PYCOLL_ERR_CLOSED;
    }
    pycoll_status_t st = PYCOLL_OK;
    pycoll_work_t *work = calloc(1, sizeof *work);
    if (!work) {
        snprintf(comm->error, sizeof comm->error, "out of memory queueing a collective");
        return PYCOLL_ERR_NOMEM;
    }
    if (pthread_mutex_init(&work->lock, NULL) != 0 || init_monotonic_cond(&work->done) != 0) {
        free(work);
        snprintf(comm->error, sizeof comm->error, "cannot create a work's lock");
        return PYCOLL_ERR_SYSTEM;
    }
    work->comm = comm;
    work->pid = comm->pid;
    work->call = *call; /* checked, with the caller's thread tag: the progress thread runs it */
    work->spin_ns = comm->options.spin_ns;
    work->algorithm = PYCOLL_ALGO_AUTO;
    work->failed_rank = -1;
    atomic_init(&work->refs, 2);
    atomic_init(&work->complete, 0);
    atomic_init(&work->spun, 0);
    comm_progress_t *p = &comm->family->progress;
    pthread_mutex_lock(&p->lock);
    if (!p->started && (st = start_thread(comm)) != PYCOLL_OK) {
        pthread_mutex_unlock(&p->lock);
        work_unref(work);
        work_unref(work);
        return st;
    }
    if (p->tail)
        p->tail->next = work;
    else
        p->head = work;
    p->tail = work;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    *out = work;
    return PYCOLL_OK;
}

int progress_join_p2p(pycoll_comm_t *comm, const comm_call_t *call, pycoll_status_t *status)
{
    comm_progress_t *p = &comm->family->progress;
    pthread_mutex_lock(&p->lock);
    const int busy = p->started && (p->head || p->running);
    pthread_mutex_unlock(&p->lock);
    if (!busy)
        return 0;
    pycoll_work_t *work = NULL;
    *status = progress_start(comm, call, &work);
    if (*status != PYCOLL_OK)
        return 1;
    while (!pycoll_work_wait(work, CHECK_EVERY_NS / 1e9)) {
        /* Bounded by the request's deadline; not interruptible: the caller's buffer is in flight until then. */
    }
    *status = work->status;
    snprintf(comm->error, sizeof comm->error, "%s", work->error);
    work_unref(work);
    return 1;
}

/* Under p->lock: wait until no collective of the family is queued or runs. */
static pycoll_status_t wait_idle(comm_progress_t *p, int interruptible)
{
    while (p->head || p->running) {
        wait_until(&p->changed, &p->lock, pycoll_now_ns() + CHECK_EVERY_NS);
        if (interruptible && (p->head || p->running) && p->caller_interrupt) {
            /* Not under the lock: the check may take the GIL, which a thread queueing work may hold. */
            pthread_mutex_unlock(&p->lock);
            const int stop = p->caller_interrupt(p->caller_interrupt_ctx);
            pthread_mutex_lock(&p->lock);
            if (stop)
                return PYCOLL_ERR_INTERRUPTED;
        }
    }
    return PYCOLL_OK;
}

pycoll_status_t progress_wait_turn(pycoll_comm_t *comm, int interruptible)
{
    comm_progress_t *p = &comm->family->progress;
    pthread_mutex_lock(&p->lock);
    pycoll_status_t st = p->started ? wait_idle(p, interruptible) : PYCOLL_OK;
    pthread_mutex_unlock(&p->lock);
    return st;
}

pycoll_status_t progress_take_turn(pycoll_comm_t *comm, int interruptible, char *error, size_t error_len)
{
    comm_progress_t *p = &comm->family->progress;
    const double timeout_s = comm->options.timeout_s;
    const int64_t deadline = pycoll_now_ns() + (int64_t)(timeout_s * 1e9);
    pycoll_status_t st = PYCOLL_OK;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        st = p->started ? wait_idle(p, interruptible) : PYCOLL_OK;
        if (st != PYCOLL_OK || !p->caller_running)
            break;
        /* One thread at a time per family (two collectives at once would interleave their messages on shared
         * connections, differently on every rank): wait for the thread that holds it, up to the timeout. */
        const int64_t now = pycoll_now_ns();
        if (now >= deadline) {
            char me[64];
            comm_thread_name(me, sizeof me);
            snprintf(error, error_len,
                     "%s waited %g s (the communicator's timeout) for its turn: %s ran a collective on this "
                     "communicator, or on one that shares its connections (its parent or a split of it), the whole "
                     "time; nothing was sent, the communicator is still usable",
                     me, timeout_s, p->caller_name);
            st = PYCOLL_ERR_TIMEOUT;
            break;
        }
        wait_until(&p->changed, &p->lock, now + CHECK_EVERY_NS < deadline ? now + CHECK_EVERY_NS : deadline);
        if (interruptible && p->caller_running && p->caller_interrupt) {
            pthread_mutex_unlock(&p->lock); /* the check may take the GIL, which the running thread may want */
            const int stop = p->caller_interrupt(p->caller_interrupt_ctx);
            pthread_mutex_lock(&p->lock);
            if (stop) {
                st = PYCOLL_ERR_INTERRUPTED;
                break;
            }
        }
    }
    if (st == PYCOLL_OK) {
        p->caller_running = 1;
        comm_thread_name(p->caller_name, sizeof p->caller_name);
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void progress_wait_callers(pycoll_comm_t *comm)
{
    comm_progress_t *p = &comm->family->progress;
    pthread_mutex_lock(&p->lock);
    while (p->caller_running) /* bounded: that call's deadline */
        wait_until(&p->changed, &p->lock, pycoll_now_ns() + CHECK_EVERY_NS);
    pthread_mutex_unlock(&p->lock);
}

void progress_end_turn(pycoll_comm_t *comm)
{
    comm_progress_t *p = &comm->family->progress;
    pthread_mutex_lock(&p->lock);
    p->caller_running = 0;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

/* A split's close: fail its queued works, and give its work in flight linger_s, then interrupt it. The family's
 * thread goes on for the others. Under p->lock. */
static void stop_split(pycoll_comm_t *comm, comm_progress_t *p, double linger_s)
{
    pycoll_work_t *mine = NULL, **tail = &mine, **link = &p->head;
    p->tail = NULL;
    while (*link) {
        pycoll_work_t *w = *link;
        if (w->comm == comm) {
            *link = w->next;
            w->next = NULL;
            *tail = w;
            tail = &w->next;
        } else {
            p->tail = w;
            link = &w->next;
        }
    }
    const int64_t linger_until = pycoll_now_ns() + (int64_t)((linger_s > 0 ? linger_s : 0) * 1e9);
    while (p->running && p->running->comm == comm && pycoll_now_ns() < linger_until)
        wait_until(&p->changed, &p->lock, linger_until);
    if (p->running && p->running->comm == comm) {
        atomic_store(&p->cancel, 1);
        while (p->running && p->running->comm == comm) /* bounded: its next interrupt check, ~100 ms */
            wait_until(&p->changed, &p->lock, pycoll_now_ns() + CHECK_EVERY_NS);
        atomic_store(&p->cancel, 0);
    }
    pthread_mutex_unlock(&p->lock);
    while (mine) {
        pycoll_work_t *next = mine->next;
        work_complete(mine, PYCOLL_ERR_CLOSED, "the communicator was closed before this collective ran", -1);
        mine = next;
    }
    pthread_mutex_lock(&p->lock);
}

void progress_stop(pycoll_comm_t *comm, double linger_s)
{
    comm_progress_t *p = &comm->family->progress;
    pthread_mutex_lock(&p->lock);
    if (!p->started) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    if (comm->view) {
        stop_split(comm, p, linger_s);
        pthread_mutex_unlock(&p->lock);
        return;
    }
    p->stopping = 1;
    pycoll_work_t *queued = p->head;
    p->head = p->tail = NULL;
    const int64_t linger_until = pycoll_now_ns() + (int64_t)((linger_s > 0 ? linger_s : 0) * 1e9);
    while (p->running && pycoll_now_ns() < linger_until)
        wait_until(&p->changed, &p->lock, linger_until);
    if (p->running)
        atomic_store(&p->cancel, 1); /* seen at the transport's next interrupt check (about every 100 ms) */
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    while (queued) {
        pycoll_work_t *next = queued->next;
        work_complete(queued, PYCOLL_ERR_CLOSED, "the communicator was closed before this collective ran", -1);
        queued = next;
    }
    /* Bounded: the collective in flight stops at its interrupt check, at the latest at its deadline. */
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->lock);
    p->started = 0;
    pthread_mutex_unlock(&p->lock);
}

/* A work a fork's parent started and that had not completed at the fork: only the parent's progress thread can
 * complete it, and this process has none. It counts as completed here, failed with PYCOLL_ERR_FORKED. */
static int forked_pending(const pycoll_work_t *work)
{
    return work->pid != comm_process_id() && !atomic_load_explicit(&work->complete, memory_order_acquire);
}

static _Thread_local char forked_error[COMM_ERROR_LEN];

int pycoll_work_wait(pycoll_work_t *work, double timeout_s)
{
    if (atomic_load_explicit(&work->complete, memory_order_acquire) || forked_pending(work))
        return 1;
    if (!(timeout_s > 0))
        return 0;
    const int64_t deadline = pycoll_now_ns() + (int64_t)(timeout_s * 1e9);
    /* Poll first, as the transports do: a short collective completes sooner than a sleeping waiter is woken
     * (tens of microseconds on a busy machine); yielding lets the progress thread run on a shared core. */
    if (!atomic_exchange(&work->spun, 1)) {
        const int64_t spin_until = pycoll_now_ns() + work->spin_ns;
        while (pycoll_now_ns() < (spin_until < deadline ? spin_until : deadline)) {
            if (atomic_load_explicit(&work->complete, memory_order_acquire))
                return 1;
            sched_yield();
        }
    }
    pthread_mutex_lock(&work->lock);
    while (!atomic_load_explicit(&work->complete, memory_order_acquire) && pycoll_now_ns() < deadline)
        wait_until(&work->done, &work->lock, deadline);
    pthread_mutex_unlock(&work->lock);
    return atomic_load_explicit(&work->complete, memory_order_acquire);
}

int pycoll_work_test(pycoll_work_t *work) { return pycoll_work_wait(work, 0); }

pycoll_status_t pycoll_work_status(pycoll_work_t *work)
{
    if (forked_pending(work))
        return PYCOLL_ERR_FORKED;
    return pycoll_work_test(work) ? work->status : PYCOLL_ERR_INVALID;
}

const char *pycoll_work_error(pycoll_work_t *work)
{
    if (forked_pending(work)) {
        snprintf(forked_error, sizeof forked_error,
                 "this collective was started by process %d, not by this process (%d): it was still running at a "
                 "fork(), and only that process can complete it", work->pid, comm_process_id());
        return forked_error;
    }
    return pycoll_work_test(work) ? work->error : "";
}

int32_t pycoll_work_failed_rank(pycoll_work_t *work)
{
    return !forked_pending(work) && pycoll_work_test(work) ? work->failed_rank : -1;
}

pycoll_algorithm_t pycoll_work_algorithm(pycoll_work_t *work)
{
    return pycoll_work_test(work) ? work->algorithm : PYCOLL_ALGO_AUTO;
}

void pycoll_work_free(pycoll_work_t *work)
{
    if (work && !forked_pending(work)) /* in a fork's child a pending work's lock may be held: left as it is */
        work_unref(work);
}
