/* The point-to-point interface every collective algorithm is written against (as Gloo's algorithms see only
 * a context and buffers). A transport -- TCP sockets, shared memory, an in-process simulation, a vendor
 * library's send/recv -- implements pycoll_p2p_ops_t; the algorithms in native/algorithms never know which. */
#ifndef PYCOLL_P2P_H
#define PYCOLL_P2P_H

#include "pycoll/ids.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A transport sets ops->version to the PYCOLL_P2P_VERSION it was built against; pycoll_comm_create refuses
 * any other (the struct layouts below differ between versions).
 * 2: the descriptor carries the history fingerprint; p2p carries prev_desc and an optional finalize.
 * 3: the algorithms' scratch left pycoll_p2p (the communicator owns it); p2p carries spin_ns.
 * 4: ops end with an optional table of native collectives (`native`) and an optional progress (a wait's one
 *    non-blocking pass, for transports composed of others).
 * 5: the descriptor names its group: communicators split from one another share their parent's transport, so
 *    a transport compares collectives by (group, seq), never by seq alone (transport/frame.h's helpers). */
#define PYCOLL_P2P_VERSION 5
#define PYCOLL_ERROR_LEN 512

typedef struct pycoll_coll_desc {
    uint64_t seq;   /* collectives called on this communicator so far */
    /* A fingerprint of every earlier collective's descriptor. Two ranks whose histories differ disagreed
     * somewhere before -- also where that collective exchanged no message between them (a rooted collective
     * whose ranks disagree on the root can complete on every rank), so comparing it on every message and at
     * close is what keeps a disagreement from passing silently. */
    uint64_t history;
    int64_t count;  /* elements per rank as the caller passed them */
    int32_t root;   /* -1 where the collective has none */
    uint8_t coll;   /* pycoll_coll_t */
    uint8_t dtype;  /* pycoll_dtype_t */
    uint8_t op;     /* pycoll_op_t */
    uint8_t algorithm; /* pycoll_algorithm_t, resolved (never AUTO) */
    uint8_t accuracy;  /* pycoll_accuracy_t */
    /* The calling thread's tag (pycoll_set_thread_tag, comm.h), 24 bits little-endian; 0 where none was set.
     * Ranks whose threads take turns on one communicator in different orders run a slot from differently
     * tagged threads: that is a mismatch, where without the tag the calls would look identical. */
    uint8_t thread[3];
    /* The communicator it runs on: 0 for one made by pycoll_comm_create, an id every member of a split agrees
     * on otherwise (pycoll_comm_split). Messages of every communicator in a family travel over the root's
     * connections, in each rank's call order; seq and history count per group. */
    uint32_t group;
} pycoll_coll_desc_t; /* 40 bytes, sent as is (little-endian hosts only) */

/* Whether a and b are the same collective slot: the same group's seq-th collective (which every rank of that
 * group must call alike). */
static inline int pycoll_same_slot(const pycoll_coll_desc_t *a, const pycoll_coll_desc_t *b)
{
    return a->group == b->group && a->seq == b->seq;
}

/* The thread tag of the library's own calls (pycoll_comm_set_internal), never a caller's. */
#define PYCOLL_THREAD_INTERNAL 0xffffffu

static inline uint32_t pycoll_desc_thread(const pycoll_coll_desc_t *d)
{
    return (uint32_t)d->thread[0] | (uint32_t)d->thread[1] << 8 | (uint32_t)d->thread[2] << 16;
}

/* One number per collective slot, for "once per collective" bookkeeping in transports. */
static inline uint64_t pycoll_slot_key(const pycoll_coll_desc_t *d)
{
    return d->seq ^ ((uint64_t)d->group << 32);
}

/* One pending send or receive of a byte range. Owned by the caller until the transport completes it. */
typedef struct pycoll_request {
    void *buf;
    int64_t nbytes;
    int32_t peer;
    uint32_t tag;      /* must match between the send and its receive; a different tag is a mismatch */
    uint8_t is_send;
    uint8_t complete;  /* set by the transport */
    /* Set by the communicator on a blocking receive that its caller waits for alone (nothing else can be
     * posted on this rank until it completes): a peer that waits the same way for this rank is a cycle. */
    uint8_t sole_wait;
    uint8_t reserved;
    uint32_t stuck_epoch; /* transport-private (transport/request_queue.c): the stuck wait it is part of */
    int64_t progress;  /* transport-private: bytes moved so far */
    struct pycoll_request *next; /* transport-private: queue link */
} pycoll_request_t;

typedef struct pycoll_p2p pycoll_p2p_t;

/* Collectives a transport runs itself instead of pycoll's algorithms over its post/wait (as an Open MPI coll
 * component fills only the collectives it does well). The communicator calls an entry when the decision
 * resolves to the table's algorithm; a NULL entry means "none": that collective runs pycoll's algorithms.
 * Called after the communicator checked the arguments, stamped p2p->desc (whose algorithm is `algorithm`) and
 * set p2p->deadline_ns; on error p2p->error says why, as for wait. Every rank must end with bitwise identical
 * results. */
#define PYCOLL_NATIVE_COLLECTIVES_VERSION 4 /* 2: all_to_all appended; 3: reduce_scatter, all_gather;
                                              * 4: all_reduce_coded, reduce */

/* An exact sum of elements (accuracy="reproducible"): each rank's elements go on the wire as encode makes them,
 * and sum turns the wire pieces of every rank into the result. The sum is exact, so it does not depend on the
 * order the pieces come in, and a transport may encode and sum any piece at any time: it encodes on the way into
 * its own buffers and sums each element once there, instead of passes over separate arrays of encoded data. */
typedef struct pycoll_exact_codec {
    int32_t wire_bytes;   /* bytes of one element on the wire */
    int32_t elem_bytes;   /* bytes of one of the caller's elements */
    /* wire[0..n) = elems[0..n) encoded; NULL: the elements go on the wire as they are. */
    void (*encode)(const void *ctx, const void *elems, int64_t n, void *wire);
    /* elems[0..n) = the exact sum of the n_wires pieces wires[k][0..n), rounded once; scratch holds n *
     * max(wire_bytes, 8) bytes. */
    void (*sum)(const void *ctx, const void *const *wires, int32_t n_wires, int64_t n, void *elems, void *scratch);
    const void *ctx;
} pycoll_exact_codec_t;

typedef struct pycoll_native_collectives {
    uint32_t version;   /* PYCOLL_NATIVE_COLLECTIVES_VERSION */
    int32_t algorithm;  /* the pycoll_algorithm_t these run as (e.g. PYCOLL_ALGO_SHM_SLOTS), named in descriptors */
    /* sendbuf == recvbuf is in place. PYCOLL_AVG sums, then divides once by p2p->size; COMPENSATED as in
     * kernels.h (float sum/avg), other dtypes and ops as FAST. */
    pycoll_status_t (*all_reduce)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                  pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);
    pycoll_status_t (*broadcast)(pycoll_p2p_t *p2p, void *buf, int64_t count, pycoll_dtype_t dtype, int32_t root);
    pycoll_status_t (*barrier)(pycoll_p2p_t *p2p);
    /* Since version 2 (read only from a table that says so): sendbuf and recvbuf hold size * count elements
     * and do not overlap; block j of sendbuf goes to rank j, block i of recvbuf comes from rank i. */
    pycoll_status_t (*all_to_all)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                  pycoll_dtype_t dtype);
    /* Since version 3. reduce_scatter: sendbuf holds size * count elements, rank r gets the reduction of block
     * r in recvbuf[0..count) (separate memory; op and accuracy as for all_reduce). all_gather: recvbuf holds
     * size * count elements, block r from rank r's sendbuf[0..count); sendbuf may be this rank's own block of
     * recvbuf, and overlaps it nowhere else. */
    pycoll_status_t (*reduce_scatter)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);
    pycoll_status_t (*all_gather)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                  pycoll_dtype_t dtype);
    /* Since version 4: an all-reduce summed exactly through codec: every rank's recvbuf gets codec's sum of
     * every rank's encoded sendbuf. sendbuf == recvbuf is in place. Host memory only. */
    pycoll_status_t (*all_reduce_coded)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                        const pycoll_exact_codec_t *codec);
    /* Since version 4: the all-reduce's result on root only, in its recvbuf (NULL elsewhere); sendbuf is not
     * modified. */
    pycoll_status_t (*reduce)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                              pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy);
} pycoll_native_collectives_t;

typedef struct pycoll_p2p_ops {
    uint32_t version; /* PYCOLL_P2P_VERSION */
    const char *name;
    /* Start a send or a receive; never blocks. Messages between a pair of ranks are matched in the order they
     * were posted (per direction), so an algorithm posts in the same order on both sides. */
    pycoll_status_t (*post)(pycoll_p2p_t *p2p, pycoll_request_t *req);
    /* Make progress on every posted request until all of reqs[0..n) are complete, the deadline passes, or a
     * peer fails. On error p2p->error says why; the communicator is then broken. */
    pycoll_status_t (*wait)(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n);
    /* Tell every reachable peer that this rank is giving up (so they fail fast instead of waiting). */
    void (*abort)(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message);
    void (*destroy)(pycoll_p2p_t *p2p);
    /* Optional (NULL: nothing to check). A clean goodbye before destroy: tell every peer this rank is done,
     * with the descriptor of its last collective, and wait until deadline_ns for theirs. Returns
     * PYCOLL_ERR_MISMATCH (p2p->error naming both sides) when a peer's history differs or a peer's message was
     * never received; peers that are gone or slower than the deadline are not an error here. */
    pycoll_status_t (*finalize)(pycoll_p2p_t *p2p, int64_t deadline_ns);
    /* Optional (NULL: none): the collectives this transport runs natively. */
    const pycoll_native_collectives_t *native;
    /* Optional (NULL: the transport can only be driven by its own wait). One pass of wait
     * that never blocks, so that a transport made of several (native/transport/routed_transport.c) can wait
     * on all of them at once: move whatever can move with every peer (ABORT, GOODBYE and STATE frames
     * included) and check that peers still live. reqs[0..n) is the caller's whole wait, also requests that
     * other transports carry (their peers are absent here), and started_ns when it began: once
     * PYCOLL_PROBE_AFTER_NS (transport/frame.h) has passed, tell the peers waited for which collective this rank
     * is in and whom it waits for; once p2p->deadline_ns has, fail with PYCOLL_ERR_TIMEOUT if the first
     * pending request is this transport's. Returns 1 if anything moved, else 0. An error is left in
     * p2p->status, not aborted: the caller aborts. Sleeping, yielding and the interrupt check are the
     * caller's. */
    int (*progress)(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, int64_t started_ns);
} pycoll_p2p_ops_t;

/* The ops of a transport whose four required functions are named prefix_post, prefix_wait, prefix_abort and
 * prefix_destroy, followed by its optional entries as designated initializers (at least one, NULL where it has
 * none), e.g.  static const pycoll_p2p_ops_t tcp_ops = PYCOLL_P2P_OPS(tcp, "tcp", .finalize = tcp_finalize); */
#define PYCOLL_P2P_OPS(prefix, transport_name, ...)                                                            \
    {.version = PYCOLL_P2P_VERSION, .name = (transport_name), .post = prefix##_post, .wait = prefix##_wait,   \
     .abort = prefix##_abort, .destroy = prefix##_destroy, __VA_ARGS__}

struct pycoll_p2p {
    const pycoll_p2p_ops_t *ops;
    int32_t rank;
    int32_t size;
    int64_t deadline_ns;      /* CLOCK_MONOTONIC deadline of the collective in progress */
    pycoll_coll_desc_t desc;  /* the collective in progress, stamped on every message */
    pycoll_coll_desc_t prev_desc; /* the one before it (all zero before the first), to name both sides of a
                                   * disagreement found only in the next collective */
    pycoll_status_t status;   /* first error; PYCOLL_OK while healthy */
    int32_t failed_rank;      /* the rank an error is about, or -1 */
    char error[PYCOLL_ERROR_LEN];
    /* Optional: called while a wait blocks (after a signal, and every ~100 ms); non-zero stops the
     * collective with PYCOLL_ERR_INTERRUPTED. Python uses it so Ctrl-C is not held up until the deadline. */
    int (*check_interrupt)(void *ctx);
    void *interrupt_ctx;
    /* How long a wait polls before it sleeps, set by the communicator from its options (a transport that
     * cannot poll ignores it). */
    int64_t spin_ns;
    /* The memory table for the memory this transport's buffers live in (native/kernels/memory_kernels.h): the
     * elementwise kernels, copies and data scratch every schedule uses; NULL: host memory (kernels.h's SIMD
     * kernels, memmove, malloc). May change between collectives (the communicator's workspace follows it). */
    const struct pycoll_memory_kernels *kernels;
};

/* Record the first error on p2p (later ones keep the first message) and return it. printf-style. */
PYCOLL_API pycoll_status_t pycoll_p2p_fail(pycoll_p2p_t *p2p, pycoll_status_t status, int32_t failed_rank,
                                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Blocking conveniences built on post + wait. */
PYCOLL_API pycoll_status_t pycoll_send(pycoll_p2p_t *p2p, int32_t peer, const void *buf, int64_t nbytes,
                                       uint32_t tag);
PYCOLL_API pycoll_status_t pycoll_recv(pycoll_p2p_t *p2p, int32_t peer, void *buf, int64_t nbytes, uint32_t tag);
/* Send to one peer and receive from another (or the same) at once: full duplex, no deadlock. */
PYCOLL_API pycoll_status_t pycoll_sendrecv(pycoll_p2p_t *p2p, int32_t send_peer, const void *send_buf,
                                           int64_t send_nbytes, int32_t recv_peer, void *recv_buf,
                                           int64_t recv_nbytes, uint32_t tag);

/* Monotonic clock in nanoseconds, for deadlines. */
PYCOLL_API int64_t pycoll_now_ns(void);

/* Human-readable description of a collective, for mismatch messages: "all_reduce(float32 x 1024, sum, ring)". */
PYCOLL_API void pycoll_describe_coll(const pycoll_coll_desc_t *desc, char *out, size_t len);
/* Record a disagreement between this rank (its desc and prev_desc) and rank `peer`, whose message carried
 * `theirs` and `theirs_prev`, as PYCOLL_ERR_MISMATCH naming both sides; `context` (may be "") says where it
 * was found. Picks the collective the two disagree on: the current one, the previous one, or a stale one. */
PYCOLL_API pycoll_status_t pycoll_p2p_mismatch(pycoll_p2p_t *p2p, int32_t peer, const pycoll_coll_desc_t *theirs,
                                               const pycoll_coll_desc_t *theirs_prev, const char *context);
/* The history fingerprint after `desc`: what the next collective's desc.history must be on every rank. */
PYCOLL_API uint64_t pycoll_history_next(const pycoll_coll_desc_t *desc);
#ifdef __cplusplus
}
#endif
#endif
