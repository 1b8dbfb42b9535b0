/* The layout of one rank's shared-memory segment: everything the ranks of a host read from one another.
 *
 * Rank r's segment, in a job of n local ranks with rings of R bytes (a power of two) and slots of
 * S = min(R, 4 MiB) bytes:
 *
 *   offset s * (SHM_PAGE_BYTES + R), for every sender s (s == r unused):
 *       a ring control page (shm_ring_ctrl_t), then R bytes of ring data: the frames s sends to r
 *   offset n * (SHM_PAGE_BYTES + R): r's collective area
 *       a control page (shm_coll_ctrl_t), then slot 0 and slot 1, S bytes each
 *
 * The control page's addresses (source, probe_address) are in r's own address space: the others pass them to
 * process_vm_readv (shm_single_copy.c) and never dereference them; the kernel checks them, and one that points
 * nowhere r maps costs a reader a typed error.
 *
 * Every word here but the doorbell's is written by one rank only (the comments say which) and read by others, so
 * to a reader it is input: every index, length, flag and rank read from here is checked before use (shm_transport.c,
 * shm_collectives.c), and a value its writer could not have written is a peer failure naming that writer.
 * A writer never reads its own words back (it keeps them in private memory), so what others scribble there
 * cannot mislead it. The offsets are fixed by the asserts below; tests/transports/test_shm_faults.py pokes these fields
 * by the same offsets. */
#ifndef PYCOLL_TRANSPORT_SHM_LAYOUT_H
#define PYCOLL_TRANSPORT_SHM_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pycoll/p2p.h"
#include "transport/shm_doorbell.h"

#define SHM_PAGE_BYTES 4096LL /* a control page, so that what follows it starts page-aligned */

/* RING_CUT: s stopped talking to r for good (the survivors agreed r was gone: transport/ft_reset.h). */
enum shm_ring_closed { RING_OPEN = 0, RING_GOODBYE = 1, RING_ABORT = 2, RING_CUT = 3 };

/* The control page of the ring sender s -> receiver r (in r's segment). head and tail on cache lines of their
 * own (two lines apart, so the adjacent-line prefetcher does not pair them). */
typedef struct shm_ring_ctrl {
    alignas(128) _Atomic uint64_t head;   /* s: bytes written, ever */
    alignas(128) _Atomic uint64_t tail;   /* r: bytes consumed, ever; head - tail <= R */
    alignas(128) _Atomic uint32_t closed; /* s: enum shm_ring_closed, stored last (release) */
    int32_t status;                       /* s, ABORT: the pycoll_status_t */
    int32_t failed_rank;                  /* s, ABORT: the rank the error is about (-1: none) */
    pycoll_coll_desc_t desc, prev;        /* s: its collective (GOODBYE: its last) and the one before */
    char text[PYCOLL_ERROR_LEN];          /* s, ABORT: the reason */
    /* s, on a fault-tolerance reset: the epoch it started (stored last, release), the head where that epoch's
     * frames begin (everything before is the old epoch's), and whether it had aborted the old one. */
    alignas(8) _Atomic uint32_t epoch;
    uint32_t epoch_aborted;
    uint64_t epoch_head;
} shm_ring_ctrl_t;

/* One parity of rank r's collective area (written by r only). Round k uses parity k & 1. */
typedef struct shm_coll_flags {
    alignas(128) _Atomic uint64_t posted;  /* the last round whose slot and descriptors are published */
    pycoll_coll_desc_t desc, prev;         /* r's collective in that round, and the one before */
    uint64_t source;                       /* single-copy round: where r's buffer is, published with posted */
    /* Large all-reduce: the last round whose own range is reduced. Single-copy round: the last round whose
     * reads r has finished (the owners of what it read may return then). */
    alignas(128) _Atomic uint64_t reduced;
} shm_coll_flags_t;

/* Whether r may read the others' memory and they r's (shm_single_copy.c): written by r before it posts its
 * first round (probe) and its second (verdict). */
typedef struct shm_single_copy_ctrl {
    uint64_t probe_address; /* where r keeps a private copy of probe_token */
    uint64_t probe_token;
    uint32_t verdict;       /* 1: r read every peer's token and wants single copies */
} shm_single_copy_ctrl_t;

/* r's collective area's control page: its flags, and its doorbell (shm_doorbell.h), which every rank of the host
 * maps, whether or not the native collectives run: the one place here others write to (to wake r). */
typedef struct shm_coll_ctrl {
    shm_coll_flags_t parity[2];
    shm_single_copy_ctrl_t single_copy;
    shm_doorbell_t bell;
} shm_coll_ctrl_t;

_Static_assert(sizeof(shm_ring_ctrl_t) <= SHM_PAGE_BYTES, "ring control must fit its page");
_Static_assert(sizeof(shm_coll_ctrl_t) <= SHM_PAGE_BYTES, "collective flags must fit their page");
/* The offsets tests/transports/test_shm_faults.py uses. */
_Static_assert(offsetof(shm_ring_ctrl_t, head) == 0 && offsetof(shm_ring_ctrl_t, tail) == 128 &&
                   offsetof(shm_ring_ctrl_t, closed) == 256 && offsetof(shm_ring_ctrl_t, status) == 260 &&
                   offsetof(shm_ring_ctrl_t, failed_rank) == 264 && offsetof(shm_ring_ctrl_t, desc) == 272 &&
                   offsetof(shm_ring_ctrl_t, prev) == 312 && offsetof(shm_ring_ctrl_t, text) == 352,
               "ring control layout");
/* The offsets tests/scripts/elastic_worker.py uses. */
_Static_assert(offsetof(shm_ring_ctrl_t, epoch) == 864 && offsetof(shm_ring_ctrl_t, epoch_aborted) == 868 &&
                   offsetof(shm_ring_ctrl_t, epoch_head) == 872,
               "ring epoch layout");
_Static_assert(offsetof(shm_coll_flags_t, posted) == 0 && offsetof(shm_coll_flags_t, desc) == 8 &&
                   offsetof(shm_coll_flags_t, prev) == 48 && offsetof(shm_coll_flags_t, source) == 88 &&
                   offsetof(shm_coll_flags_t, reduced) == 128 && sizeof(shm_coll_flags_t) == 256 &&
                   offsetof(shm_coll_ctrl_t, single_copy) == 512 &&
                   offsetof(shm_single_copy_ctrl_t, probe_token) == 8 &&
                   offsetof(shm_single_copy_ctrl_t, verdict) == 16,
               "collective flags layout");

#endif
