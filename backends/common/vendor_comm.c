/* The generic vendor calls of pycoll/vendor.h, written once for every vendor struct: argument checks, the
 * first-error record (pycoll_p2p_fail on the communicator's p2p state), the wait for a non-blocking vendor to
 * leave "in progress", the stream wait, and the abort when the deadline passes. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error_format.h"
#include "vendor_common.h"

/* Longest single stream wait, for a vendor whose wait blocks: remote errors are noticed while a collective is
 * stuck. */
#define STREAM_SLICE_MS 200

static const char *vendor_name(const pycoll_vendor_t *v)
{
    return v && v->name ? v->name : "vendor";
}

/* The entry points take the vendor from the caller: NULL is refused by name. */
static pycoll_status_t check_vendor(const pycoll_vendor_t *v, char *error, size_t error_len)
{
    if (!v)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "vendor: no vendor (NULL)");
    return PYCOLL_OK;
}

static int loaded(const pycoll_vendor_t *v)
{
    for (int32_t i = 0; i < v->num_libraries; i++)
        if (!v->libraries[i].handle)
            return 0;
    return 1;
}

static pycoll_status_t check_loaded(const pycoll_vendor_t *v, char *error, size_t error_len)
{
    pycoll_status_t st = check_vendor(v, error, error_len);
    if (st == PYCOLL_OK && !loaded(v))
        st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED,
                                 "%s: %s%s%s is not loaded (pycoll_vendor_load)", v->name, v->libraries[0].what,
                                 v->num_libraries > 1 ? " or " : "",
                                 v->num_libraries > 1 ? v->libraries[1].what : "");
    return st;
}

const char *vendor_call_name(const pycoll_vendor_t *v, pycoll_vendor_call_t call)
{
    for (int32_t i = 0; i < v->num_libraries; i++)
        for (int32_t j = 0; j < v->libraries[i].num_symbols; j++)
            if (v->libraries[i].symbols[j].call == call)
                return v->libraries[i].symbols[j].name;
    if (v->late_call_names && call > PYCOLL_VENDOR_CALL_NONE && call < PYCOLL_VENDOR_NUM_CALLS &&
        v->late_call_names[call])
        return v->late_call_names[call];
    return "a vendor call";
}

pycoll_vendor_t *pycoll_vendor_find(const char *name)
{
    static pycoll_vendor_t *const builtin[] = {&pycoll_nccl_vendor, &pycoll_hccl_vendor};
    for (size_t i = 0; name && i < sizeof builtin / sizeof builtin[0]; i++)
        if (strcmp(builtin[i]->name, name) == 0)
            return builtin[i];
    return NULL;
}

const char *pycoll_vendor_name(const pycoll_vendor_t *v)
{
    return vendor_name(v);
}

int64_t pycoll_vendor_unique_id_bytes(const pycoll_vendor_t *v)
{
    return v ? v->unique_id_bytes : 0;
}

/* One lock for every vendor library: loads are rare, and two threads must not both dlopen the same one. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

pycoll_status_t pycoll_vendor_load(pycoll_vendor_t *v, int32_t library, const char *path, char *error,
                                   size_t error_len)
{
    pycoll_status_t st = check_vendor(v, error, error_len);
    if (st == PYCOLL_OK && (library < 0 || library >= v->num_libraries || library >= 2))
        st = pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: library %d is not 0 to %d", v->name,
                                 (int)library, (int)v->num_libraries - 1);
    if (st != PYCOLL_OK)
        return st;
    return vendor_library_open(&v->libraries[library], path, error, error_len);
}

pycoll_status_t vendor_library_open(pycoll_vendor_library_t *lib, const char *path, char *error, size_t error_len)
{
    pycoll_status_t st = PYCOLL_OK;
    pthread_mutex_lock(&load_lock);
    if (!lib->handle) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s", dlerror());
        for (int32_t i = 0; h && i < lib->num_symbols; i++) {
            const pycoll_vendor_symbol_t *sym = &lib->symbols[i];
            *(void **)sym->slot = dlsym(h, sym->name); /* POSIX: a function's address fits a void * */
            if (!*sym->slot) {
                st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s lacks %s%s%s", path,
                                         sym->name, lib->requirement ? ": " : "",
                                         lib->requirement ? lib->requirement : "");
                dlclose(h);
                h = NULL;
            }
        }
        lib->handle = h;
    }
    pthread_mutex_unlock(&load_lock);
    return st;
}

void (*vendor_optional_symbol(const pycoll_vendor_library_t *lib, const char *name))(void)
{
    pthread_mutex_lock(&load_lock);
    void *h = lib->handle;
    pthread_mutex_unlock(&load_lock);
    void (*fn)(void) = NULL;
    if (h)
        *(void **)&fn = dlsym(h, name); /* POSIX: a function's address fits a void * */
    return fn;
}

int32_t pycoll_vendor_library_version(const pycoll_vendor_t *v)
{
    char unused[1];
    int version = 0;
    if (check_loaded(v, unused, sizeof unused) != PYCOLL_OK || !v->library_version || v->library_version(&version))
        return 0;
    return version;
}

/* The names table may have gaps (HCCL numbers HCCL_E_IN_STATUS 1041): an entry left NULL is unknown. */
const char *vendor_result_name(const pycoll_vendor_t *v, int r)
{
    const char *name = r >= 0 && r < v->num_result_names ? v->result_names[r] : NULL;
    return name ? name : "a result this pycoll does not know";
}

/* How long a teardown call (destroy, abort) may take before it is left to run on alone: the communicator's
 * timeout, at most this. */
#define RELEASE_GRACE_NS 5000000000LL

static atomic_llong abandoned_releases;

int64_t pycoll_vendor_abandoned_releases(void) { return atomic_load(&abandoned_releases); }

/* One destroy or abort on a thread of its own. Whoever finishes second -- the call, or the caller that gave up
 * waiting for it -- frees this. */
typedef struct release_call {
    int (*fn)(void *comm);
    void *comm;
    pthread_mutex_t lock;
    pthread_cond_t finished;
    int done, abandoned;
} release_call_t;

static void release_call_free(release_call_t *r)
{
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->finished);
    free(r);
}

static void *release_thread(void *arg)
{
    release_call_t *r = arg;
    r->fn(r->comm);
    pthread_mutex_lock(&r->lock);
    r->done = 1;
    int abandoned = r->abandoned;
    pthread_cond_signal(&r->finished);
    pthread_mutex_unlock(&r->lock);
    if (abandoned)
        release_call_free(r);
    return NULL;
}

/* Runs the vendor's destroy or abort, waiting for it at most the grace. A vendor's teardown can block forever:
 * HCCL's destroy (also its abort: it has no other) waits for its streams' tasks, and behind a task that waits
 * on a dead peer it never returns. Past the grace the call is left to finish on its own thread -- the process
 * stays free to report the failure and exit -- and c->abandoned keeps pycoll from freeing device memory that
 * the call may still use (a free would synchronise behind the same stuck task). */
static void release_bounded(pycoll_vendor_comm_t *c, int (*fn)(void *comm))
{
    void *comm = c->comm;
    c->comm = NULL;
    release_call_t *r = calloc(1, sizeof *r);
    pthread_condattr_t attr;
    pthread_t thread;
    if (!r) {
        fn(comm); /* no memory for a thread: unbounded, as before */
        return;
    }
    r->fn = fn, r->comm = comm;
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->finished, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&thread, NULL, release_thread, r) != 0) {
        release_call_free(r);
        fn(comm);
        return;
    }
    int64_t grace = c->timeout_ns < RELEASE_GRACE_NS ? c->timeout_ns : RELEASE_GRACE_NS;
    int64_t deadline = pycoll_now_ns() + grace;
    struct timespec until = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
    pthread_mutex_lock(&r->lock);
    while (!r->done && pthread_cond_timedwait(&r->finished, &r->lock, &until) == 0) {
    }
    int done = r->done;
    r->abandoned = !done;
    pthread_mutex_unlock(&r->lock);
    if (done) {
        pthread_join(thread, NULL);
        release_call_free(r);
        return;
    }
    pthread_detach(thread);
    c->abandoned = 1;
    atomic_fetch_add(&abandoned_releases, 1);
}

int vendor_has(const pycoll_vendor_t *v, int32_t bit)
{
    return v->fault_tolerance && loaded(v) && (v->fault_tolerance() & bit) &&
           (bit != PYCOLL_VENDOR_HAS_SHRINK || v->shrink) && (bit != PYCOLL_VENDOR_HAS_REVOKE || v->revoke);
}

int32_t pycoll_vendor_fault_tolerance(const pycoll_vendor_t *v)
{
    char unused[1];
    if (check_loaded(v, unused, sizeof unused) != PYCOLL_OK)
        return 0;
    int32_t bits = 0;
    for (int32_t bit = PYCOLL_VENDOR_HAS_SHRINK; bit <= PYCOLL_VENDOR_HAS_GROW; bit <<= 1)
        bits |= vendor_has(v, bit) ? bit : 0;
    return bits;
}

/* Stops the vendor's communicator now, also mid-collective. A revoke keeps it as the parent of a shrink, so the
 * survivors need no new rendezvous; where the vendor cannot (or the revoke fails), an abort (where the vendor has
 * no abort, its destroy releases the peers' links, so their waits fail too). */
void vendor_abort_now(pycoll_vendor_comm_t *c)
{
    if (!c->comm || c->revoked)
        return;
    if (vendor_has(c->v, PYCOLL_VENDOR_HAS_REVOKE)) {
        int r = c->v->revoke(c->comm);
        if (r == 0 || r == c->v->in_progress) {
            c->revoked = 1;
            return;
        }
    }
    release_bounded(c, c->v->abort);
}

/* "(ncclRemoteError, code 6)" plus the vendor's detail on the last failure, if it keeps one. The communicator
 * is aborted at once: after a failed call its device work may wait forever on a peer (an asynchronous error
 * such as a dead peer), a non-blocking NCCL communicator's error is sticky anyway, and anything that
 * synchronises the device (a free) would wait behind that work. */
pycoll_status_t vendor_fail_result(pycoll_vendor_comm_t *c, const char *what, int r)
{
    const pycoll_vendor_t *v = c->v;
    const char *last = c->comm && v->last_error ? v->last_error(c->comm) : NULL;
    pycoll_status_t st = pycoll_p2p_fail(&c->state, v->status_of(r), -1, "%s: %s failed: %s (%s, %s %d)%s%s",
                                         v->name, what, v->error_string(r), vendor_result_name(v, r), v->code_label,
                                         r, last && *last ? ": " : "", last ? last : "");
    vendor_abort_now(c);
    return st;
}

pycoll_status_t pycoll_vendor_unique_id(const pycoll_vendor_t *v, void *id, int64_t id_len, char *error,
                                        size_t error_len)
{
    pycoll_status_t st = check_loaded(v, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    if (id_len < v->unique_id_bytes)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: the id needs %lld bytes, got %lld",
                                   v->name, (long long)v->unique_id_bytes, (long long)id_len);
    int r = v->unique_id(id);
    if (r != 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "%s: %s failed: %s (%s, %s %d)", v->name,
                                   vendor_call_name(v, PYCOLL_VENDOR_CALL_UNIQUE_ID), v->error_string(r),
                                   vendor_result_name(v, r), v->code_label, r);
    return PYCOLL_OK;
}

/* Abort on the deadline: it stops the device work waiting for a peer that will never come. */
pycoll_status_t vendor_abort_on_deadline(pycoll_vendor_comm_t *c, const char *what)
{
    vendor_abort_now(c);
    return pycoll_p2p_fail(&c->state, PYCOLL_ERR_TIMEOUT, -1,
                           "%s: %s did not complete within %.3f s on rank %d of %d (a peer may be dead or behind); "
                           "the communicator was %s",
                           c->v->name, what, (double)c->timeout_ns / 1e9, (int)c->state.rank, (int)c->state.size,
                           c->v->deadline_action);
}

/* Between looks at a vendor that is still working: spin (yielding the core) for the first POLL_SPIN_NS, as
 * a small collective completes within microseconds and a sleep would add its whole length to it; then short
 * sleeps, so a long wait (a dead peer, until the deadline) does not hold a core. */
#define POLL_SPIN_NS 2000000
#define POLL_SLEEP_NS 20000
static void poll_pause(int64_t started_ns)
{
    if (pycoll_now_ns() - started_ns < POLL_SPIN_NS) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, POLL_SLEEP_NS};
    nanosleep(&ts, NULL);
}

static void request_stop(pycoll_vendor_comm_t *c, pycoll_status_t status, int32_t failed_rank, const char *reason)
{
    int none = 0;
    if (!c || !atomic_compare_exchange_strong(&c->abort_state, &none, 1))
        return;
    c->abort_rank = failed_rank;
    c->abort_status = status;
    snprintf(c->abort_reason, sizeof c->abort_reason, "%s", reason);
    atomic_store(&c->abort_state, 2);
}

void pycoll_vendor_comm_request_abort(pycoll_vendor_comm_t *c, int32_t failed_rank, const char *reason)
{
    request_stop(c, PYCOLL_ERR_PEER_FAILURE, failed_rank, reason ? reason : "a peer failed");
}

void pycoll_vendor_comm_revoke(pycoll_vendor_comm_t *c)
{
    request_stop(c, PYCOLL_ERR_REVOKED, -1, "the communicator was revoked");
}

/* An abort requested from another thread, taken by the call (or watchdog) holding the lock: the communicator
 * fails with it. A vendor with a revoke or an abort of its own (ncclCommRevoke, ncclCommAbort) is stopped now,
 * which ends the device work stuck on the peer; one whose abort is its destroy (HCCL) is left to teardown, where
 * that destroy is bounded -- it waits behind the stuck work, and the caller should hear of the failure now, not
 * seconds later. PYCOLL_OK where none is pending (or it is still being written). */
pycoll_status_t vendor_take_abort_request(pycoll_vendor_comm_t *c, const char *what)
{
    if (atomic_load(&c->abort_state) != 2 || c->state.status != PYCOLL_OK)
        return PYCOLL_OK;
    pycoll_status_t st = pycoll_p2p_fail(&c->state, c->abort_status, c->abort_rank,
                                         "%s: %s on rank %d of %d was %s: %s", c->v->name, what,
                                         (int)c->state.rank, (int)c->state.size,
                                         c->abort_status == PYCOLL_ERR_REVOKED ? "revoked" : "aborted",
                                         c->abort_reason);
    if (c->v->abort != c->v->destroy || vendor_has(c->v, PYCOLL_VENDOR_HAS_REVOKE))
        vendor_abort_now(c);
    return st;
}

/* The vendor's asynchronous state: 1 while still in progress, 0 when done, or the error it recorded (which
 * aborts the communicator at once: vendor_fail_result); first, an abort requested from another thread. */
pycoll_status_t vendor_poll_async(pycoll_vendor_comm_t *c, const char *what, int *in_progress)
{
    pycoll_status_t requested = vendor_take_abort_request(c, what);
    if (requested != PYCOLL_OK)
        return requested;
    int state = 0;
    int r = c->v->async_error(c->comm, &state);
    if (r != 0)
        return vendor_fail_result(c, vendor_call_name(c->v, PYCOLL_VENDOR_CALL_ASYNC_ERROR), r);
    *in_progress = c->v->in_progress >= 0 && state == c->v->in_progress;
    if (state != 0 && !*in_progress)
        return vendor_fail_result(c, what, state);
    return PYCOLL_OK;
}

/* Until a non-blocking vendor's communicator leaves "in progress" (init, or enqueueing a collective). */
pycoll_status_t vendor_wait_ready(pycoll_vendor_comm_t *c, const char *what, int64_t deadline_ns)
{
    if (c->v->in_progress < 0)
        return PYCOLL_OK;
    for (int64_t started = pycoll_now_ns();; poll_pause(started)) {
        int busy = 0;
        pycoll_status_t st = vendor_poll_async(c, what, &busy);
        if (st != PYCOLL_OK || !busy)
            return st;
        if (pycoll_now_ns() >= deadline_ns)
            return vendor_abort_on_deadline(c, what);
    }
}

pycoll_status_t vendor_wait_done(pycoll_vendor_comm_t *c, const char *what, void *stream, void *event,
                                 int64_t deadline_ns)
{
    const pycoll_vendor_t *v = c->v;
    for (int64_t started = pycoll_now_ns();; poll_pause(started)) {
        int64_t left_ms = (deadline_ns - pycoll_now_ns()) / 1000000;
        int32_t slice_ms = left_ms < 1 ? 1 : left_ms < STREAM_SLICE_MS ? (int32_t)left_ms : STREAM_SLICE_MS;
        int code = event ? v->event_query(event) : v->stream_wait(stream, slice_ms);
        int busy = 0;
        pycoll_status_t st = vendor_poll_async(c, what, &busy);
        if (st != PYCOLL_OK)
            return st;
        if (code == 0)
            return PYCOLL_OK;
        if (code != v->stream_busy)
            return pycoll_p2p_fail(&c->state, PYCOLL_ERR_SYSTEM, -1, "%s: %s after %s failed: %s (code %d)", v->name,
                                   event ? "the query of the event recorded"
                                         : vendor_call_name(v, PYCOLL_VENDOR_CALL_STREAM_WAIT),
                                   what, v->runtime_error ? v->runtime_error(code) : "runtime error", code);
        if (pycoll_now_ns() >= deadline_ns)
            return vendor_abort_on_deadline(c, what);
    }
}

pycoll_status_t vendor_accepted(pycoll_vendor_comm_t *c, const char *what, int r, int64_t deadline)
{
    const pycoll_vendor_t *v = c->v;
    if (r != 0 && r != v->in_progress && v->refused && v->refused(r))
        return vendor_reject(c, v->status_of(r), "%s: %s refused the call: %s (%s, %s %d); the communicator is "
                             "still usable", v->name, what, v->error_string(r), vendor_result_name(v, r),
                             v->code_label, r);
    if (r != 0 && r != v->in_progress)
        return vendor_fail_result(c, what, r);
    return vendor_wait_ready(c, what, deadline);
}

pycoll_status_t vendor_finish(pycoll_vendor_comm_t *c, const char *what, int r, void *stream, int64_t deadline)
{
    pycoll_status_t st = vendor_accepted(c, what, r, deadline);
    return st != PYCOLL_OK ? st : vendor_wait_collective(c, what, stream, deadline);
}

/* A collective of the vendor's own, enqueued on run_on (vendor_collective_stream): a blocking call returns once
 * the host has seen it complete; in async mode it returns once enqueued, its completion the watchdog's. buf:
 * where its result goes (NULL: none), to tell whether only a host wait serves it. */
static pycoll_status_t finish_collective(pycoll_vendor_comm_t *c, const char *what, int r, void *run_on,
                                         const void *buf, int64_t deadline)
{
    pycoll_status_t st = vendor_accepted(c, what, r, deadline);
    if (st != PYCOLL_OK)
        return st;
    if (!c->async)
        return vendor_wait_collective(c, what, run_on, deadline);
    int host_visible = buf && c->v->host_memory && c->v->host_memory(buf); /* unknown: device memory */
    return vendor_enqueued(c, what, run_on, host_visible, deadline);
}

static int64_t seconds_to_ns(double s)
{
    return s > 9e9 ? INT64_MAX / 2 : (int64_t)(s * 1e9);
}

pycoll_vendor_comm_t *vendor_comm_alloc(const pycoll_vendor_t *v, int32_t rank, int32_t size, int64_t timeout_ns)
{
    pycoll_vendor_comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    vendor_comm_lock_init(c);
    c->v = v;
    c->state.rank = rank;
    c->state.size = size;
    c->state.failed_rank = -1;
    c->timeout_ns = timeout_ns;
    c->device = -1;
    return c;
}

pycoll_vendor_comm_t *vendor_comm_started(pycoll_vendor_comm_t *c, const char *what, int r, int64_t deadline,
                                          pycoll_status_t *status, char *error, size_t error_len)
{
    const pycoll_vendor_t *v = c->v;
    pycoll_status_t st;
    if (r != 0 && r != v->in_progress)
        st = vendor_fail_result(c, what, r);
    else
        st = vendor_wait_ready(c, what, deadline);
    if (st == PYCOLL_OK && v->device && (r = v->device(c->comm, &c->device)) != 0)
        st = vendor_fail_result(c, vendor_call_name(v, PYCOLL_VENDOR_CALL_DEVICE), r);
    if (st == PYCOLL_OK && v->stream_create && (r = v->stream_create(&c->own_stream)) != 0) {
        c->own_stream = NULL;
        st = pycoll_p2p_fail(&c->state, PYCOLL_ERR_SYSTEM, -1, "%s: creating the communicator's stream failed: %s "
                             "(code %d)", v->name, v->runtime_error ? v->runtime_error(r) : "runtime error", r);
    }
    if (st != PYCOLL_OK) {
        *status = st;
        snprintf(error, error_len, "%s", c->state.error);
        pycoll_vendor_comm_destroy(c);
        return NULL;
    }
    return c;
}

pycoll_vendor_comm_t *pycoll_vendor_comm_create(const pycoll_vendor_t *v, const void *id, int64_t id_len,
                                                int32_t rank, int32_t size, double timeout_s,
                                                pycoll_status_t *status, char *error, size_t error_len)
{
    *status = check_loaded(v, error, error_len);
    if (*status == PYCOLL_OK && id_len != v->unique_id_bytes)
        *status = pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: the id must be %lld bytes, got %lld",
                                      v->name, (long long)v->unique_id_bytes, (long long)id_len);
    if (*status == PYCOLL_OK && (size < 1 || rank < 0 || rank >= size))
        *status = pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: rank %d of a %d-rank communicator",
                                      v->name, (int)rank, (int)size);
    if (*status != PYCOLL_OK)
        return NULL;
    pycoll_vendor_comm_t *c = vendor_comm_alloc(v, rank, size, seconds_to_ns(timeout_s));
    if (!c) {
        *status = pycoll_format_error(error, error_len, PYCOLL_ERR_NOMEM, "%s: out of memory", v->name);
        return NULL;
    }
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
    int r = v->comm_init(&c->comm, size, id, rank);
    return vendor_comm_started(c, vendor_call_name(v, PYCOLL_VENDOR_CALL_INIT), r, deadline, status, error, error_len);
}

/* A healthy communicator leaves its peers cleanly: finalize (where the vendor has it), waited for until the
 * deadline, then destroy; a broken one, or one whose finalize failed or missed the deadline, is aborted. A
 * failure stops the communicator with a revoke where the vendor has one (it stays a shrink's parent): a revoked
 * communicator still holds its resources, so it is aborted here too. */
static void teardown(pycoll_vendor_comm_t *c)
{
    const pycoll_vendor_t *v = c->v;
    if (!c->comm)
        return;
    if (c->state.status == PYCOLL_OK && !c->revoked && v->finalize) { /* a revoked one cannot finalize */
        int64_t deadline = pycoll_now_ns() + c->timeout_ns;
        const char *what = vendor_call_name(v, PYCOLL_VENDOR_CALL_FINALIZE);
        int r = v->finalize(c->comm);
        pycoll_status_t st = r != 0 && r != v->in_progress ? vendor_fail_result(c, what, r)
                                                           : vendor_wait_ready(c, what, deadline);
        if (st != PYCOLL_OK && !c->comm)
            return; /* aborted: by vendor_fail_result, or at the deadline */
    }
    release_bounded(c, c->state.status == PYCOLL_OK ? v->destroy : v->abort);
}

static void comm_free(pycoll_vendor_comm_t *c)
{
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->watchdog_wake);
    free(c);
}

void pycoll_vendor_comm_destroy(pycoll_vendor_comm_t *c)
{
    if (!c)
        return;
    vendor_watchdog_stop(c); /* first: it may abort the communicator teardown releases */
    vendor_comm_lock(c);
    teardown(c);
    vendor_comm_unlock(c);
    if (c->abandoned) { /* the vendor may still use them, and a free would wait behind its stuck work */
        comm_free(c);
        return;
    }
    /* Only now: a free synchronises the device, and would wait behind a kernel stuck on a dead peer. */
    if (c->scratch)
        c->v->scratch_free(c->scratch);
    if (c->reduce_scratch)
        c->v->scratch_free(c->reduce_scratch);
    if (c->own_stream)
        c->v->stream_destroy(c->own_stream);
    vendor_streams_free(c);
    comm_free(c);
}

const char *pycoll_vendor_device_name(const pycoll_vendor_t *v)
{
    char unused[1];
    const char *name = NULL;
    if (check_loaded(v, unused, sizeof unused) == PYCOLL_OK && v->device_name)
        name = v->device_name();
    return name ? name : "";
}

const char *pycoll_vendor_comm_error(const pycoll_vendor_comm_t *c)
{
    return c->state.error;
}

int32_t pycoll_vendor_comm_device(const pycoll_vendor_comm_t *c)
{
    return c->device;
}

void pycoll_vendor_comm_set_timeout(pycoll_vendor_comm_t *c, double timeout_s)
{
    c->timeout_ns = seconds_to_ns(timeout_s);
}

pycoll_status_t vendor_reject(pycoll_vendor_comm_t *c, pycoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pycoll_vformat_error(c->state.error, sizeof c->state.error, status, fmt, ap);
    va_end(ap);
    return status;
}

pycoll_status_t vendor_begin(pycoll_vendor_comm_t *c, int64_t count, pycoll_dtype_t dtype, int op, int32_t root,
                             int *vd, int *vo)
{
    const pycoll_vendor_t *v = c->v;
    pycoll_status_t requested = vendor_take_abort_request(c, "the call");
    if (requested != PYCOLL_OK)
        return requested;
    if (c->state.status != PYCOLL_OK)
        return PYCOLL_ERR_CLOSED; /* c->state.error still says why it broke */
    if (count < 0)
        return vendor_reject(c, PYCOLL_ERR_INVALID, "%s: count must be >= 0, got %lld", v->name,
                             (long long)count);
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES)
        return vendor_reject(c, PYCOLL_ERR_INVALID, "%s: unknown dtype id %d", v->name, (int)dtype);
    if (dtype >= VENDOR_NUM_DTYPES || v->dtypes[dtype] < 0)
        return vendor_reject(c, PYCOLL_ERR_UNSUPPORTED, "%s has no %s", v->name, pycoll_dtype_name(dtype));
    if (op != -1 && (unsigned)op >= PYCOLL_NUM_OPS)
        return vendor_reject(c, PYCOLL_ERR_INVALID, "%s: unknown op id %d", v->name, op);
    if (op != -1 && v->ops[op] < 0)
        return vendor_reject(c, PYCOLL_ERR_UNSUPPORTED,
                             "%s has no %s reduction; run another op (avg: sum, then divide by the world size)",
                             v->name, pycoll_op_name((pycoll_op_t)op));
    if (root != -1 && (root < 0 || root >= c->state.size))
        return vendor_reject(c, PYCOLL_ERR_INVALID, "%s: root %d is not a rank of a %d-rank communicator",
                             v->name, (int)root, (int)c->state.size);
    *vd = v->dtypes[dtype];
    if (vo)
        *vo = op == -1 ? 0 : v->ops[op];
    return PYCOLL_OK;
}

/* Each collective: its deadline starts before the checks, so the whole call is bounded by the timeout; it runs
 * under the communicator's lock (the watchdog's abort never interleaves with it). `invoke` is called with
 * `stream` set to the stream it runs on (vendor_collective_stream); buf is where its result goes. */
#define VENDOR_CALL(c, call, count, dtype, op, root, buf, invoke)                                              \
    do {                                                                                                       \
        int64_t deadline_ = pycoll_now_ns() + (c)->timeout_ns;                                                 \
        int vd = 0, vo = 0;                                                                                    \
        if (!stream)                                                                                           \
            stream = (c)->own_stream; /* the caller gave none: the communicator's own, if it has one */      \
        vendor_comm_lock(c);                                                                                   \
        pycoll_status_t st_ = vendor_begin((c), (count), (dtype), (op), (root), &vd, &vo);                     \
        (void)vo;                                                                                              \
        if (st_ == PYCOLL_OK) {                                                                                \
            stream = vendor_collective_stream((c), stream);                                                    \
            st_ = finish_collective((c), vendor_call_name((c)->v, (call)), (invoke), stream, (buf), deadline_); \
        }                                                                                                      \
        vendor_comm_unlock(c);                                                                                 \
        return st_;                                                                                            \
    } while (0)

pycoll_status_t pycoll_vendor_all_reduce(pycoll_vendor_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                         pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    VENDOR_CALL(c, PYCOLL_VENDOR_CALL_ALL_REDUCE, count, dtype, (int)op, -1, recvbuf,
                c->v->all_reduce(sendbuf, recvbuf, (uint64_t)count, vd, vo, c->comm, stream));
}

pycoll_status_t pycoll_vendor_reduce_scatter(pycoll_vendor_comm_t *c, const void *sendbuf, void *recvbuf,
                                             int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    VENDOR_CALL(c, PYCOLL_VENDOR_CALL_REDUCE_SCATTER, recv_count, dtype, (int)op, -1, recvbuf,
                c->v->reduce_scatter(sendbuf, recvbuf, (uint64_t)recv_count, vd, vo, c->comm, stream));
}

pycoll_status_t pycoll_vendor_all_gather(pycoll_vendor_comm_t *c, const void *sendbuf, void *recvbuf,
                                         int64_t send_count, pycoll_dtype_t dtype, void *stream)
{
    VENDOR_CALL(c, PYCOLL_VENDOR_CALL_ALL_GATHER, send_count, dtype, -1, -1, recvbuf,
                c->v->all_gather(sendbuf, recvbuf, (uint64_t)send_count, vd, c->comm, stream));
}

pycoll_status_t pycoll_vendor_broadcast(pycoll_vendor_comm_t *c, void *buf, int64_t count, pycoll_dtype_t dtype,
                                        int32_t root, void *stream)
{
    VENDOR_CALL(c, PYCOLL_VENDOR_CALL_BROADCAST, count, dtype, -1, root, buf,
                c->v->broadcast(buf, (uint64_t)count, vd, root, c->comm, stream));
}

pycoll_status_t pycoll_vendor_reduce(pycoll_vendor_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, void *stream)
{
    if (c->v->reduce_writes_every_rank && c->state.status == PYCOLL_OK && root != c->state.rank && count > 0 &&
        (unsigned)dtype < PYCOLL_NUM_DTYPES) {
        /* The vendor may write recvbuf off the root too: there it gets scratch, so the caller's buffers
         * (recvbuf, or sendbuf standing in for it) stay unchanged. */
        size_t bytes = (size_t)count * pycoll_dtype_size(dtype);
        if (bytes > c->reduce_scratch_bytes) {
            if (c->reduce_scratch)
                c->v->scratch_free(c->reduce_scratch);
            c->reduce_scratch = NULL;
            c->reduce_scratch_bytes = 0;
            int e = c->v->scratch_alloc(&c->reduce_scratch, bytes);
            if (e != 0) {
                c->reduce_scratch = NULL;
                return vendor_reject(c, PYCOLL_ERR_NOMEM, "%s: %s of %zu bytes for reduce's non-root scratch "
                                     "failed: %s", c->v->name, vendor_call_name(c->v, PYCOLL_VENDOR_CALL_SCRATCH_ALLOC),
                                     bytes, c->v->runtime_error ? c->v->runtime_error(e) : "runtime error");
            }
            c->reduce_scratch_bytes = bytes;
        }
        recvbuf = c->reduce_scratch;
    }
    VENDOR_CALL(c, PYCOLL_VENDOR_CALL_REDUCE, count, dtype, (int)op, root, recvbuf,
                c->v->reduce(sendbuf, recvbuf, (uint64_t)count, vd, vo, root, c->comm, stream));
}

/* Where the vendor has no barrier (NCCL), an all-reduce of one device word orders every rank, as
 * torch.distributed does. */
pycoll_status_t pycoll_vendor_barrier(pycoll_vendor_comm_t *c, void *stream)
{
    const pycoll_vendor_t *v = c->v;
    if (!stream)
        stream = c->own_stream; /* HCCL refuses a NULL stream (HCCL_E_PTR) */
    if (v->barrier)
        VENDOR_CALL(c, PYCOLL_VENDOR_CALL_BARRIER, 0, PYCOLL_INT32, -1, -1, NULL, v->barrier(c->comm, stream));
    if (c->state.status == PYCOLL_OK && !c->scratch) {
        int e = v->scratch_alloc(&c->scratch, sizeof(int32_t));
        if (e != 0)
            return pycoll_p2p_fail(&c->state, PYCOLL_ERR_NOMEM, -1, "%s: %s for the barrier failed: %s", v->name,
                                   vendor_call_name(v, PYCOLL_VENDOR_CALL_SCRATCH_ALLOC),
                                   v->runtime_error ? v->runtime_error(e) : "runtime error");
    }
    return pycoll_vendor_all_reduce(c, c->scratch, c->scratch, 1, PYCOLL_INT32, PYCOLL_SUM, stream);
}
