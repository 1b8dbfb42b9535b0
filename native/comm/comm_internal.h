/* What the communicator (communicator.c) and its progress thread (progress.c) share: the communicator's
 * struct, one collective call as data, and the functions each file offers the other. Internal to native/comm. */
#ifndef PYCOLL_COMM_INTERNAL_H
#define PYCOLL_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "algorithms/context.h"
#include "pycoll/call.h"

#define COMM_ERROR_LEN (PYCOLL_ERROR_LEN + 64) /* room for a prefix before the transport's message */
/* The groups of a communicator's point-to-point messages and of pycoll's own calls on it (the cost model
 * broadcast during init): its group xor these, distinct from every split's group (those are hashes) and from
 * its own, so that neither takes a number in the user's sequence of collectives. */
#define P2P_GROUP_SALT 0x9e3779b9u
#define INTERNAL_GROUP_SALT 0x7f4a7c15u

/* A call as the communicator runs it, checked (comm_check_call): the caller's description and what the check
 * derived from it once, so that a blocking call and a queued one run the same code. */
typedef struct comm_call {
    pycoll_call_t args;  /* as the caller described it */
    int64_t count;       /* the count the algorithms take: the elements of one rank's block (all_reduce, reduce,
                          * broadcast: the whole buffer; send_recv: the message); 0 for the _v collectives */
    int64_t desc_count;  /* what the descriptor carries: count, or the _v collectives' counts fingerprint */
    uint32_t thread;     /* the caller's thread tag (pycoll_set_thread_tag), taken when the call is made */
    uint64_t record;     /* its flight recorder entry (flight_recorder.h), 0: none */
} comm_call_t;

/* The progress thread's state. The lock guards the queue, `running`, `caller_running` and `stopping`; the
 * transport is used by one thread at a time: the progress thread while it runs a queued collective, else a
 * caller (a blocking call first waits, under the lock, until the queue is empty and nothing runs, then marks
 * `caller_running` so that nothing else starts until it is done). */
typedef struct comm_progress {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a collective was queued or finished, or the thread is asked to stop */
    pthread_t thread;
    int started;            /* the thread exists */
    int stopping;
    struct pycoll_work *head, *tail; /* queued, not yet started, in call order */
    struct pycoll_work *running;
    int caller_running;     /* a blocking collective runs on a caller's thread */
    char caller_name[64];   /* that thread, as messages name it (comm_thread_name) */
    atomic_int cancel;      /* close gave up waiting: the collective in flight stops at its next interrupt check */
    /* The transport's interrupt check as the caller installed it: it runs only on the caller's threads (it may
     * be Python's signal check, which takes the GIL); the progress thread checks `cancel` instead. */
    int (*caller_interrupt)(void *ctx);
    void *caller_interrupt_ctx;
} comm_progress_t;

/* A communicator and every communicator split from it, at any depth: they share the root's transport, and one
 * queue and progress thread, so that on every rank their collectives run one at a time in call order -- the
 * order in which their messages meet on each pair's connection. */
typedef struct comm_family {
    pycoll_p2p_t *transport;
    comm_progress_t progress;
    int refs;   /* communicators of the family not yet destroyed (under progress.lock) */
    int closed; /* the root was finalized or destroyed: every communicator of the family refuses collectives */
    atomic_int revoked;   /* pycoll_comm_revoke: the collective in flight stops at its next interrupt check */
    struct comm_ft *ft;   /* ft_state.h: what agreements and shrinks left (NULL before the first) */
} comm_family_t;

/* decision_cache.c: one remembered decision. */
#define COMM_DECISIONS 16
typedef struct comm_decision {
    int64_t nbytes;
    uint8_t coll, requested, algorithm, known;
} comm_decision_t;

struct pycoll_comm {
    pycoll_p2p_t *p2p; /* the root's transport, or a split's view over it */
    comm_family_t *family;
    struct group_view *view; /* a split's view (p2p is its p2p), NULL for the root */
    int32_t *parent_ranks;   /* a split's members as the communicator it was split from numbers them */
    uint32_t group;          /* stamped on its collectives (pycoll_coll_desc_t.group): 0 for the root */
    uint64_t splits;         /* splits made from this communicator so far: names their groups */
    coll_ctx_t ctx; /* p2p, segment size and the algorithms' scratch, kept between collectives */
    pycoll_comm_options_t options;
    uint64_t seq;
    int internal;          /* pycoll_comm_set_internal: calls now are pycoll's own */
    pthread_t owner;       /* the thread that made it: its calls carry no thread tag (comm.h) */
    int pid;               /* the process that made it (owner_process.c) */
    uint64_t internal_seq; /* pycoll's own calls so far, numbered apart from the user's */
    pycoll_cost_model_t model;
    comm_decision_t decisions[COMM_DECISIONS]; /* decision_cache.c: what model and host map decided lately */
    pycoll_algorithm_t last_algorithm; /* of the last blocking collective */
    int32_t *host_of; /* the host map (pycoll_comm_set_hosts), NULL: one host; ctx.host_of points here */
    int32_t hosts, max_local; /* its shape, for the decision: 1 and size without a map */
    void *repro_space;        /* reproducible.c's codes and limbs, host memory, kept between calls */
    int64_t repro_space_bytes;
    int finalized;
    uint32_t ft_generation; /* agree.c: the fault-tolerance epoch it was made in (a shrink's), 0 at first */
    char error[COMM_ERROR_LEN]; /* written only on the caller's thread */
    /* live_comms.c: this communicator's place among those that exist, and who holds it by number. */
    uint64_t live_id;
    struct pycoll_comm *live_prev, *live_next;
    int64_t live_holds;
    int live_closing;
    struct flight_recorder *recorder; /* flight_recorder.h: its recent calls (NULL: not recorded) */
};

/* decision_cache.c: the algorithm `coll` runs with for `nbytes` per rank when `requested`
 * (pycoll_decide_algorithm_hosts for this communicator), remembered; forget after changing the cost model or the
 * host map. Called within the communicator's turn (progress.c), like everything that runs a collective. */
pycoll_algorithm_t comm_decide(pycoll_comm_t *comm, pycoll_coll_t coll, pycoll_algorithm_t requested,
                               int64_t nbytes);
void comm_forget_decisions(pycoll_comm_t *comm);

/* live_comms.c: every communicator is registered once made (cannot fail) and removed first thing in destroy,
 * which waits there for the callers that acquired it by number (pycoll_comm_acquire). */
void comm_live_add(pycoll_comm_t *comm);
/* Whether this process holds communicators of several ranks (of one job, run as threads, or of several). */
int comm_several_ranks(void);
/* communicator.c: the thread tag (comm.h) a call made now on comm carries. */
uint32_t comm_caller_tag(const pycoll_comm_t *comm);
void comm_live_remove(pycoll_comm_t *comm);
/* live_comms.c: fn(comm, arg) for each communicator that exists and is not being destroyed, under the list's lock
 * (fn must not make or destroy one); and the members of c as messages and dumps name them. */
void comm_live_each(void (*fn)(pycoll_comm_t *comm, void *arg), void *arg);
void comm_live_members(const pycoll_comm_t *c, char *out, size_t len);

/* call.c: check a call -- version, ids, counts against the collective, root and peer -- without changing any
 * state (PYCOLL_ERR_INVALID with `error` saying which field), and fill *out. The one place calls are checked. */
pycoll_status_t comm_check_call(const pycoll_comm_t *comm, const pycoll_call_t *call, comm_call_t *out, char *error,
                                size_t error_len);
/* communicator.c: run a checked call (stamp, set the deadline, run the algorithm, break the communicator on
 * failure). `ran` gets the algorithm that ran. */
pycoll_status_t comm_run_call(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                              pycoll_algorithm_t *ran);
/* communicator.c: one stage of a call: stamp `stamped`'s descriptor (its seq, group and history as any call's;
 * the decision weighs `runs`' bytes), then run `runs` -- the same call, or what a mode made of it -- by the
 * algorithm decided. No workspace release: comm_run_call does it once the whole call is done. */
pycoll_status_t comm_run_stage(pycoll_comm_t *comm, const comm_call_t *stamped, const comm_call_t *runs,
                               char *error, size_t error_len, pycoll_algorithm_t *ran);
/* communicator.c: an all-reduce summed exactly through a codec (p2p.h's all_reduce_coded).
 * comm_coded_native: the transport's native table where the decision for `wire_bytes` of the codec's wire
 * elements is its own all-reduce and it takes a codec, else NULL. comm_run_coded_stage: that all-reduce of the
 * call `stamped`, stamped and decided as comm_run_stage. */
const pycoll_native_collectives_t *comm_coded_native(pycoll_comm_t *comm, pycoll_algorithm_t requested,
                                                     int64_t wire_bytes);
pycoll_status_t comm_run_coded_stage(pycoll_comm_t *comm, const pycoll_native_collectives_t *native,
                                     const comm_call_t *stamped, int64_t wire_bytes, const pycoll_exact_codec_t *codec,
                                     char *error, size_t error_len, pycoll_algorithm_t *ran);
/* reproducible.c: a call with accuracy reproducible (call.c checked what it covers), in two stages. */
pycoll_status_t comm_run_reproducible(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                                      pycoll_algorithm_t *ran);
/* point_to_point.c. While sends and receives of comm are in flight (between begin and end) the transport
 * stamps comm's point-to-point descriptor on every frame; end gives the collectives theirs back, and on error
 * breaks comm (as comm_finish). comm_run_p2p: one, posted and waited for on the caller's thread. The progress
 * thread's flight keeps up to COMM_P2P_BATCH of them going. */
#define COMM_P2P_BATCH 64
typedef struct comm_p2p_saved {
    pycoll_coll_desc_t desc, prev_desc;
} comm_p2p_saved_t;
pycoll_status_t comm_p2p_begin(pycoll_comm_t *comm, comm_p2p_saved_t *saved, char *error, size_t error_len);
void comm_p2p_extend_deadline(pycoll_comm_t *comm);
pycoll_status_t comm_p2p_post(pycoll_comm_t *comm, const comm_call_t *call, pycoll_request_t *req);
pycoll_status_t comm_p2p_end(pycoll_comm_t *comm, const comm_p2p_saved_t *saved, pycoll_status_t st);
pycoll_status_t comm_run_p2p(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len);
static inline int comm_call_is_p2p(const comm_call_t *call) { return call->args.collective == PYCOLL_COLL_SEND_RECV; }
/* communicator.c: PYCOLL_OK when comm may run a collective now, else why not (closed, broken). */
pycoll_status_t comm_usable(pycoll_comm_t *comm, char *error, size_t error_len);
pycoll_status_t comm_finish(pycoll_comm_t *comm, pycoll_status_t st);

/* owner_process.c: this process's id (cached; refreshed in a fork's child), whether comm was made by another
 * process (a fork's parent), and the error that says so (PYCOLL_ERR_FORKED). */
int comm_process_id(void);
int comm_foreign(const pycoll_comm_t *comm);
pycoll_status_t comm_foreign_error(const pycoll_comm_t *comm, char *error, size_t error_len);
/* communicator.c: first thing in every entry point that may touch the transport: forget the calling thread's
 * last message, and refuse (PYCOLL_ERR_FORKED, its message the thread's) a communicator of another process. */
pycoll_status_t comm_enter(const pycoll_comm_t *comm);
/* communicator.c: the calling thread as messages name it (pycoll_set_thread_name, else its tag), into out. */
void comm_thread_name(char *out, size_t len);
/* revoke.c. comm_ft_usable: PYCOLL_OK, or why comm may no longer run collectives although its transport runs
 * again (a shrink left it behind; revoked), with `error` saying so. comm_ft_release: with the family. */
pycoll_status_t comm_ft_usable(pycoll_comm_t *comm, char *error, size_t error_len);
/* revoke.c: whether a failure or a revoke left comm behind (its collectives stopped in different places on the
 * ranks: its close checks nothing). */
int comm_ft_broken(const pycoll_comm_t *comm);
void comm_ft_release(comm_family_t *family);
/* split.c: a communicator of comm's members[0..n) (comm's ranks, taken over), this rank at `index`, as a view
 * over the family's transport stamped with `group`; it inherits comm's options, cost model and host map. */
pycoll_status_t comm_view_child(pycoll_comm_t *comm, int32_t *members, int32_t n, int32_t index, uint32_t group,
                                pycoll_comm_t **out);

/* How many hosts a (validated) host map names, and the most ranks any of them has; 1 and size without one. */
void comm_host_shape(const int32_t *host_of, int32_t size, int32_t *hosts, int32_t *max_local);

/* progress.c. The family's state lives as long as any of its communicators. */
pycoll_status_t progress_init(comm_family_t *family);
/* Wait until every queued collective of the family has run (progress_wait_turn), or in addition take the
 * transport for a blocking collective on the caller's thread until progress_end_turn (progress_take_turn).
 * Another thread of the caller's that runs a call on the family is waited for, never refused: a call refused
 * on one rank only would leave that rank one collective behind the others, and every later call would pair
 * with the wrong one. That wait ends at the communicator's timeout with PYCOLL_ERR_TIMEOUT, `error` naming the
 * thread that holds the family (nothing was sent: the communicator stays usable). With `interruptible`, the
 * caller's interrupt check runs every 100 ms and ends the wait with PYCOLL_ERR_INTERRUPTED (the queued
 * collectives keep running). Bounded: each queued collective has its deadline. */
pycoll_status_t progress_wait_turn(pycoll_comm_t *comm, int interruptible);
pycoll_status_t progress_take_turn(pycoll_comm_t *comm, int interruptible, char *error, size_t error_len);
void progress_end_turn(pycoll_comm_t *comm);
/* Wait until no caller's thread runs a blocking call on the family (the root's close, once the family is marked
 * closed: a split's call on another thread may still hold the transport). */
void progress_wait_callers(pycoll_comm_t *comm);
/* Fail the queued collectives with PYCOLL_ERR_CLOSED, give the one in flight up to linger_s to finish, then
 * interrupt it: the whole family's, and join the thread (comm the root), or only comm's (a split). Idempotent. */
void progress_stop(pycoll_comm_t *comm, double linger_s);
void progress_release(comm_family_t *family);
pycoll_status_t progress_start(pycoll_comm_t *comm, const comm_call_t *call, pycoll_work_t **work);
/* A blocking send or receive while the family's queue or flight is busy joins them on the progress thread
 * instead of waiting for them (a rank that queued receives and then sends blocking would otherwise wait for
 * itself): 1 with *status once done, 0 when nothing is busy (run it on the caller's thread). */
int progress_join_p2p(pycoll_comm_t *comm, const comm_call_t *call, pycoll_status_t *status);

#endif
