/* What the fake vendor libraries (fake_nccl.c, fake_hccl.c) do alike, over the engine (fake_collectives.h): a
 * vendor communicator, its creation and teardown, its asynchronous error, and the path of every collective
 * call (logged, failed on request, checked, enqueued). Each fake keeps only its vendor's names and codes. */
#ifndef FAKE_VENDOR_H
#define FAKE_VENDOR_H

#include <stddef.h>

#include "fake_collectives.h"

#define EXPORT __attribute__((visibility("default")))

/* The vendor's communicator handle (ncclComm_t, HcclComm). */
typedef struct fake_vendor_comm {
    fake_comm_t *fake;
    int rank, nranks;
    unsigned algorithms; /* the vendor's algorithm setting as read at init: a bit per algorithm it may run */
    int sticky;          /* a non-blocking communicator's error, reported by every later call (0: none) */
    int blocking;        /* NCCL's config.blocking */
    int finalizing;      /* a finalize is queued on finalize_stream */
    char finalize_stream; /* its address is the stream the finalize runs on */
    int launching;       /* a non-blocking call returned "in progress": async-error polls left until it is not */
    int revoked;         /* ncclCommRevoke: its work stopped, every later call but a shrink refused */
    int shrinks;         /* shrinks made from it so far: each child's id is derived from the count */
    int device;          /* the device it runs on (NCCL's: current on the creating thread) */
} fake_vendor_comm_t;

/* How a vendor numbers dtypes and ops: its code -> the engine's (-1: the vendor has the code, the fake does not
 * reduce it), and the result for a bad argument. */
typedef struct fake_vendor {
    const int *dtypes;
    int num_dtypes;
    const int *ops;
    int num_ops;
    int invalid_argument;
} fake_vendor_t;

/* An event of the vendor's runtime (cudaEvent_t, aclrtEvent): the stream and its mark when last recorded. */
typedef struct fake_event {
    void *stream;
    long long mark;
} fake_event_t;

/* A new event (NULL without memory); recorded: it completes once the work queued on `stream` now has (logged
 * as "<call> stream=..."); 1 once complete. */
fake_event_t *fake_event_new(void);
void fake_event_record(fake_event_t *e, void *stream, const char *call);
int fake_event_done(const fake_event_t *e);

/* Until stream's mark is reached (fake_wait_mark), or until the work queued on stream now has completed
 * (fake_stream_sync): 0, or 1 after FAKE_DEADLOCK_S ("<what> deadlocked" logged), as fake_wait_or_deadlock. */
int fake_wait_mark(void *stream, long long mark, const char *what);
int fake_stream_sync(void *stream, const char *what);
/* For tests: a "kernel" of `us` microseconds queued on stream; its mark. */
long long fake_stream_sleep(void *stream, long long us);
/* An asynchronous copy queued on stream (snapshot: the source is read now, as the runtime stages a pageable
 * host source before it returns); its mark, -1 without memory. */
long long fake_copy_async(void *stream, void *dst, const void *src, size_t nbytes, int snapshot);

/* A communicator joining the rendezvous on id in the background; mismatch: the vendor's code for a receive
 * whose count differs from its send's. */
fake_vendor_comm_t *fake_vendor_comm_new(const char *id, int rank, int nranks, int mismatch);
/* Until fn(arg) is 0, or FAKE_DEADLOCK_S seconds (default 8) pass: then logs "<what> deadlocked" and returns 1.
 * Where the real library would wait forever, the fake waits this long, so a test sees the hang as a log line
 * instead of hanging itself. */
int fake_wait_or_deadlock(int (*fn)(void *), void *arg, const char *what);
/* Logs "<call> rank=R", then aborts (stops at once) or destroys (finishes queued work) and frees c. */
void fake_vendor_comm_end(fake_vendor_comm_t *c, const char *call, int abort);
/* The asynchronous error of c's work: the code FAKE_COLL_FAIL injects as "async" once a collective has failed
 * with it, or a send/recv count mismatch; 0 before, or when none. */
int fake_vendor_async_error(const fake_vendor_comm_t *c);
/* Collective `name` in the vendor's codes: logged, FAKE_COLL_FAIL's code for it if any, the vendor's
 * invalid_argument for an unknown dtype or op or a bad root, else enqueued and 0. */
int fake_vendor_collective(const fake_vendor_t *v, const char *name, int kind, const void *send, void *recv,
                           size_t count, int dtype, int op, int root, fake_vendor_comm_t *c, void *stream);

#endif
