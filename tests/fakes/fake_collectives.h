/* The engine behind the fake vendor libraries (fake_nccl.c, fake_hccl.c): collectives that really run across
 * processes, each rank publishing its bytes to a file named after the unique id and sequence number, in the
 * directory FAKE_COLL_DIR. "Device memory" is host memory; a "stream" is any pointer, busy while it has work
 * queued. Each communicator runs its init and collectives on a worker thread, as a GPU runs them off the
 * caller's thread, so a missing peer leaves the stream busy until the caller aborts. */
#ifndef FAKE_COLLECTIVES_H
#define FAKE_COLLECTIVES_H

#include <stddef.h>

/* FAKE_SEND / FAKE_RECV: point-to-point, `root` is the peer; each (sender, receiver) pair is a FIFO channel. */
/* FAKE_REDUCE_EVERY_RANK: a reduce that writes the result into recv on every rank, not only the root (as HCCL's
 * may). FAKE_BARRIER: every rank's arrival, no data (a finalize). */
/* FAKE_GROUP: a group's sends and receives on one communicator, progressed together (fake_group_end makes it). */
enum fake_kind { FAKE_ALL_REDUCE, FAKE_REDUCE_SCATTER, FAKE_ALL_GATHER, FAKE_BROADCAST, FAKE_REDUCE, FAKE_SEND,
                 FAKE_RECV, FAKE_REDUCE_EVERY_RANK, FAKE_BARRIER, FAKE_GROUP };
enum fake_dtype { FAKE_I8, FAKE_U8, FAKE_I32, FAKE_U32, FAKE_I64, FAKE_U64, FAKE_F16, FAKE_F32, FAKE_F64, FAKE_BF16 };
enum fake_op { FAKE_SUM, FAKE_PROD, FAKE_MIN, FAKE_MAX, FAKE_AVG };

typedef struct fake_comm fake_comm_t;

size_t fake_dtype_size(int dtype);
/* A fresh random id, as text, into out[0..len). */
void fake_new_id(char *out, size_t len);
/* Starts the rendezvous of `nranks` ranks on id in the background. */
fake_comm_t *fake_comm_start(const char *id, int rank, int nranks);
/* 1 once every rank has joined, 0 before. */
int fake_comm_ready(fake_comm_t *c);
/* The error code injected into a collective's completion (0: none). A collective that hits it never completes
 * (its kernel waits for the peer that failed): its stream stays busy until the communicator is aborted. */
int fake_comm_async_error(fake_comm_t *c);
void fake_comm_enqueue(fake_comm_t *c, int kind, const void *send, void *recv, size_t count, int dtype, int op,
                       int root, void *stream, int async_error);
/* The vendor's code for a receive whose count differs from its send's (reported as an asynchronous error). */
void fake_comm_set_mismatch_error(fake_comm_t *c, int code);
/* A group (ncclGroupStart/End): jobs enqueued inside it reach the communicators at the end; its sends and
 * receives on a communicator run as one job, progressed together (fake_collectives.c says what a send waits
 * for). Per thread, as in NCCL. */
void fake_group_start(void);
void fake_group_end(void);
/* Streams (fake_collectives.c says how their work is ordered): set fake_legacy_default_stream to give the NULL
 * stream CUDA's legacy semantics; a stream flagged FAKE_STREAM_NON_BLOCKING (cudaStreamNonBlocking) does not
 * synchronise with it. */
enum { FAKE_STREAM_NON_BLOCKING = 1 };
extern int fake_legacy_default_stream;
void fake_stream_set_flags(void *stream, int flags);
/* Queues fn(arg) (NULL: nothing, a marker) on stream, to run on the stream's own thread in its turn, and, when
 * after_mark > 0, once after_stream's mark after_mark is reached too (cudaStreamWaitEvent); its mark on
 * stream (an event recorded now completes with it), -1 without memory. */
long long fake_stream_submit(void *stream, void (*fn)(void *), void *arg, void *after_stream, long long after_mark);
/* 1 while `stream` has queued work. */
int fake_stream_busy(void *stream);
/* How long ago `stream`'s last work completed, once per completion (0: busy, or already asked): how late the
 * caller noticed. */
long long fake_stream_idle_for_ns(void *stream);
/* An event: the amount of work ever queued on `stream` now, and whether that much has completed since (work
 * on a stream completes in order). */
long long fake_stream_mark(void *stream);
int fake_stream_reached(void *stream, long long mark);
/* 1 while any stream has queued work (what a device-wide synchronisation, cudaFree, waits for). */
int fake_any_stream_busy(void);
/* The id c joined on (a shrink derives its child's from it). */
const char *fake_comm_id(const fake_comm_t *c);
/* 1 while c has work queued or running. */
int fake_comm_busy(fake_comm_t *c);
/* Revoke: stop at once, even mid-collective, releasing the streams of its work (the kernels end); c stays, to
 * be freed by abort or destroy. */
void fake_comm_cancel(fake_comm_t *c);
/* Abort: stop at once, even mid-collective. Destroy: finish queued work first. Both free c. */
void fake_comm_abort(fake_comm_t *c);
void fake_comm_destroy(fake_comm_t *c);
/* Appends a line to the file FAKE_COLL_LOG (if set). */
void fake_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The code FAKE_COLL_FAIL injects into `call`: "name=code[,name=code...]"; 0 when none. */
int fake_injected(const char *call);

#endif
