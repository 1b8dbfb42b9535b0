/* The shared-memory transport's native collectives (p2p.h's pycoll_native_collectives_t, algorithm "shm_slots"):
 * all_reduce, reduce_scatter, all_gather, broadcast, barrier and all_to_all through one collective area per rank,
 * instead of pycoll's algorithms over the rings, which pay a frame, a copy into the ring and a copy out of it per
 * message and a message per step.
 *
 * Layout (shm_layout.h). Rank r's area follows the rings in its segment (shm_coll_area_bytes: whatever the
 * world size, 8 MiB + 4 KiB with the default rings): a control page with one flag block per parity, then two
 * slots. Only rank r writes its area's flags; others write nothing in it.
 *
 * Rounds. Every collective is one or more rounds, numbered alike on every rank by a per-transport counter
 * (round k uses parity k & 1 of every area). A round is:
 *   1. write into my slot what the others need (nothing for a barrier);
 *   2. publish: my descriptor (p2p->desc and the one before), then posted = k with release;
 *   3. wait until every rank posted k (acquire); a rank whose descriptor differs called another collective:
 *      MismatchError naming both sides, as over the rings;
 *   4. act on the slots, and for a large all-reduce, a second flag (reduced = k) and wait.
 * Slot reuse needs no "done reading" flag: I write slot[k & 1] again in round k + 2, after step 3 of round
 * k + 1 saw every rank post k + 1, which each did only after it finished reading round k. Two slots alternate,
 * so a fast rank runs one round ahead (its copy-in overlaps the others' copy-out).
 *
 * All-reduce, small (<= SMALL_BYTES): every rank copies its input into its slot, and after step 3 every rank
 * reduces all slots, in rank order, into its result -- one synchronisation, identical arithmetic everywhere.
 * Large: rounds of up to a slot, each a reduce-scatter in place in shared memory then a copy-out: the
 * round's elements are split into one range per rank (64-byte aligned); rank j copies in only the ranges the
 * others reduce, reduces its own range over every rank's (its own input read where it is) in rank order into
 * the free range of its own slot, publishes reduced = k, and copies the other ranges out of their owners'
 * slots. Every element is reduced once, by one rank, in rank order, then copied: bitwise identical results.
 * Per rank and byte that is about two copies and one reduction read, against the rings' four copies.
 *
 * Reduce-scatter: rounds in which every rank copies the next piece of every block but its own into its slot,
 * one piece per rank at cache-line boundaries, and once all have posted reduces the pieces of its own block
 * (its own input read where it is) in rank order straight into its result: one synchronisation per round, one
 * copy of (size - 1) / size of the input and one reduction read per byte.
 * All-gather: rounds in which every rank copies the next piece of its block into its slot, posts, copies its
 * own block into its result while the others arrive, and copies the others' pieces out of their slots.
 *
 * Single copies (shm_single_copy.c), for a large broadcast, all-to-all and 2-rank all-gather where every rank
 * agreed to them: one round in which each rank publishes the address of its buffer (flags' source) with its
 * post, reads what it needs straight from the owners' buffers (process_vm_readv: each byte copied once), then
 * sets its reduced flag to the round -- "done reading" -- and a rank whose buffer others read waits for every
 * rank's before it returns, since its caller may then reuse the buffer. What is read, and how much, comes from
 * this rank's own descriptor; only the address is the owner's word, and the kernel checks it.
 *
 * Copies into a slot go through shm_slot_copy.c, which picks plain or streaming stores per call by what this
 * rank measured faster (where a reader's pull from the writer's cache is slow, streaming stores are faster).
 *
 * Waiting goes through the transport's one loop (shm_wait_until): spin on the flags with plain loads, yield,
 * nap, bounded by p2p->deadline_ns; the rings are polled meanwhile, so an ABORT, a STATE probe from a rank in a
 * message collective, or a dead peer's pidfd ends the wait as it ends a message wait. A rank waited for that
 * has closed (its GOODBYE read from its ring) ends it too: it will never post.
 *
 * A flag is input from another process: a round number no rank could have written there (a posted flag
 * that is neither this round nor the one of this parity before, a reduced flag ahead of this round) is a
 * peer failure naming the flag's owner, never a read of a slot that holds no round. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/reduction.h"
#include "transport/frame.h"
#include "transport/shm_layout.h"
#include "transport/shm_single_copy.h"
#include "transport/shm_slot_copy.h"
#include "transport/shm_transport.h"

/* One slot: the largest round, as large as one ring up to this (a job that asks for small rings, as the tests
 * do, gets small slots too, and so reaches the many-round paths with small messages). Large enough that a
 * round's two synchronisations are small next to its copies even when ranks share cores (each synchronisation
 * then waits for every rank to be scheduled, so fewer, larger rounds measured faster; bench/results/shm.md),
 * small enough that a round's data is still in the shared cache when the others read it. */
#define MAX_SLOT_BYTES (4LL << 20)
/* Up to here (or one slot) an all-reduce is one round in which every rank reduces everything: reading N small
 * inputs costs less than the large path's second synchronisation, up to about here (where the two measured
 * alike; bench/results/shm.md). */
#define SMALL_BYTES (8LL << 10)
/* Ranges are cut at cache lines, so no two ranks write one line. */
#define RANGE_ALIGN_BYTES 64
/* Elements reduced at a time: the partial of a piece stays in the core's cache while every source is added. */
#define PIECE_ELEMS 4096
#define MAX_PARTIAL_BYTES 16 /* a compensated partial element: (sum, comp) of float64 */
/* From here on (the bytes one rank reads from one other) a broadcast and an all-to-all read straight from the
 * owner's buffer where the ranks agreed to (shm_single_copy.c). The kernel's copy is slower per byte than a
 * memcpy between buffers in cache (it pins each page and copies with its own routine), and a single-copy round
 * has a second synchronisation ("done reading"), so single copies pay only where they save a whole copy or
 * rounds: a broadcast's readers no longer wait for the root's copy into its slot, an all-to-all no longer cuts
 * its slot into one piece per rank. */
#define SINGLE_COPY_MIN_BYTES (1LL << 20)
/* An all-gather's copies through the slots stay in the shared cache until its blocks outgrow it; from here on, at
 * 2 ranks, the copy into the slot is half its path, and single copies measured faster. With more ranks the
 * copies out of the slots are most of the work, and single copies measured no faster even at 64 MiB
 * (bench/results/shm_native_peers.md). */
#define ALL_GATHER_SINGLE_COPY_MIN_BYTES (8LL << 20)

struct shm_collectives {
    shm_transport_t *t;
    int64_t slot_bytes;      /* a multiple of RANGE_ALIGN_BYTES */
    uint64_t round;          /* the last round started; the same on every rank */
    void **maps;             /* rank r's area */
    const void **sources;    /* per rank: scratch for the sources of a reduction, in rank order */
    const void **wires;      /* per rank: one piece of a coded all-reduce's sources */
    void *part, *tmp;        /* one piece's compensated partial and its loaded source (local memory) */
    shm_single_copy_t *single_copy;
    shm_slot_copy_t copy; /* how this call's copy-ins go */
};

static int64_t slot_bytes_for(int64_t ring_bytes)
{
    return ring_bytes < MAX_SLOT_BYTES ? ring_bytes : MAX_SLOT_BYTES;
}

int64_t shm_coll_area_bytes(int64_t ring_bytes) { return SHM_PAGE_BYTES + 2 * slot_bytes_for(ring_bytes); }

static shm_coll_flags_t *flags_of(const shm_collectives_t *c, int32_t r, uint64_t round)
{
    return &((shm_coll_ctrl_t *)c->maps[r])->parity[round & 1];
}

static unsigned char *slot_of(const shm_collectives_t *c, int32_t r, uint64_t round)
{
    return (unsigned char *)c->maps[r] + SHM_PAGE_BYTES + (int64_t)(round & 1) * c->slot_bytes;
}

static pycoll_p2p_t *p2p_of(const shm_collectives_t *c) { return (pycoll_p2p_t *)c->t; }

/* ---- publishing and waiting ---- */

/* Store one of this rank's round flags, then wake the peers asleep waiting for such a flag. */
static void publish_flag(shm_collectives_t *c, _Atomic uint64_t *flag, uint64_t round)
{
    atomic_store_explicit(flag, round, memory_order_release);
    shm_ring_peers(c->t);
}

static void publish_posted(shm_collectives_t *c, uint64_t round)
{
    const pycoll_p2p_t *p2p = p2p_of(c);
    shm_coll_flags_t *f = flags_of(c, p2p->rank, round);
    f->desc = p2p->desc;
    f->prev = p2p->prev_desc;
    if (round == SHM_SINGLE_COPY_VERDICT_ROUND)
        shm_single_copy_publish_verdict(c->single_copy, c->maps);
    publish_flag(c, &f->posted, round);
}

typedef struct round_wait {
    shm_collectives_t *c;
    uint64_t round;
    int reduced;  /* wait for the reduced flag, not posted */
    int32_t next; /* ranks below it have arrived */
} round_wait_t;

/* Whether `seen`, another rank's posted flag of round k's parity, is a value that rank could have written:
 * k once it has posted, else its round of this parity before, k - 2 (0, the flag's first value, before round
 * 3). Every rank posts every round in order, and none can post k + 2 before all have posted k + 1. */
static int posted_plausible(uint64_t seen, uint64_t round)
{
    return seen == round || seen == (round > 2 ? round - 2 : 0);
}

/* The same for a reduced flag, which only large all-reduce rounds set: any round of this parity up to k. */
static int reduced_plausible(uint64_t seen, uint64_t round)
{
    return seen <= round && (seen == 0 || ((seen ^ round) & 1) == 0);
}

/* Every other rank has reached the round (an error also ends the wait: p2p->status says so). This rank's own
 * flags are not read back: it published them itself. */
static int round_ready(void *arg)
{
    round_wait_t *w = arg;
    shm_transport_t *t = w->c->t;
    pycoll_p2p_t *p2p = p2p_of(w->c);
    for (; w->next < p2p->size; w->next++) {
        if (w->next == p2p->rank)
            continue;
        const shm_coll_flags_t *f = flags_of(w->c, w->next, w->round);
        const _Atomic uint64_t *flag = w->reduced ? &f->reduced : &f->posted;
        const uint64_t seen = atomic_load_explicit(flag, memory_order_acquire);
        if (seen != w->round) {
            if (!(w->reduced ? reduced_plausible(seen, w->round) : posted_plausible(seen, w->round))) {
                shm_peer_corrupt(t, w->next, "wrote a corrupt round number into shared memory");
                return 1;
            }
            if (shm_peer_open(t, w->next))
                return 0;
            /* Gone: it stored its flags before it closed, so a round it reached shows now. */
            if (atomic_load_explicit(flag, memory_order_acquire) != w->round) {
                shm_peer_needed(t, w->next);
                return 1;
            }
        }
        if (!w->reduced && !pycoll_same_desc(&f->desc, &p2p->desc)) {
            const pycoll_coll_desc_t theirs = f->desc, theirs_prev = f->prev;
            pycoll_p2p_mismatch(p2p, w->next, &theirs, &theirs_prev, " (shared-memory collective)");
            return 1;
        }
    }
    return 1;
}

static int32_t round_pending_peer(void *arg)
{
    const round_wait_t *w = arg;
    return w->next < p2p_of(w->c)->size ? w->next : -1;
}

static void round_probe(void *arg)
{
    const round_wait_t *w = arg;
    shm_tell_peers(w->c->t);
}

static pycoll_status_t wait_round(shm_collectives_t *c, uint64_t round, int reduced)
{
    round_wait_t w = {c, round, reduced, 0};
    if (round_ready(&w) && p2p_of(c)->status == PYCOLL_OK)
        return PYCOLL_OK; /* the common case once ranks run in step: no wait set-up at all */
    shm_wait_cond_t cond = {round_ready, round_pending_peer, round_probe, &w};
    return shm_wait_until(c->t, &cond);
}

/* Steps 1-3 of a round: the caller has written its slot. */
static pycoll_status_t post_and_wait(shm_collectives_t *c, uint64_t round)
{
    publish_posted(c, round);
    return wait_round(c, round, 0);
}

/* ---- single copies (shm_single_copy.c) ---- */

/* Whether a collective starting now may read straight from the owners' buffers: alike on every rank, which all
 * start it at the same round and read the same verdicts. */
static int single_copies_agreed(shm_collectives_t *c)
{
    return c->round >= SHM_SINGLE_COPY_VERDICT_ROUND && shm_single_copy_agreed(c->single_copy, c->maps);
}

/* A single-copy round's steps 1-3: publish where my buffer is (NULL: the others read nothing of mine), post
 * and wait until every rank posted. */
static pycoll_status_t post_source_and_wait(shm_collectives_t *c, uint64_t round, const void *source)
{
    flags_of(c, p2p_of(c)->rank, round)->source = (uint64_t)(uintptr_t)source;
    return post_and_wait(c, round);
}

/* len bytes from `offset` on in rank r's buffer of the round, into dst. */
static pycoll_status_t read_source(shm_collectives_t *c, uint64_t round, int32_t r, void *dst, int64_t offset,
                                   int64_t len)
{
    const uint64_t source = flags_of(c, r, round)->source;
    return shm_single_copy_read(c->t, c->single_copy, r, dst, source + (uint64_t)offset, len);
}

/* A single-copy round's end: my reads are done (the round's second flag); a rank whose buffer others read
 * returns only once every rank's are, since the caller may reuse that buffer at once. */
static pycoll_status_t finish_reads(shm_collectives_t *c, uint64_t round, int others_read_mine)
{
    publish_flag(c, &flags_of(c, p2p_of(c)->rank, round)->reduced, round);
    return others_read_mine ? wait_round(c, round, 1) : PYCOLL_OK;
}

/* ---- reduction ---- */

/* out[0..count) = src[0] op src[1] op ... op src[n-1], in rank order, a piece at a time. */
static pycoll_status_t reduce_sources(shm_collectives_t *c, const reduction_t *red, unsigned char *out,
                                      int32_t n, int64_t count)
{
    for (int64_t at = 0; at < count; at += PIECE_ELEMS) {
        const int64_t len = count - at < PIECE_ELEMS ? count - at : PIECE_ELEMS;
        const size_t off = (size_t)at * red->dsize;
        void *part = red->compensated ? c->part : out + off;
        pycoll_status_t st = reduction_add_plains(red, part, (const char *)c->sources[0] + off,
                                                  (const char *)c->sources[1] + off, c->tmp, len);
        for (int32_t r = 2; r < n && st == PYCOLL_OK; r++)
            st = reduction_combine_plain(red, part, (const char *)c->sources[r] + off, c->tmp, len);
        if (st == PYCOLL_OK)
            st = reduction_store(red, out + off, part, len);
        if (st != PYCOLL_OK)
            return st;
    }
    return PYCOLL_OK;
}

/* ---- all-reduce ---- */

/* root: the rank that gets the result (a reduce), or -1: every rank (an all-reduce). */
static int gets_result(const pycoll_p2p_t *p2p, int32_t root) { return root < 0 || root == p2p->rank; }

static pycoll_status_t all_reduce_small(shm_collectives_t *c, const reduction_t *red, const void *sendbuf,
                                        void *recvbuf, int64_t count, int32_t root)
{
    const pycoll_p2p_t *p2p = p2p_of(c);
    const uint64_t round = ++c->round;
    if (count > 0) /* an empty array's pointer may be NULL */
        slot_copy(&c->copy, slot_of(c, p2p->rank, round), sendbuf, (size_t)count * red->dsize);
    pycoll_status_t st = post_and_wait(c, round);
    if (st != PYCOLL_OK || count == 0 || !gets_result(p2p, root))
        return st;
    for (int32_t r = 0; r < p2p->size; r++)
        c->sources[r] = slot_of(c, r, round);
    return reduce_sources(c, red, recvbuf, p2p->size, count);
}

/* Rank j's range of a round of `count` elements: [*lo, *hi). */
static void range_of(int32_t j, int32_t size, int64_t count, size_t dsize, int64_t *lo, int64_t *hi)
{
    const int64_t align = RANGE_ALIGN_BYTES / (int64_t)dsize;
    int64_t per = (count + size - 1) / size;
    per = (per + align - 1) / align * align;
    *lo = (int64_t)j * per < count ? (int64_t)j * per : count;
    *hi = *lo + per < count ? *lo + per : count;
}

static void encode_into(const pycoll_exact_codec_t *codec, const void *elems, int64_t n, void *wire)
{
    if (codec->encode)
        codec->encode(codec->ctx, elems, n, wire);
    else
        memcpy(wire, elems, (size_t)(n * codec->elem_bytes));
}

/* A round of the large all-reduce as this rank takes part in it: its number, this rank's slot, and this rank's
 * range [lo, hi) of the round's elements. */
typedef struct {
    uint64_t round;
    unsigned char *mine;
    int64_t lo, hi;
} round_view_t;

/* The start of the next round: this rank's elements of every other rank's range into its own slot (as wire
 * elements where a codec is given), then every rank's slot posted. Ranges are cut in slot bytes (slot_es per
 * element) and start at the same element of send (send_es per element). */
static pycoll_status_t start_round(shm_collectives_t *c, const pycoll_exact_codec_t *codec, const unsigned char *send,
                                   int64_t count, size_t slot_es, size_t send_es, round_view_t *v)
{
    const int32_t me = p2p_of(c)->rank, size = p2p_of(c)->size;
    v->round = ++c->round;
    v->mine = slot_of(c, me, v->round);
    int64_t lo, hi;
    for (int32_t j = 0; j < size; j++) {
        range_of(j, size, count, slot_es, &lo, &hi);
        if (j == me || hi <= lo)
            continue;
        if (codec)
            encode_into(codec, send + lo * send_es, hi - lo, v->mine + lo * slot_es);
        else
            slot_copy(&c->copy, v->mine + lo * slot_es, send + lo * send_es, (size_t)(hi - lo) * send_es);
    }
    range_of(me, size, count, slot_es, &v->lo, &v->hi);
    return post_and_wait(c, v->round);
}

/* The end of a round for a rank that gets the result: once every rank has reduced its range, each other rank's
 * range copied out of its slot into recv. A range is cut in slot bytes (slot_es per element) and lands at the
 * same element in recv (recv_es per element). */
static pycoll_status_t copy_out_reduced(shm_collectives_t *c, uint64_t round, unsigned char *recv, int64_t count,
                                        size_t slot_es, size_t recv_es)
{
    const int32_t me = p2p_of(c)->rank, size = p2p_of(c)->size;
    pycoll_status_t st = wait_round(c, round, 1);
    if (st != PYCOLL_OK)
        return st;
    int64_t lo, hi;
    for (int32_t j = 0; j < size; j++) {
        range_of(j, size, count, slot_es, &lo, &hi);
        if (j != me && hi > lo)
            memcpy(recv + lo * recv_es, slot_of(c, j, round) + lo * slot_es, (size_t)(hi - lo) * recv_es);
    }
    return PYCOLL_OK;
}

/* A reduce (root >= 0) reduces the ranges as an all-reduce does, and only the root copies them out: the others
 * neither wait for the reduced flags nor read a slot after their own range. */
static pycoll_status_t all_reduce_round(shm_collectives_t *c, const reduction_t *red, const unsigned char *send,
                                        unsigned char *recv, int64_t count, int32_t root)
{
    const pycoll_p2p_t *p2p = p2p_of(c);
    const int32_t me = p2p->rank, size = p2p->size;
    const size_t ds = red->dsize;
    round_view_t v;
    pycoll_status_t st = start_round(c, NULL, send, count, ds, ds, &v);
    if (st != PYCOLL_OK)
        return st;
    for (int32_t r = 0; r < size; r++)
        c->sources[r] = (r == me ? send : slot_of(c, r, v.round)) + v.lo * ds;
    if (v.hi > v.lo && root == me && recv != send) { /* no one else reads it, and it is not a source */
        st = reduce_sources(c, red, recv + v.lo * ds, size, v.hi - v.lo);
    } else if (v.hi > v.lo && root < 0 && recv != send) {
        /* Into my result, then into my slot's range (which no copy-in wrote) for the others, as a copy-in goes. */
        st = reduce_sources(c, red, recv + v.lo * ds, size, v.hi - v.lo);
        if (st == PYCOLL_OK)
            slot_copy(&c->copy, v.mine + v.lo * ds, recv + v.lo * ds, (size_t)(v.hi - v.lo) * ds);
    } else if (v.hi > v.lo) {
        /* Into my slot's range, which no copy-in wrote: the others copy it out from there. */
        st = reduce_sources(c, red, v.mine + v.lo * ds, size, v.hi - v.lo);
        if (st == PYCOLL_OK && gets_result(p2p, root))
            memcpy(recv + v.lo * ds, v.mine + v.lo * ds, (size_t)(v.hi - v.lo) * ds);
    }
    if (st != PYCOLL_OK)
        return st;
    publish_flag(c, &flags_of(c, me, v.round)->reduced, v.round);
    return gets_result(p2p, root) ? copy_out_reduced(c, v.round, recv, count, ds, ds) : PYCOLL_OK;
}

/* The result on every rank (root -1) or on root only, in the rounds of the small or the large path. */
static pycoll_status_t reduce_to(shm_collectives_t *c, const reduction_t *red, const void *sendbuf, void *recvbuf,
                                 int64_t count, int32_t root)
{
    slot_copy_begin(&c->copy, count * (int64_t)red->dsize);
    if (count * (int64_t)red->dsize <= (SMALL_BYTES < c->slot_bytes ? SMALL_BYTES : c->slot_bytes))
        return all_reduce_small(c, red, sendbuf, recvbuf, count, root);
    const int64_t per_round = c->slot_bytes / (int64_t)red->dsize;
    for (int64_t at = 0; at < count; at += per_round) {
        const size_t off = (size_t)at * red->dsize;
        pycoll_status_t st = all_reduce_round(c, red, (const unsigned char *)sendbuf + off,
                                              recvbuf ? (unsigned char *)recvbuf + off : NULL,
                                              count - at < per_round ? count - at : per_round, root);
        if (st != PYCOLL_OK)
            return st;
    }
    slot_copy_end(&c->copy);
    return PYCOLL_OK;
}

static pycoll_status_t shm_all_reduce(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    reduction_t red;
    reduction_init(&red, p2p, dtype, op, accuracy);
    if (p2p->size == 1)
        return memory_copy(p2p, recvbuf, sendbuf, count * (int64_t)red.dsize, "all_reduce");
    return reduce_to(c, &red, sendbuf, recvbuf, count, -1);
}

static pycoll_status_t shm_reduce(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                  pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    reduction_t red;
    reduction_init(&red, p2p, dtype, op, accuracy);
    if (p2p->size == 1)
        return memory_copy(p2p, recvbuf, sendbuf, count * (int64_t)red.dsize, "reduce");
    return reduce_to(c, &red, sendbuf, recvbuf, count, root);
}

/* ---- all-reduce of coded elements (p2p.h's pycoll_exact_codec_t) ----
 *
 * The large all-reduce's rounds with the codec's wire elements in the slots: the copy-in encodes, the owner of a
 * range hands the codec every rank's piece of it (its own encoded into local scratch as it goes) and the codec's
 * exact sum lands in its slot, and the copy-out moves result elements. So the encoded data crosses memory once
 * and the caller's elements are read once and written once, as in a plain all-reduce. */

/* Elements of one coded piece: its wire elements, and the codec's scratch, fit the scratch a compensated piece
 * would. */
static int64_t coded_piece_elems(const pycoll_exact_codec_t *codec)
{
    return PIECE_ELEMS * MAX_PARTIAL_BYTES / (codec->wire_bytes > 8 ? codec->wire_bytes : 8);
}

/* out[0..count) = the codec's sum of the wire pieces in c->sources; a NULL source is this rank's, encoded from
 * own[0..count) a piece at a time (or read where it is, for a codec without encode). */
static void sum_coded(shm_collectives_t *c, const pycoll_exact_codec_t *codec, const unsigned char *own,
                      unsigned char *out, int64_t count)
{
    const int32_t n = p2p_of(c)->size;
    const int64_t piece = coded_piece_elems(codec), wb = codec->wire_bytes, eb = codec->elem_bytes;
    for (int64_t at = 0; at < count; at += piece) {
        const int64_t len = count - at < piece ? count - at : piece;
        const void *mine = own + at * eb;
        if (own && codec->encode) {
            codec->encode(codec->ctx, mine, len, c->tmp);
            mine = c->tmp;
        }
        for (int32_t r = 0; r < n; r++)
            c->wires[r] = c->sources[r] ? (const unsigned char *)c->sources[r] + at * wb : mine;
        codec->sum(codec->ctx, c->wires, n, len, out + at * eb, c->part);
    }
}

static pycoll_status_t all_reduce_coded_small(shm_collectives_t *c, const pycoll_exact_codec_t *codec,
                                              const void *sendbuf, void *recvbuf, int64_t count)
{
    const pycoll_p2p_t *p2p = p2p_of(c);
    const uint64_t round = ++c->round;
    if (count > 0)
        encode_into(codec, sendbuf, count, slot_of(c, p2p->rank, round));
    pycoll_status_t st = post_and_wait(c, round);
    if (st != PYCOLL_OK || count == 0)
        return st;
    for (int32_t r = 0; r < p2p->size; r++)
        c->sources[r] = slot_of(c, r, round);
    sum_coded(c, codec, NULL, recvbuf, count);
    return PYCOLL_OK;
}

/* all_reduce_round with wire elements in the slots: ranges are cut in wire bytes, a range's result is the
 * caller's elements at the start of its owner's range. */
static pycoll_status_t all_reduce_coded_round(shm_collectives_t *c, const pycoll_exact_codec_t *codec,
                                              const unsigned char *send, unsigned char *recv, int64_t count)
{
    const pycoll_p2p_t *p2p = p2p_of(c);
    const int32_t me = p2p->rank, size = p2p->size;
    const size_t wb = (size_t)codec->wire_bytes, eb = (size_t)codec->elem_bytes;
    round_view_t v;
    pycoll_status_t st = start_round(c, codec, send, count, wb, eb, &v);
    if (st != PYCOLL_OK)
        return st;
    for (int32_t r = 0; r < size; r++)
        c->sources[r] = r == me ? NULL : slot_of(c, r, v.round) + v.lo * wb;
    if (v.hi > v.lo) {
        sum_coded(c, codec, send + v.lo * eb, v.mine + v.lo * wb, v.hi - v.lo);
        memcpy(recv + v.lo * eb, v.mine + v.lo * wb, (size_t)(v.hi - v.lo) * eb);
    }
    publish_flag(c, &flags_of(c, me, v.round)->reduced, v.round);
    return copy_out_reduced(c, v.round, recv, count, wb, eb);
}

static pycoll_status_t shm_all_reduce_coded(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                            const pycoll_exact_codec_t *codec)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    const int64_t wb = codec->wire_bytes, eb = codec->elem_bytes;
    /* A range's result is written over its wire elements, so they may not be narrower. */
    if (eb < 1 || wb < eb || wb > MAX_PARTIAL_BYTES || c->slot_bytes < wb)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_UNSUPPORTED, -1, "shared-memory coded all_reduce: %lld-byte wire "
                               "elements for %lld-byte elements in a %lld-byte slot", (long long)wb, (long long)eb,
                               (long long)c->slot_bytes);
    if (p2p->size == 1) { /* the same rounding as any world size: through the codec */
        c->sources[0] = NULL;
        sum_coded(c, codec, sendbuf, recvbuf, count);
        return PYCOLL_OK;
    }
    if (count * wb <= (SMALL_BYTES < c->slot_bytes ? SMALL_BYTES : c->slot_bytes))
        return all_reduce_coded_small(c, codec, sendbuf, recvbuf, count);
    const int64_t per_round = c->slot_bytes / wb;
    for (int64_t at = 0; at < count; at += per_round) {
        pycoll_status_t st = all_reduce_coded_round(c, codec, (const unsigned char *)sendbuf + at * eb,
                                                    (unsigned char *)recvbuf + at * eb,
                                                    count - at < per_round ? count - at : per_round);
        if (st != PYCOLL_OK)
            return st;
    }
    return PYCOLL_OK;
}

/* ---- reduce-scatter and all-gather ---- */

/* The bytes of each block a reduce-scatter round moves: a slot holds one piece per rank, each starting on a
 * cache line where the slot allows it (aligned loads in the reduction), a whole number of elements. 0: a slot
 * too small for one element per rank. */
static int64_t block_piece_bytes(const shm_collectives_t *c, int32_t size, size_t dsize)
{
    const int64_t per_rank = c->slot_bytes / size;
    const int64_t unit = per_rank >= RANGE_ALIGN_BYTES ? RANGE_ALIGN_BYTES : (int64_t)dsize;
    return per_rank / unit * unit;
}

static pycoll_status_t shm_reduce_scatter(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                          pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    const int32_t size = p2p->size, me = p2p->rank;
    reduction_t red;
    reduction_init(&red, p2p, dtype, op, accuracy);
    const size_t ds = red.dsize;
    if (size == 1)
        return memory_copy(p2p, recvbuf, sendbuf, count * (int64_t)ds, "reduce_scatter");
    const int64_t stride = block_piece_bytes(c, size, ds), piece = stride / (int64_t)ds;
    if (piece < 1)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_UNSUPPORTED, -1, "shared-memory reduce_scatter: a %lld-byte slot "
                               "for %d ranks", (long long)c->slot_bytes, (int)size);
    const unsigned char *send = sendbuf;
    unsigned char *recv = recvbuf;
    slot_copy_begin(&c->copy, count * size * (int64_t)ds);
    int64_t at = 0;
    do { /* at least one round, so that an empty reduce-scatter is still checked against the others */
        const int64_t len = count - at < piece ? count - at : piece;
        const uint64_t round = ++c->round;
        unsigned char *mine = slot_of(c, me, round);
        for (int32_t j = 0; j < size && len > 0; j++)
            if (j != me)
                slot_copy(&c->copy, mine + j * stride, send + ((int64_t)j * count + at) * (int64_t)ds,
                          (size_t)len * ds);
        pycoll_status_t st = post_and_wait(c, round);
        if (st != PYCOLL_OK)
            return st;
        if (len > 0) {
            for (int32_t r = 0; r < size; r++)
                c->sources[r] = r == me ? send + ((int64_t)me * count + at) * (int64_t)ds
                                        : slot_of(c, r, round) + me * stride;
            st = reduce_sources(c, &red, recv + at * (int64_t)ds, size, len);
            if (st != PYCOLL_OK)
                return st;
        }
        at += len;
    } while (at < count);
    slot_copy_end(&c->copy);
    return PYCOLL_OK;
}

/* One round: every rank publishes its send buffer, copies its own block while the others arrive, reads every
 * other block straight from its owner (each rank starting at the next owner, so that they spread over the
 * owners), and returns once all have read its own. */
static pycoll_status_t all_gather_single_copy(shm_collectives_t *c, const unsigned char *send, unsigned char *recv,
                                              int64_t block, int own_in_place)
{
    const int32_t size = p2p_of(c)->size, me = p2p_of(c)->rank;
    const uint64_t round = ++c->round;
    flags_of(c, me, round)->source = (uint64_t)(uintptr_t)send;
    publish_posted(c, round);
    if (!own_in_place)
        memcpy(recv + me * block, send, (size_t)block);
    pycoll_status_t st = wait_round(c, round, 0);
    for (int32_t i = 1; i < size && st == PYCOLL_OK; i++) {
        const int32_t r = (me + i) % size;
        st = read_source(c, round, r, recv + r * block, 0, block);
    }
    return st == PYCOLL_OK ? finish_reads(c, round, 1) : st;
}

static pycoll_status_t shm_all_gather(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    const int32_t size = p2p->size, me = p2p->rank;
    const int64_t block = count * (int64_t)pycoll_dtype_size(dtype);
    const unsigned char *send = sendbuf;
    unsigned char *recv = recvbuf, *own = recv + me * block;
    const int own_in_place = own == send; /* else they do not overlap (p2p.h) */
    if (size == 1)
        return own_in_place ? PYCOLL_OK : memory_copy(p2p, own, send, block, "all_gather");
    if (size == 2 && block >= ALL_GATHER_SINGLE_COPY_MIN_BYTES && single_copies_agreed(c))
        return all_gather_single_copy(c, send, recv, block, own_in_place);
    slot_copy_begin(&c->copy, block * size);
    int64_t at = 0;
    do { /* at least one round, so that an empty all-gather is still checked against the others */
        const int64_t len = block - at < c->slot_bytes ? block - at : c->slot_bytes;
        const uint64_t round = ++c->round;
        if (len > 0)
            slot_copy(&c->copy, slot_of(c, me, round), send + at, (size_t)len);
        publish_posted(c, round);
        if (len > 0 && !own_in_place) /* while the others arrive */
            memcpy(own + at, send + at, (size_t)len);
        pycoll_status_t st = wait_round(c, round, 0);
        if (st != PYCOLL_OK)
            return st;
        for (int32_t r = 0; r < size && len > 0; r++)
            if (r != me)
                memcpy(recv + r * block + at, slot_of(c, r, round), (size_t)len);
        at += len;
    } while (at < block);
    slot_copy_end(&c->copy);
    return PYCOLL_OK;
}

/* ---- broadcast and barrier ---- */

static pycoll_status_t shm_broadcast(pycoll_p2p_t *p2p, void *buf, int64_t count, pycoll_dtype_t dtype,
                                     int32_t root)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    const int64_t nbytes = count * (int64_t)pycoll_dtype_size(dtype);
    if (nbytes >= SINGLE_COPY_MIN_BYTES && single_copies_agreed(c)) {
        /* One round: the others read the root's buffer; the root returns once they all have. */
        const uint64_t round = ++c->round;
        pycoll_status_t st = post_source_and_wait(c, round, p2p->rank == root ? buf : NULL);
        if (st == PYCOLL_OK && p2p->rank != root)
            st = read_source(c, round, root, buf, 0, nbytes);
        return st == PYCOLL_OK ? finish_reads(c, round, p2p->rank == root) : st;
    }
    slot_copy_begin(&c->copy, nbytes);
    int64_t at = 0;
    do { /* at least one round, so that an empty broadcast is still checked against the others */
        const int64_t len = nbytes - at < c->slot_bytes ? nbytes - at : c->slot_bytes;
        const uint64_t round = ++c->round;
        if (p2p->rank == root && len > 0)
            slot_copy(&c->copy, slot_of(c, root, round), (char *)buf + at, (size_t)len);
        pycoll_status_t st = post_and_wait(c, round);
        if (st != PYCOLL_OK)
            return st;
        if (p2p->rank != root && len > 0)
            memcpy((char *)buf + at, slot_of(c, root, round), (size_t)len);
        at += len;
    } while (at < nbytes);
    slot_copy_end(&c->copy);
    return PYCOLL_OK;
}

static pycoll_status_t shm_barrier(pycoll_p2p_t *p2p)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    return post_and_wait(c, ++c->round);
}

/* ---- all-to-all ---- */

/* Rounds in which every rank puts the next piece of each of its blocks in its slot (the piece for rank j at
 * j * piece), posts, and once all have posted copies the piece meant for it out of every slot: two copies per
 * byte, as through the rings, but one synchronisation per round for all pairs instead of a message per pair. */
static pycoll_status_t shm_all_to_all(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype)
{
    shm_collectives_t *c = shm_collectives_of((shm_transport_t *)p2p);
    const int32_t size = p2p->size, me = p2p->rank;
    const int64_t block = count * (int64_t)pycoll_dtype_size(dtype), per_rank = c->slot_bytes / size;
    const unsigned char *send = sendbuf;
    unsigned char *recv = recvbuf;
    if (per_rank < 1)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_UNSUPPORTED, -1, "shared-memory all_to_all: a %lld-byte slot "
                               "for %d ranks", (long long)c->slot_bytes, (int)size);
    if (block >= SINGLE_COPY_MIN_BYTES && single_copies_agreed(c)) {
        /* One round: every rank reads the block meant for it straight from every other's send buffer. */
        const uint64_t round = ++c->round;
        pycoll_status_t st = post_source_and_wait(c, round, send);
        if (st == PYCOLL_OK)
            memcpy(recv + me * block, send + me * block, (size_t)block);
        for (int32_t i = 1; i < size && st == PYCOLL_OK; i++) {
            const int32_t r = (me + i) % size;
            st = read_source(c, round, r, recv + r * block, me * block, block);
        }
        return st == PYCOLL_OK ? finish_reads(c, round, 1) : st;
    }
    slot_copy_begin(&c->copy, block * size);
    int64_t at = 0;
    do { /* at least one round, so that an empty all-to-all is still checked against the others */
        const int64_t len = block - at < per_rank ? block - at : per_rank;
        const uint64_t round = ++c->round;
        unsigned char *mine = slot_of(c, me, round);
        for (int32_t j = 0; j < size && len > 0; j++)
            if (j != me)
                slot_copy(&c->copy, mine + j * len, send + j * block + at, (size_t)len);
        pycoll_status_t st = post_and_wait(c, round);
        if (st != PYCOLL_OK)
            return st;
        for (int32_t r = 0; r < size && len > 0; r++)
            memcpy(recv + r * block + at, r == me ? send + me * block + at : slot_of(c, r, round) + me * len,
                   (size_t)len);
        at += len;
    } while (at < block);
    slot_copy_end(&c->copy);
    return PYCOLL_OK;
}

const pycoll_native_collectives_t shm_native_collectives = {
    .version = PYCOLL_NATIVE_COLLECTIVES_VERSION,
    .algorithm = PYCOLL_ALGO_SHM_SLOTS,
    .all_reduce = shm_all_reduce,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier,
    .all_to_all = shm_all_to_all,
    .reduce_scatter = shm_reduce_scatter,
    .all_gather = shm_all_gather,
    .all_reduce_coded = shm_all_reduce_coded,
    .reduce = shm_reduce,
};

/* ---- set-up ---- */

void shm_collectives_detach(shm_collectives_t *c, int32_t size)
{
    if (!c)
        return;
    for (int32_t r = 0; r < size && c->maps; r++)
        if (c->maps[r])
            munmap(c->maps[r], (size_t)shm_coll_area_bytes(c->slot_bytes));
    free(c->maps);
    free(c->sources);
    free(c->wires);
    free(c->part);
    free(c->tmp);
    shm_single_copy_destroy(c->single_copy);
    free(c);
}

shm_collectives_t *shm_collectives_attach(shm_transport_t *t, int32_t size, const int *segment_fds,
                                          const int32_t *pids, int64_t offset, int64_t ring_bytes, char *error,
                                          size_t error_len)
{
    shm_collectives_t *c = calloc(1, sizeof *c);
    if (c) {
        c->t = t;
        c->slot_bytes = slot_bytes_for(ring_bytes);
        slot_copy_init(&c->copy);
        c->maps = calloc((size_t)size, sizeof *c->maps);
        c->sources = calloc((size_t)size, sizeof *c->sources);
        c->wires = calloc((size_t)size, sizeof *c->wires);
        c->part = malloc(PIECE_ELEMS * MAX_PARTIAL_BYTES);
        c->tmp = malloc(PIECE_ELEMS * MAX_PARTIAL_BYTES);
    }
    if (!c || !c->maps || !c->sources || !c->wires || !c->part || !c->tmp) {
        snprintf(error, error_len, "cannot set up the shared-memory collectives: out of memory");
        shm_collectives_detach(c, 0);
        return NULL;
    }
    for (int32_t r = 0; r < size; r++) {
        void *p = mmap(NULL, (size_t)shm_coll_area_bytes(ring_bytes), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                       segment_fds[r], (off_t)offset);
        if (p == MAP_FAILED) {
            snprintf(error, error_len, "cannot map rank %d's shared-memory collective area: %s", (int)r,
                     strerror(errno));
            shm_collectives_detach(c, size);
            return NULL;
        }
        c->maps[r] = p;
    }
    /* Its probe is published before this rank's first post, as shm_single_copy.c needs. */
    const int32_t me = p2p_of(c)->rank;
    c->single_copy = shm_single_copy_create(me, size, pids, (shm_coll_ctrl_t *)c->maps[me]);
    if (!c->single_copy) {
        snprintf(error, error_len, "cannot set up the shared-memory collectives: out of memory");
        shm_collectives_detach(c, size);
        return NULL;
    }
    return c;
}
