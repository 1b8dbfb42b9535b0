/* The communicator: one group of ranks over one transport. It numbers collectives, stamps what each one is on
 * the wire, sets its deadline, picks the algorithm, and after the first error refuses further collectives.
 * This is the C ABI that other frameworks call; pycoll's Python layer is a thin wrapper over it. */
#ifndef PYCOLL_COMM_H
#define PYCOLL_COMM_H

#include "pycoll/algorithms.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pycoll_comm pycoll_comm_t;

/* Per-communicator settings (nothing in libpycoll reads the environment for them; pycoll's Python layer takes
 * its defaults from PYCOLL_RING_SEGMENT_BYTES and PYCOLL_SPIN_US). Versioned so that fields can be appended:
 * fill it with pycoll_comm_options_init, then change what you need. */
#define PYCOLL_COMM_OPTIONS_VERSION 1
#define PYCOLL_DEFAULT_TIMEOUT_S 300.0
/* See native/algorithms/ring.c for why this size. */
#define PYCOLL_DEFAULT_SEGMENT_BYTES (512 * 1024)

typedef struct pycoll_comm_options {
    uint32_t version;      /* PYCOLL_COMM_OPTIONS_VERSION */
    uint32_t reserved;
    double timeout_s;      /* bounds every collective; <= 0: PYCOLL_DEFAULT_TIMEOUT_S */
    int64_t segment_bytes; /* ring and pipelined-broadcast segment, largest halving_doubling unit; <= 0: default.
                            * Every rank must use the same value (it shapes the messages). */
    int64_t spin_ns;       /* how long a wait polls before it sleeps; 0: sleep at once (polling lowers latency
                            * when every rank has a core of its own) */
} pycoll_comm_options_t;

PYCOLL_API void pycoll_comm_options_init(pycoll_comm_options_t *options);

/* A communicator over p2p, with options (NULL: the defaults). On success *comm owns p2p (destroyed with the
 * communicator). On failure *comm is NULL, error says why, and the caller keeps p2p: PYCOLL_ERR_INVALID for
 * a transport built against another PYCOLL_P2P_VERSION (its struct layout is not this library's) or options
 * of an unknown version, PYCOLL_ERR_NOMEM. */
PYCOLL_API pycoll_status_t pycoll_comm_create(pycoll_comm_t **comm, pycoll_p2p_t *p2p,
                                              const pycoll_comm_options_t *options, char *error, size_t error_len);
/* Replace the options between collectives (every rank alike); PYCOLL_ERR_INVALID for an unknown version. */
PYCOLL_API pycoll_status_t pycoll_comm_set_options(pycoll_comm_t *comm, const pycoll_comm_options_t *options);
PYCOLL_API void pycoll_comm_get_options(const pycoll_comm_t *comm, pycoll_comm_options_t *options);
/* A checked close, before destroy: says goodbye to every peer and waits up to linger_s for theirs, to confirm
 * that every rank called the same collectives (a rooted collective whose ranks disagree on the root can
 * complete without an error on some ranks; this is where that is caught at the latest). Returns
 * PYCOLL_ERR_MISMATCH naming both sides, else PYCOLL_OK (peers that are gone or slower than linger_s are not
 * an error). No collective may follow. Optional: destroy alone closes without the check. */
PYCOLL_API pycoll_status_t pycoll_comm_finalize(pycoll_comm_t *comm, double linger_s);
PYCOLL_API void pycoll_comm_destroy(pycoll_comm_t *comm);

/* For callers that keep a communicator as a number (an XLA program compiled with one: pycoll.jax). Its id is
 * never reused within the process. pycoll_comm_acquire gives the communicator while it exists and is not being
 * destroyed, NULL otherwise; until pycoll_comm_release, its destroy waits. */
PYCOLL_API uint64_t pycoll_comm_id(const pycoll_comm_t *comm);
PYCOLL_API pycoll_comm_t *pycoll_comm_acquire(uint64_t id);
PYCOLL_API void pycoll_comm_release(pycoll_comm_t *comm);

PYCOLL_API int32_t pycoll_comm_rank(const pycoll_comm_t *comm);
PYCOLL_API int32_t pycoll_comm_size(const pycoll_comm_t *comm);
PYCOLL_API void pycoll_comm_set_timeout(pycoll_comm_t *comm, double timeout_s);
PYCOLL_API void pycoll_comm_set_cost_model(pycoll_comm_t *comm, const pycoll_cost_model_t *model);
/* Which host each rank is on, for the hierarchical all-reduce: host_of[r] for r in 0..size-1, each in
 * 0..size-1 (ranks with the same value share a host); copied. Every rank must pass the same map (it shapes the
 * messages). NULL: no map, every rank on one host (hierarchical then runs the ring's two phases). Between
 * collectives only. PYCOLL_ERR_INVALID (pycoll_comm_error says which rank's entry) for a value out of range. */
PYCOLL_API pycoll_status_t pycoll_comm_set_hosts(pycoll_comm_t *comm, const int32_t *host_of);
/* Subgroups. A collective over comm (every rank calls it, in the same place among comm's collectives): ranks
 * that pass the same color >= 0 get a new communicator of their own in *child, numbered by (key, then rank in
 * comm); PYCOLL_SPLIT_NONE gives *child NULL. The child uses comm's connections (no new sockets, segments or
 * rendezvous) and inherits its options, cost model and host map; it and comm and every other split of their
 * root form a family whose collectives run one at a time, in call order, on each rank, so ranks that share
 * several of them must call those in the same order (else PYCOLL_ERR_MISMATCH naming both). An error in any
 * breaks the whole family on that rank, and its peers' (the first error is announced as on the root). Errors
 * name ranks as the root communicator numbers them. Finalizing or destroying the root closes every split
 * (their collectives then fail with PYCOLL_ERR_CLOSED; each is still destroyed by its own
 * pycoll_comm_destroy); finalizing a split checks nothing (the root's close checks the connections). */
#define PYCOLL_SPLIT_NONE (-1)
PYCOLL_API pycoll_status_t pycoll_comm_split(pycoll_comm_t *comm, int32_t color, int32_t key,
                                             pycoll_comm_t **child);
/* The rank in the communicator comm was split from of comm's member `rank` (the root: rank itself); -1 for a
 * rank out of range. */
PYCOLL_API int32_t pycoll_comm_parent_rank(const pycoll_comm_t *comm, int32_t rank);

/* Surviving a lost rank (docs/fault_tolerance.md). Over the shared-memory and TCP transports.
 * pycoll_comm_revoke: from any thread, never waits: every rank's pending and later collectives on comm's family
 * (comm, the communicator it was split from and every split) fail with PYCOLL_ERR_REVOKED, within about a
 * millisecond, also where another thread of this rank waits in one (its wait is woken).
 * pycoll_comm_agree: collective over comm's live members (after a failure or a revoke too; ranks found dead
 * are left out): *flag becomes the bitwise AND of their flags, the same on every rank that returns PYCOLL_OK,
 * also when ranks die during it. Bounded by timeout_s (<= 0: the communicator's timeout).
 * pycoll_comm_shrink: an agreement, then *out a communicator of the survivors, numbered in their order in comm
 * (pycoll_comm_parent_rank: their rank in comm), over the same connections. The ranks in exclude[0..n_exclude)
 * (comm's ranks; every survivor passes the same) are left out alive; they, the dead and the ranks outside comm
 * never take part. After a failure, a revoke or a shrink that left ranks out, the communicators made before
 * refuse collectives (PYCOLL_ERR_CLOSED, or PYCOLL_ERR_REVOKED after a revoke) but may still agree and shrink;
 * destroying comm's root closes *out, as any split. A rank that the others found gone gets
 * PYCOLL_ERR_PEER_FAILURE.
 * pycoll_comm_failed_ranks: the ranks of comm (its numbering) that agreements found lost, in order: their
 * number, the first max of them in ranks (may be NULL). */
PYCOLL_API pycoll_status_t pycoll_comm_revoke(pycoll_comm_t *comm);
PYCOLL_API pycoll_status_t pycoll_comm_agree(pycoll_comm_t *comm, int64_t *flag, double timeout_s);
PYCOLL_API pycoll_status_t pycoll_comm_shrink(pycoll_comm_t *comm, const int32_t *exclude, int32_t n_exclude,
                                              double timeout_s, pycoll_comm_t **out);
PYCOLL_API int32_t pycoll_comm_failed_ranks(const pycoll_comm_t *comm, int32_t *ranks, int32_t max);
/* Growing a job (native/bootstrap/grow.c; the id is pycoll/bootstrap.h's pycoll_unique_id_t).
 * pycoll_comm_grow: collective over comm's members: *out a communicator of world_size (> comm's size) ranks, in
 * which each member keeps its rank in comm and the new processes are ranks size..world_size-1. The id is read on
 * comm's rank 0 only (the others may pass NULL) and reaches the members over comm; the program hands the same
 * id to the new processes by its own means. It must be made (pycoll_get_unique_id) by a process that takes
 * part, as for pycoll_comm_init_rank. A fresh bootstrap: new connections and segments, nothing shared with
 * comm, which may be destroyed afterwards. timeout_s <= 0: comm's timeout. Errors as pycoll_comm_init_rank's
 * (PYCOLL_ERR_TIMEOUT names the ranks that did not come), PYCOLL_ERR_INVALID for world_size <= comm's size or
 * no id on rank 0 (every member alike); the message: pycoll_bootstrap_error().
 * pycoll_comm_join: a new process's side, as pycoll_comm_init_rank with rank in [1, world_size). */
struct pycoll_unique_id;
PYCOLL_API pycoll_status_t pycoll_comm_grow(pycoll_comm_t *comm, int32_t world_size, const struct pycoll_unique_id *id,
                                            double timeout_s, pycoll_comm_t **out);
PYCOLL_API pycoll_status_t pycoll_comm_join(pycoll_comm_t **out, int32_t world_size, const struct pycoll_unique_id *id,
                                            int32_t rank, double timeout_s);

/* After a failed call: the message, and the rank it is about (or -1). */
/* The flight recorder (PYCOLL_TRACE_BUFFER: its last calls, kept by every communicator). pycoll_comm_dump_trace
 * writes its dump (JSON, docs/api.md's format) to `path` whole or not at all: a file, or a directory to hold the
 * file pycoll-trace-<comm_uid>-rank<R>.json, or NULL for that file in PYCOLL_TRACE_DIR (PYCOLL_ERR_INVALID when it
 * is unset). pycoll_comm_trace_path: the file that dump would write, into out. pycoll_comm_trace_json: the dump
 * into buf (len bytes, NUL-terminated, cut short where it does not fit); returns its whole length, -1 out of
 * memory. */
PYCOLL_API pycoll_status_t pycoll_comm_dump_trace(pycoll_comm_t *comm, const char *path);
PYCOLL_API pycoll_status_t pycoll_comm_trace_path(const pycoll_comm_t *comm, const char *path, char *out,
                                                  int32_t len);
PYCOLL_API int64_t pycoll_comm_trace_json(pycoll_comm_t *comm, char *buf, int64_t len);

PYCOLL_API const char *pycoll_comm_error(const pycoll_comm_t *comm);
PYCOLL_API int32_t pycoll_comm_failed_rank(const pycoll_comm_t *comm);
/* The algorithm the last collective ran (AUTO resolved). */
PYCOLL_API pycoll_algorithm_t pycoll_comm_last_algorithm(const pycoll_comm_t *comm);

/* Threads. A communicator runs one call at a time; threads that take turns on it must do so in the same order
 * on every rank, or rank 0's k-th collective (from thread A) would meet rank 1's k-th (from thread B) and
 * silently combine the wrong buffers. So every collective carries its calling thread's tag (24 bits): none (0)
 * from the thread that made the communicator (pycoll_comm_create, or the split), else the tag set per thread
 * with pycoll_set_thread_tag (0 until then). Ranks that run one collective from differently tagged threads
 * fail with PYCOLL_ERR_MISMATCH naming both tags. The Python binding tags each thread with a hash of its name
 * (threading.current_thread().name at the thread's first call), so threads named alike on every rank
 * correspond. A process that holds communicators of several ranks (ranks run as threads of one process) tags
 * nothing: there threads are ranks, named as the program likes. The tag of a non-blocking call is taken when
 * it is started. Point-to-point messages carry no tag (a send and its
 * receive match by peer, tag and length). */
PYCOLL_API void pycoll_set_thread_tag(uint32_t tag);
/* The calling thread's tag, and whether one was set (*is_set may be NULL). */
PYCOLL_API uint32_t pycoll_thread_tag(int *is_set);
/* Name the calling thread in messages (up to 47 bytes kept): a call that waits past the communicator's timeout
 * for another thread's call on the same family fails with PYCOLL_ERR_TIMEOUT naming that thread. Threads take
 * turns: a blocking call waits while another thread runs one on the communicator or on any communicator that
 * shares its connections, and is never refused (a call refused on one rank only would leave that rank a
 * collective behind the others). */
PYCOLL_API void pycoll_set_thread_name(const char *name);

/* While `internal` is non-zero, comm's calls are the library's own (the Python binding's cost-model broadcast
 * during init), made alike on every rank: they are numbered apart from the caller's collectives (whose first
 * stays #1) and messages call them internal. */
PYCOLL_API void pycoll_comm_set_internal(pycoll_comm_t *comm, int internal);

/* sendbuf == recvbuf is in place. */
PYCOLL_API pycoll_status_t pycoll_comm_all_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                  pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_reduce_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                      int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                      pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_all_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t send_count, pycoll_dtype_t dtype);
PYCOLL_API pycoll_status_t pycoll_comm_broadcast(pycoll_comm_t *comm, void *buf, int64_t count,
                                                 pycoll_dtype_t dtype, int32_t root);
PYCOLL_API pycoll_status_t pycoll_comm_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                              pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_barrier(pycoll_comm_t *comm);

/* Non-blocking collectives. Each pycoll_comm_start_X takes X's arguments, checks them at once (a bad one:
 * PYCOLL_ERR_INVALID, *work NULL, pycoll_comm_error says which; after finalize: PYCOLL_ERR_CLOSED) and queues
 * the collective on the communicator's progress thread (started by the first such call, joined by finalize or
 * destroy), which runs queued collectives one at a time, in call order, without calling back into the caller.
 * Every blocking pycoll_comm_X first waits for the queue to run empty, so on every rank the collectives run in
 * the order they were called, blocking or not: descriptors, history fingerprints and deadlines are stamped
 * when each one starts, so mismatch detection and deadlines work as for blocking calls.
 * An error fails its work and every later one with the same status and message (the real cause; the
 * communicator is broken by the first). pycoll_comm_finalize and destroy fail queued works with
 * PYCOLL_ERR_CLOSED, give the one in flight the finalize's linger_s (destroy: none) to finish, then interrupt
 * it (it fails with PYCOLL_ERR_CLOSED; the peers see this rank abort).
 * Buffers must stay valid until the work completes. The communicator's functions are called from one thread at
 * a time; the pycoll_work_* functions from any thread, also after the communicator is destroyed. */
typedef struct pycoll_work pycoll_work_t;

PYCOLL_API pycoll_status_t pycoll_comm_start_all_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                        int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                        pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy,
                                                        pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_reduce_scatter(pycoll_comm_t *comm, const void *sendbuf,
                                                            void *recvbuf, int64_t recv_count,
                                                            pycoll_dtype_t dtype, pycoll_op_t op,
                                                            pycoll_algorithm_t algorithm,
                                                            pycoll_accuracy_t accuracy, pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_all_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                        int64_t send_count, pycoll_dtype_t dtype,
                                                        pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_broadcast(pycoll_comm_t *comm, void *buf, int64_t count,
                                                       pycoll_dtype_t dtype, int32_t root, pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                    int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                    int32_t root, pycoll_accuracy_t accuracy,
                                                    pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_barrier(pycoll_comm_t *comm, pycoll_work_t **work);

/* Point to point: count elements of dtype to or from rank peer (not this rank) of comm. Messages from one rank
 * to another are received in the order they were sent, whatever their tags: a receive whose tag or length
 * differs from the next message's is PYCOLL_ERR_MISMATCH naming both. They take their turn among the
 * communicator family's collectives like any call; non-blocking sends and receives queued one after another
 * are posted together, so a send and a receive between two ranks, started in either order on each, cannot
 * wait for each other. A blocking send returns once its bytes are handed to the transport (small messages at
 * once; large ones when the receiver takes them). */
PYCOLL_API pycoll_status_t pycoll_comm_send(pycoll_comm_t *comm, const void *buf, int64_t count,
                                            pycoll_dtype_t dtype, int32_t peer, uint32_t tag);
PYCOLL_API pycoll_status_t pycoll_comm_recv(pycoll_comm_t *comm, void *buf, int64_t count, pycoll_dtype_t dtype,
                                            int32_t peer, uint32_t tag);
PYCOLL_API pycoll_status_t pycoll_comm_start_send(pycoll_comm_t *comm, const void *buf, int64_t count,
                                                  pycoll_dtype_t dtype, int32_t peer, uint32_t tag,
                                                  pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_recv(pycoll_comm_t *comm, void *buf, int64_t count,
                                                  pycoll_dtype_t dtype, int32_t peer, uint32_t tag,
                                                  pycoll_work_t **work);

/* Wait up to timeout_s seconds (<= 0: do not wait) for work to complete: 1 when it has, 0 when not yet (the
 * work is unaffected: wait again). pycoll_work_test is pycoll_work_wait(work, 0). */
PYCOLL_API int pycoll_work_wait(pycoll_work_t *work, double timeout_s);
PYCOLL_API int pycoll_work_test(pycoll_work_t *work);
/* Once complete: PYCOLL_OK or the error, its message ("" on success), the rank it is about (or -1), and the
 * algorithm that ran (AUTO resolved; PYCOLL_ALGO_AUTO if it never ran). Before: PYCOLL_ERR_INVALID, "". */
PYCOLL_API pycoll_status_t pycoll_work_status(pycoll_work_t *work);
PYCOLL_API const char *pycoll_work_error(pycoll_work_t *work);
PYCOLL_API int32_t pycoll_work_failed_rank(pycoll_work_t *work);
PYCOLL_API pycoll_algorithm_t pycoll_work_algorithm(pycoll_work_t *work);
/* The caller's handle is gone; a work still queued or running completes all the same (its buffers must stay
 * valid until then) and is freed afterwards. */
PYCOLL_API void pycoll_work_free(pycoll_work_t *work);

/* all_to_all, gather, scatter and the uneven (_v) collectives, blocking and non-blocking (pycoll_comm_start_*, as above). Checked like the others:
 * a bad argument is PYCOLL_ERR_INVALID naming it, before anything is sent, the communicator intact.
 * all_to_all: sendbuf and recvbuf hold size * count elements and must not overlap; block j of sendbuf goes to
 * rank j, block i of recvbuf comes from rank i (pairwise exchange). */
PYCOLL_API pycoll_status_t pycoll_comm_all_to_all(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t count, pycoll_dtype_t dtype);
/* gather: every rank sends count elements; the root's recvbuf (size * count) gets rank r's in block r; recvbuf
 * may be NULL elsewhere. scatter: the root's sendbuf (size * count) sends block r to rank r's recvbuf (count);
 * sendbuf may be NULL elsewhere. Flat schedules (gather_scatter.c). */
PYCOLL_API pycoll_status_t pycoll_comm_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              int64_t count, pycoll_dtype_t dtype, int32_t root);
PYCOLL_API pycoll_status_t pycoll_comm_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                               int64_t count, pycoll_dtype_t dtype, int32_t root);
/* Uneven blocks: counts[r] >= 0 elements for rank r (size entries; every rank must pass the same, or the call
 * fails with PYCOLL_ERR_MISMATCH naming both sides). all_gather_v: sendbuf holds counts[rank] elements,
 * recvbuf sum(counts), rank r's block from offset counts[0] + ... + counts[r-1]. reduce_scatter_v: sendbuf
 * holds sum(counts), recvbuf counts[rank]: the reduction of block rank; accuracy as reduce_scatter's. Ring
 * schedules. counts, like the buffers, must stay valid until a non-blocking call completes. */
PYCOLL_API pycoll_status_t pycoll_comm_all_gather_v(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                    const int64_t *counts, pycoll_dtype_t dtype);
PYCOLL_API pycoll_status_t pycoll_comm_reduce_scatter_v(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                        const int64_t *counts, pycoll_dtype_t dtype,
                                                        pycoll_op_t op, pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_start_all_to_all(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                        int64_t count, pycoll_dtype_t dtype, pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                    int64_t count, pycoll_dtype_t dtype, int32_t root,
                                                    pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                     int64_t count, pycoll_dtype_t dtype, int32_t root,
                                                     pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_all_gather_v(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                          const int64_t *counts, pycoll_dtype_t dtype,
                                                          pycoll_work_t **work);
PYCOLL_API pycoll_status_t pycoll_comm_start_reduce_scatter_v(pycoll_comm_t *comm, const void *sendbuf,
                                                              void *recvbuf, const int64_t *counts,
                                                              pycoll_dtype_t dtype, pycoll_op_t op,
                                                              pycoll_accuracy_t accuracy, pycoll_work_t **work);

#ifdef __cplusplus
}
#endif
#endif
