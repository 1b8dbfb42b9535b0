/* The communicator: numbers collectives, describes each one on the wire, sets its deadline, asks the decision
 * (native/algorithms/decision.c) which algorithm runs, hands the algorithm its context (options and scratch,
 * native/algorithms/context.h), and stays broken after the first error (a half-finished collective leaves
 * peers in unknown states, so continuing would risk silently wrong data). Non-blocking collectives run the same
 * comm_run_call on the progress thread (progress.c); each blocking entry point here first waits its turn. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms/table.h"
#include "kernels/memory_kernels.h"
#include "algorithms/schedule.h"
#include "comm/comm_internal.h"
#include "comm/flight_recorder.h"
#include "transport/group_view.h"
#include "common/p2p_share.h"
#include "pycoll/bootstrap.h"

void pycoll_comm_options_init(pycoll_comm_options_t *options)
{
    *options = (pycoll_comm_options_t){.version = PYCOLL_COMM_OPTIONS_VERSION,
                                       .timeout_s = PYCOLL_DEFAULT_TIMEOUT_S,
                                       .segment_bytes = PYCOLL_DEFAULT_SEGMENT_BYTES};
}

/* The message of the calling thread's last failed call, and the communicator it failed on. Per thread: several
 * threads may call one communicator (they take turns, progress.c), and one thread's message written into
 * comm->error could be overwritten by another's before the first reads it. */
static _Thread_local const pycoll_comm_t *error_comm;
static _Thread_local char error_text[COMM_ERROR_LEN];

static pycoll_status_t thread_error(const pycoll_comm_t *comm, pycoll_status_t st, const char *text)
{
    if (st != PYCOLL_OK) {
        snprintf(error_text, sizeof error_text, "%s", text);
        error_comm = comm;
    }
    return st;
}

/* First thing in every entry point that may touch the transport: forget this thread's last message, and refuse
 * a communicator of another process (a fork's parent) before touching anything of it -- its locks may have been
 * held by a thread that fork did not copy. */
pycoll_status_t comm_enter(const pycoll_comm_t *comm)
{
    error_comm = NULL;
    if (!comm_foreign(comm))
        return PYCOLL_OK;
    char text[COMM_ERROR_LEN];
    return thread_error(comm, comm_foreign_error(comm, text, sizeof text), text);
}

pycoll_status_t pycoll_comm_set_options(pycoll_comm_t *comm, const pycoll_comm_options_t *options)
{
    pycoll_status_t entered = comm_enter(comm);
    if (entered != PYCOLL_OK)
        return entered;
    progress_wait_turn(comm, 0); /* queued collectives run with the options they were called under */
    if (options->version != PYCOLL_COMM_OPTIONS_VERSION) {
        snprintf(comm->error, sizeof comm->error, "options: version %u, this library speaks %u",
                 (unsigned)options->version, (unsigned)PYCOLL_COMM_OPTIONS_VERSION);
        return PYCOLL_ERR_INVALID;
    }
    pycoll_comm_options_t o = *options;
    if (!(o.timeout_s > 0))
        o.timeout_s = PYCOLL_DEFAULT_TIMEOUT_S;
    if (o.segment_bytes <= 0)
        o.segment_bytes = PYCOLL_DEFAULT_SEGMENT_BYTES;
    if (o.spin_ns < 0)
        o.spin_ns = 0;
    comm->options = o;
    comm->ctx.segment_bytes = o.segment_bytes;
    comm->p2p->spin_ns = o.spin_ns;
    return PYCOLL_OK;
}

void pycoll_comm_get_options(const pycoll_comm_t *comm, pycoll_comm_options_t *options)
{
    *options = comm->options;
}

static pycoll_status_t create_error(char *error, size_t error_len, pycoll_status_t status, const char *message)
{
    if (error && error_len > 0)
        snprintf(error, error_len, "%s", message);
    return status;
}

pycoll_status_t pycoll_comm_create(pycoll_comm_t **out, pycoll_p2p_t *p2p, const pycoll_comm_options_t *options,
                                   char *error, size_t error_len)
{
    *out = NULL;
    create_error(error, error_len, PYCOLL_OK, "");
    if (!p2p || !p2p->ops)
        return create_error(error, error_len, PYCOLL_ERR_INVALID, "comm_create: no transport");
    /* Checked first, before anything reads past ops->version: a transport of another version lays out
     * pycoll_p2p_t and its ops differently, so using it would read garbage. */
    if (p2p->ops->version != PYCOLL_P2P_VERSION) {
        char message[160];
        snprintf(message, sizeof message,
                 "comm_create: transport speaks p2p ABI version %u, this libpycoll speaks %u; rebuild the "
                 "transport against this pycoll's headers",
                 (unsigned)p2p->ops->version, (unsigned)PYCOLL_P2P_VERSION);
        return create_error(error, error_len, PYCOLL_ERR_INVALID, message);
    }
    pycoll_comm_t *comm = calloc(1, sizeof *comm);
    comm_family_t *family = calloc(1, sizeof *family);
    if (!comm || !family) {
        free(comm);
        free(family);
        return create_error(error, error_len, PYCOLL_ERR_NOMEM, "comm_create: out of memory");
    }
    family->transport = p2p;
    family->refs = 1;
    comm->family = family;
    comm->p2p = p2p;
    comm->ctx.p2p = p2p;
    comm->hosts = 1;
    comm->max_local = p2p->size;
    pycoll_default_cost_model(&comm->model);
    pycoll_comm_options_t defaults;
    pycoll_comm_options_init(&defaults);
    comm->pid = comm_process_id();
    pycoll_status_t status = progress_init(family);
    if (status != PYCOLL_OK) {
        snprintf(comm->error, sizeof comm->error, "comm_create: cannot create the progress thread's lock");
    } else if ((status = pycoll_comm_set_options(comm, options ? options : &defaults)) != PYCOLL_OK) {
        progress_release(family);
        p2p->check_interrupt = family->progress.caller_interrupt; /* the caller keeps p2p as it gave it */
        p2p->interrupt_ctx = family->progress.caller_interrupt_ctx;
    }
    if (status != PYCOLL_OK) {
        create_error(error, error_len, status, comm->error);
        free(family);
        free(comm);
        return status;
    }
    comm->owner = pthread_self();
    comm_live_add(comm);
    *out = comm;
    return PYCOLL_OK;
}

pycoll_status_t pycoll_comm_finalize(pycoll_comm_t *comm, double linger_s)
{
    pycoll_status_t entered = comm_enter(comm);
    if (entered != PYCOLL_OK)
        return entered; /* no goodbye on the owner's connections, no join of a thread this process lacks */
    pycoll_p2p_t *p2p = comm->p2p;
    /* One deadline for the collective in flight and the goodbyes together: close is bounded by linger_s. */
    const int64_t linger_until = pycoll_now_ns() + (int64_t)((linger_s > 0 ? linger_s : 0) * 1e9);
    comm->error[0] = 0;
    progress_stop(comm, linger_s); /* the goodbye names the last collective that ran */
    if (comm->view) {
        /* A split says no goodbye of its own: its connections are the root's, whose close checks them. */
        comm->finalized = 1;
        return PYCOLL_OK;
    }
    comm->family->closed = 1; /* closing the root closes every split of it */
    progress_wait_callers(comm); /* a split's call on another thread may hold the transport still */
    if (comm->finalized || p2p->status != PYCOLL_OK || !p2p->ops->finalize || comm_ft_broken(comm))
        return PYCOLL_OK;
    comm->finalized = 1;
    return p2p->ops->finalize(p2p, linger_until);
}

void pycoll_comm_destroy(pycoll_comm_t *comm)
{
    if (!comm)
        return;
    /* Made by another process (this is a fork's child): its segments, connections and thread are the owner's.
     * Left as they are -- memory and descriptors of this process stay allocated until it exits or execs. */
    if (comm_enter(comm) != PYCOLL_OK)
        return;
    comm_family_t *family = comm->family;
    comm_live_remove(comm); /* first: waits for whoever acquired it by number */
    progress_stop(comm, 0);
    if (!comm->view) {
        family->closed = 1;
        progress_wait_callers(comm);
    }
    comm_workspace_release(&comm->ctx); /* first: a device table's free may need the transport's device */
    free(comm->repro_space);
    /* The root's transport, or a split's view (which frees only itself). */
    comm->p2p->ops->destroy(comm->p2p);
    free(comm->parent_ranks);
    free(comm->host_of);
    free(comm);
    pthread_mutex_lock(&family->progress.lock);
    const int last = --family->refs == 0;
    pthread_mutex_unlock(&family->progress.lock);
    if (last) {
        progress_release(family);
        comm_ft_release(family);
        free(family);
    }
}

int32_t pycoll_comm_rank(const pycoll_comm_t *comm) { return comm->p2p->rank; }
int32_t pycoll_comm_size(const pycoll_comm_t *comm) { return comm->p2p->size; }
void pycoll_comm_set_timeout(pycoll_comm_t *comm, double timeout_s)
{
    if (comm_enter(comm) != PYCOLL_OK)
        return;
    progress_wait_turn(comm, 0);
    comm->options.timeout_s = timeout_s > 0 ? timeout_s : PYCOLL_DEFAULT_TIMEOUT_S;
}

void pycoll_comm_set_cost_model(pycoll_comm_t *comm, const pycoll_cost_model_t *model)
{
    if (comm_enter(comm) != PYCOLL_OK)
        return;
    progress_wait_turn(comm, 0);
    comm->model = *model;
    comm_forget_decisions(comm);
}

/* How many hosts a (validated) map names, and the most ranks any of them has; 1 and size without a map. */
void comm_host_shape(const int32_t *host_of, int32_t size, int32_t *hosts, int32_t *max_local)
{
    *hosts = 1;
    *max_local = size;
    int32_t *ranks_on = host_of && size > 0 ? calloc((size_t)size, sizeof *ranks_on) : NULL;
    if (!ranks_on)
        return; /* no map, or no memory for the count: decide as for one host (a choice, never an error) */
    *hosts = *max_local = 0;
    for (int32_t r = 0; r < size; r++) {
        int32_t n = ++ranks_on[host_of[r]];
        *hosts += n == 1;
        *max_local = n > *max_local ? n : *max_local;
    }
    free(ranks_on);
}

pycoll_status_t pycoll_comm_set_hosts(pycoll_comm_t *comm, const int32_t *host_of)
{
    pycoll_status_t entered = comm_enter(comm);
    if (entered != PYCOLL_OK)
        return entered;
    progress_wait_turn(comm, 0); /* queued collectives run with the map they were called under */
    const int32_t size = comm->p2p->size;
    comm->error[0] = 0;
    int32_t *copy = NULL;
    if (host_of) {
        for (int32_t r = 0; r < size; r++)
            if (host_of[r] < 0 || host_of[r] >= size) {
                snprintf(comm->error, sizeof comm->error, "hosts: rank %d's host is %d, expected 0..%d", (int)r,
                         (int)host_of[r], (int)size - 1);
                return PYCOLL_ERR_INVALID;
            }
        copy = malloc((size_t)size * sizeof *copy);
        if (!copy) {
            snprintf(comm->error, sizeof comm->error, "hosts: out of memory");
            return PYCOLL_ERR_NOMEM;
        }
        for (int32_t r = 0; r < size; r++)
            copy[r] = host_of[r];
    }
    free(comm->host_of);
    comm->host_of = copy;
    comm->ctx.host_of = copy;
    comm_host_shape(copy, size, &comm->hosts, &comm->max_local);
    comm_forget_decisions(comm);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_comm_get_hosts(const pycoll_comm_t *comm, int32_t *host_of)
{
    if (!comm->host_of)
        return PYCOLL_ERR_INVALID;
    for (int32_t r = 0; r < comm->p2p->size; r++)
        host_of[r] = comm->host_of[r];
    return PYCOLL_OK;
}

const char *pycoll_comm_transport(const pycoll_comm_t *comm)
{
    const char *name = comm->family->transport->ops->name;
    if (strcmp(name, "routed") == 0)
        return "shm+tcp"; /* the only composite pycoll_comm_init_rank builds */
    return strcmp(name, "tcp") == 0 || strcmp(name, "shm") == 0 ? name : NULL;
}

pycoll_algorithm_t pycoll_comm_last_algorithm(const pycoll_comm_t *comm) { return comm->last_algorithm; }

const char *pycoll_comm_error(const pycoll_comm_t *comm)
{
    if (error_comm == comm)
        return error_text;
    return comm->error[0] ? comm->error : comm->p2p->error;
}

int32_t pycoll_comm_failed_rank(const pycoll_comm_t *comm) { return comm->p2p->failed_rank; }

pycoll_status_t comm_usable(pycoll_comm_t *comm, char *error, size_t error_len)
{
    pycoll_p2p_t *p2p = comm->p2p;
    error[0] = 0;
    if (comm->family->closed && !comm->finalized) {
        snprintf(error, error_len, "the communicator this one was split from is closed");
        return PYCOLL_ERR_CLOSED;
    }
    pycoll_status_t ft = comm_ft_usable(comm, error, error_len);
    if (ft != PYCOLL_OK)
        return ft;
    if (comm->view)
        p2p_adopt_error(p2p, comm->family->transport); /* broken by any collective of the family */
    if (p2p->status != PYCOLL_OK) {
        snprintf(error, error_len, "communicator is unusable after an earlier error: %s", p2p->error);
        return p2p->status == PYCOLL_ERR_REVOKED ? PYCOLL_ERR_REVOKED : PYCOLL_ERR_CLOSED;
    }
    if (comm->finalized) {
        snprintf(error, error_len, "communicator is finalized (closed)");
        return PYCOLL_ERR_CLOSED;
    }
    return PYCOLL_OK;
}

/* Each thread's tag, stamped on the collectives it calls (comm.h). */
static _Thread_local uint32_t thread_tag;
static _Thread_local int thread_tagged;

void pycoll_set_thread_tag(uint32_t tag)
{
    thread_tag = tag & 0xffffffu; /* the descriptor has 24 bits for it */
    if (thread_tag == PYCOLL_THREAD_INTERNAL)
        thread_tag--;
    thread_tagged = 1;
}

uint32_t pycoll_thread_tag(int *is_set)
{
    if (is_set)
        *is_set = thread_tagged;
    return thread_tag;
}

static _Thread_local char thread_name[48];

void pycoll_set_thread_name(const char *name) { snprintf(thread_name, sizeof thread_name, "%s", name ? name : ""); }

void comm_thread_name(char *out, size_t len)
{
    if (thread_name[0])
        snprintf(out, len, "thread '%s'", thread_name);
    else if (thread_tagged)
        snprintf(out, len, "the thread tagged %06x", (unsigned)thread_tag);
    else
        snprintf(out, len, "thread %#lx", (unsigned long)pthread_self());
}

uint32_t comm_caller_tag(const pycoll_comm_t *comm)
{
    /* A process that is several ranks runs them on threads named as it likes: their names say nothing about
     * which thread of another rank corresponds (comm.h). */
    if (pthread_equal(pthread_self(), comm->owner) || comm_several_ranks())
        return 0;
    return thread_tag;
}

void pycoll_comm_set_internal(pycoll_comm_t *comm, int internal)
{
    if (comm_enter(comm) != PYCOLL_OK)
        return;
    progress_wait_turn(comm, 0); /* queued calls keep what they were called as */
    comm->internal = internal != 0;
}

/* Stamp the (checked) call on p2p: its descriptor, the history fingerprint, its deadline. data_bytes: what one
 * rank's block weighs on the wire, for the decision. */
static pycoll_status_t begin(pycoll_comm_t *comm, const comm_call_t *call, int64_t data_bytes, char *error,
                             size_t error_len)
{
    pycoll_p2p_t *p2p = comm->p2p;
    const pycoll_call_t *a = &call->args;
    pycoll_status_t st = comm_usable(comm, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    const pycoll_algorithm_t algorithm = comm_decide(comm, a->collective, a->algorithm, data_bytes);
    const uint32_t thread = comm->internal ? PYCOLL_THREAD_INTERNAL : call->thread;
    pycoll_coll_desc_t desc = {.seq = comm->internal ? ++comm->internal_seq : ++comm->seq,
                               .history = pycoll_history_next(&p2p->desc),
                               .count = call->desc_count, .root = a->root, .coll = (uint8_t)a->collective,
                               .dtype = (uint8_t)a->dtype, .op = (uint8_t)a->op, .algorithm = (uint8_t)algorithm,
                               .accuracy = (uint8_t)a->accuracy,
                               .group = comm->internal ? comm->group ^ INTERNAL_GROUP_SALT : comm->group,
                               .thread = {(uint8_t)thread, (uint8_t)(thread >> 8), (uint8_t)(thread >> 16)}};
    p2p->prev_desc = p2p->desc;
    p2p->desc = desc;
    p2p->deadline_ns = pycoll_now_ns() + (int64_t)(comm->options.timeout_s * 1e9);
    return PYCOLL_OK;
}

/* After an algorithm returns: an error breaks the communicator and is announced to the peers. */
pycoll_status_t comm_finish(pycoll_comm_t *comm, pycoll_status_t st)
{
    if (st != PYCOLL_OK) {
        if (comm->p2p->status == PYCOLL_OK)
            pycoll_p2p_fail(comm->p2p, st, -1, "%s failed with status %d", "collective", (int)st);
        comm->p2p->ops->abort(comm->p2p, comm->p2p->status, comm->p2p->error);
        return comm->p2p->status;
    }
    return PYCOLL_OK;
}

/* The collective begin() stamped, run by the schedule its algorithm's table entry (table.c) has for it: the
 * caller's algorithm serves it (comm_check_call), and so does the decision's. */
static pycoll_status_t dispatch(pycoll_comm_t *comm, const comm_call_t *call, pycoll_algorithm_t algorithm)
{
    const pycoll_call_t *c = &call->args;
    const coll_algorithm_t *a = algorithm_entry(algorithm);
    assert(a && algorithm_serves(a, c->collective));
    return comm_finish(comm, collective_runners[c->collective](a, &comm->ctx, c, call->count));
}

pycoll_status_t comm_run_stage(pycoll_comm_t *comm, const comm_call_t *stamped, const comm_call_t *runs,
                               char *error, size_t error_len, pycoll_algorithm_t *ran)
{
    pycoll_status_t st = begin(comm, stamped, runs->count * (int64_t)pycoll_dtype_size(runs->args.dtype), error,
                               error_len);
    if (st != PYCOLL_OK)
        return st;
    *ran = (pycoll_algorithm_t)comm->p2p->desc.algorithm;
    if (!comm->view)
        return dispatch(comm, runs, *ran);
    group_view_enter(comm->view); /* the root's transport carries this split's collective */
    return group_view_leave(comm->view, dispatch(comm, runs, *ran));
}

const pycoll_native_collectives_t *comm_coded_native(pycoll_comm_t *comm, pycoll_algorithm_t requested,
                                                     int64_t wire_bytes)
{
    const pycoll_native_collectives_t *native = comm->p2p->ops->native;
    if (comm->view || comm->p2p->kernels || !native || native->version < 4 || !native->all_reduce_coded)
        return NULL;
    const pycoll_algorithm_t decided = comm_decide(comm, PYCOLL_COLL_ALL_REDUCE, requested, wire_bytes);
    return (int32_t)decided == native->algorithm ? native : NULL;
}

pycoll_status_t comm_run_coded_stage(pycoll_comm_t *comm, const pycoll_native_collectives_t *native,
                                     const comm_call_t *stamped, int64_t wire_bytes, const pycoll_exact_codec_t *codec,
                                     char *error, size_t error_len, pycoll_algorithm_t *ran)
{
    pycoll_status_t st = begin(comm, stamped, wire_bytes, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    *ran = (pycoll_algorithm_t)comm->p2p->desc.algorithm;
    const pycoll_call_t *a = &stamped->args;
    return comm_finish(comm, native->all_reduce_coded(comm->p2p, a->sendbuf, a->recvbuf, stamped->count, codec));
}

pycoll_status_t comm_run_call(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                              pycoll_algorithm_t *ran)
{
    pycoll_status_t st = call->args.accuracy == PYCOLL_ACCURACY_REPRODUCIBLE
                             ? comm_run_reproducible(comm, call, error, error_len, ran)
                             : comm_run_stage(comm, call, call, error, error_len, ran);
    comm_workspace_call_end(&comm->ctx); /* still on the call's thread: a device table's binding holds */
    return st;
}

/* A call that ends outside a turn of its own (interrupted or failed while waiting for it, or a send/recv that
 * joined the queued ones): its flight record ends naming no algorithm. */
static pycoll_status_t end_outside_turn(pycoll_comm_t *comm, const comm_call_t *call, pycoll_status_t st,
                                        const char *why)
{
    thread_error(comm, st, why);
    return flight_recorder_end(comm, call->record, st, PYCOLL_NUM_ALGOS, pycoll_comm_error(comm));
}

/* A blocking call: its turn after every queued one and after any other thread's blocking call, then run on the
 * caller's thread. Its message is copied for this thread, and its flight record ended, before the turn ends: the
 * next thread's call may write comm->error and comm->last_algorithm, and starts (and may end) as soon as the turn
 * is given up, so a record ended after that could show this call ending after the next. */
static pycoll_status_t run_blocking(pycoll_comm_t *comm, const comm_call_t *call)
{
    pycoll_status_t st = PYCOLL_OK;
    if (comm_call_is_p2p(call) && progress_join_p2p(comm, call, &st))
        return end_outside_turn(comm, call, st, comm->error[0] ? comm->error : comm->p2p->error);
    char waited[COMM_ERROR_LEN];
    st = progress_take_turn(comm, 1, waited, sizeof waited);
    if (st == PYCOLL_ERR_INTERRUPTED)
        return end_outside_turn(comm, call, st, "interrupted while waiting for earlier collectives to finish");
    if (st != PYCOLL_OK)
        return end_outside_turn(comm, call, st, waited);
    comm->error[0] = 0;
    pycoll_algorithm_t ran = comm->last_algorithm;
    if (comm_call_is_p2p(call)) {
        st = comm_run_p2p(comm, call, comm->error, sizeof comm->error);
    } else {
        st = comm_run_call(comm, call, comm->error, sizeof comm->error, &ran);
        comm->last_algorithm = ran;
    }
    thread_error(comm, st, comm->error[0] ? comm->error : comm->p2p->error);
    flight_recorder_end(comm, call->record, st, ran, pycoll_comm_error(comm));
    progress_end_turn(comm);
    return st;
}

pycoll_status_t pycoll_comm_run(pycoll_comm_t *comm, const pycoll_call_t *call, pycoll_work_t **work)
{
    comm_call_t checked;
    if (work)
        *work = NULL;
    pycoll_status_t st = comm_enter(comm);
    if (st != PYCOLL_OK)
        return st;
    char error[COMM_ERROR_LEN];
    st = comm_check_call(comm, call, &checked, error, sizeof error);
    if (st != PYCOLL_OK)
        return thread_error(comm, st, error);
    checked.thread = comm_caller_tag(comm); /* the caller's, also where the progress thread runs it */
    checked.record = flight_recorder_begin(comm, &checked, work != NULL);
    if (!work)
        return run_blocking(comm, &checked);
    st = progress_start(comm, &checked, work);
    return thread_error(comm, flight_recorder_end(comm, st == PYCOLL_OK ? 0 : checked.record, st, PYCOLL_NUM_ALGOS,
                                                  comm->error), comm->error);
}
