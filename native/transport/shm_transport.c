/* Shared-memory transport: pycoll_p2p_t between the ranks of one host over POSIX shared memory.
 *
 * Each rank owns one segment holding its incoming rings, one per sender: a single-producer/single-consumer
 * byte ring (a power of two bytes) whose head (bytes written, by the sender) and tail (bytes consumed, by the
 * receiver) are C11 atomics on cache lines of their own (shm_layout.h has the segment's layout). A message is
 * the same frame as over TCP (transport/frame.h: the collective's descriptor, the previous one, tag, length)
 * followed by its payload, streamed through the ring in whatever pieces the free space allows -- so a message
 * larger than the ring works, and mismatches, history fingerprints, STATE probes and the checked close behave
 * exactly as over TCP.
 *
 * Out of band, in each ring's control page, the sender can mark the ring closed: GOODBYE (with its last
 * descriptor) or ABORT (status, failed rank, text). Out of band because an ABORT must get through even when the
 * ring is full of data the receiver will never read; GOODBYE is read only once the ring is drained, so it
 * still follows every message sent before it, as over TCP.
 *
 * What a peer wrote is input, not trusted state: an index outside what its writer could have written (a head
 * beyond the free space, a tail behind the last one or past the head), a frame of no known kind, a closed flag
 * or rank out of range is PYCOLL_ERR_PEER_FAILURE naming that peer -- never a copy out of bounds.
 *
 * Waits spin on the rings' head words (plain loads: no system call while data flows), yield the core after a
 * while, and once p2p->spin_ns has passed sleep on this rank's doorbell (shm_doorbell.h), which a peer rings
 * after each index or flag it publishes, always bounded by p2p->deadline_ns. A process
 * that dies leaves its rings silent, so while blocked every LIVENESS_EVERY_NS the peers' pidfds are polled: a
 * dead peer is PYCOLL_ERR_PEER_FAILURE naming it, on every rank, within that interval. A peer that closed
 * (GOODBYE) is an error as soon as this rank needs it: a message from it, or its flags in a native collective
 * (shm_peer_open).
 *
 * Segments arrive as file descriptors opened (and already unlinked) by the bootstrap
 * (native/bootstrap/init_rank.c), which also computes their size with pycoll_shm_segment_bytes. Each segment ends
 * with its rank's collective area, where shm_collectives.c runs this transport's native collectives (ops->
 * native); they wait through shm_wait_until, the same loop as a message wait. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "transport/idle_wait.h"
#include "common/wait_tally.h"
#include "transport/frame.h"
#include "transport/ft_reset.h"
#include "transport/request_queue.h"
#include "transport/shm_layout.h"
#include "transport/shm_transport.h"

#define DEFAULT_RING_BYTES (4LL << 20)
#define MIN_RING_BYTES 4096LL
#define HEADER_BYTES ((int64_t)sizeof(pycoll_frame_header_t))
/* How often a blocked wait checks that its peers still live: one poll over their pidfds, so a peer that exits
 * without closing (os._exit, a crash, a kill) is an error as soon as a closed socket would be over TCP. */
#define LIVENESS_EVERY_NS 10000000LL
/* How often a blocked wait runs the caller's interrupt check (Python's signal handlers: it takes the GIL). */
#define INTERRUPT_EVERY_NS 100000000LL
/* The longest sleep of a wait that no peer rings (shm_doorbell.h): what a wake-up this transport does not ring
 * for would cost at most. */
#define SLEEP_MAX_NS 1000000LL

/* One ring as one side sees it. The index this side owns lives here and is only published to the shared copy,
 * never read back; the other side's index is read from shared memory and checked against the last value seen
 * (shm_layout.h). */
typedef struct ring {
    shm_ring_ctrl_t *ctrl;
    unsigned char *data;
    uint64_t mask;   /* ring bytes - 1 */
    uint64_t mine;   /* producer: head; consumer: tail */
    uint64_t theirs; /* the other side's index as last checked */
    shm_doorbell_t *bell; /* the other side's: rung after each index this side publishes */
} ring_t;

typedef struct shm_peer {
    pycoll_peer_queues_t q; /* first: the shared helpers of transport/request_queue.h see it */
    ring_t in, out;     /* in: peer -> this rank (this rank's segment); out: this rank -> peer (its segment) */
    void *in_map, *out_map;
    void *bell_map;     /* the peer's collective control page, for its doorbell */
    int pidfd;          /* -1: liveness unknown (another pid namespace, or pidfd_open unavailable) */
    peer_state_t state;
    pycoll_frame_header_t send_hdr;
    int64_t send_hdr_done;
    pycoll_frame_header_t recv_hdr;
    int hdr_parked;     /* recv_hdr is a data header waiting for (or being copied into) its receive */
    /* Fault tolerance (shm_ft_reset, at the end of this file). */
    uint32_t resync;     /* waiting for this peer to start this epoch (0: none) */
    uint32_t epoch_seen; /* the peer's epoch this rank reads */
    int resumable;       /* gone only because it aborted or moved on to another epoch */
} shm_peer_t;

struct shm_transport {
    pycoll_p2p_t base; /* first: shm_collectives.c reaches the p2p through a cast */
    shm_peer_t *peers;
    shm_collectives_t *coll; /* the native collectives' areas (shm_collectives.c) */
    int64_t ring_bytes;
    uint64_t checked_slot;
    int finalizing;
    int32_t waiting_for;
    int said_goodbye;
    int aborted;
    int rings_closed; /* close_rings ran (its flag in shared memory is only written, never trusted back) */
    /* This transport's ops: shm_ops, without the native collectives when some peers are absent (they run
     * over every rank of the job, and a job spread over hosts reaches the absent ones another way). */
    pycoll_p2p_ops_t ops;
    struct pollfd *pidfds;    /* check_liveness: per rank, its pidfd while it is open, else -1 */
    int64_t next_liveness_ns; /* wait_pass: when it next checks that peers live */
    int64_t probed_wait;      /* wait_pass: the start of the last wait whose peers were probed */
    atomic_int wake;          /* shm_ft_wake: run the interrupt check now */
    shm_doorbell_t *bell;     /* this rank's, in its own collective control page (bell_map) */
    void *bell_map;
};

static shm_transport_t *impl(pycoll_p2p_t *p2p) { return (shm_transport_t *)p2p; }

shm_collectives_t *shm_collectives_of(shm_transport_t *t) { return t->coll; }

static pycoll_status_t peer_lost(shm_transport_t *t, int r, const char *why);

int shm_peer_open(const shm_transport_t *t, int32_t r) { return t->peers[r].state == PEER_OPEN; }

pycoll_status_t shm_peer_needed(shm_transport_t *t, int32_t r)
{
    const shm_peer_t *peer = &t->peers[r];
    if (peer->state == PEER_DEPARTED)
        return pycoll_frame_departed_needed(&t->base, r, &peer->recv_hdr,
                                            "while rank %d waited for it in a shared-memory collective");
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r, "rank %d is gone", (int)r);
}

pycoll_status_t shm_peer_corrupt(shm_transport_t *t, int32_t r, const char *what) { return peer_lost(t, r, what); }

/* ---- the ring: copy in and out with wrap-around; only the owner of an index ever stores it ---- */

#define RING_CORRUPT (-1)

/* Copy up to len bytes into the ring: how many went in, or RING_CORRUPT when the consumer's tail is not one it
 * could have written (behind the last one seen, or past the head). */
static int64_t ring_put(ring_t *ring, const void *src, int64_t len)
{
    const uint64_t head = ring->mine, tail = atomic_load_explicit(&ring->ctrl->tail, memory_order_acquire);
    if (tail - ring->theirs > head - ring->theirs)
        return RING_CORRUPT;
    ring->theirs = tail;
    const int64_t space = (int64_t)(ring->mask + 1 - (head - tail)), n = len < space ? len : space;
    if (n <= 0)
        return 0;
    const uint64_t at = head & ring->mask;
    const int64_t first = (int64_t)(ring->mask + 1 - at) < n ? (int64_t)(ring->mask + 1 - at) : n;
    memcpy(ring->data + at, src, (size_t)first);
    memcpy(ring->data, (const char *)src + first, (size_t)(n - first));
    ring->mine = head + (uint64_t)n;
    atomic_store_explicit(&ring->ctrl->head, ring->mine, memory_order_release);
    shm_doorbell_ring(ring->bell);
    return n;
}

/* Bytes readable, or RING_CORRUPT when the producer's head is not one it could have written (behind the last
 * one seen, or more than a ring ahead of the tail). */
static int64_t ring_available(ring_t *ring)
{
    const uint64_t head = atomic_load_explicit(&ring->ctrl->head, memory_order_acquire);
    if (head - ring->theirs > ring->mine + ring->mask + 1 - ring->theirs)
        return RING_CORRUPT;
    ring->theirs = head;
    return (int64_t)(head - ring->mine);
}

/* Copy len bytes (ring_available said they are there) out of the ring and release them. */
static void ring_take(ring_t *ring, void *dst, int64_t len)
{
    const uint64_t at = ring->mine & ring->mask;
    const int64_t first = (int64_t)(ring->mask + 1 - at) < len ? (int64_t)(ring->mask + 1 - at) : len;
    memcpy(dst, ring->data + at, (size_t)first);
    memcpy((char *)dst + first, ring->data, (size_t)(len - first));
    ring->mine += (uint64_t)len;
    atomic_store_explicit(&ring->ctrl->tail, ring->mine, memory_order_release);
    shm_doorbell_ring(ring->bell); /* a sender waiting for room */
}

/* ---- receiving ---- */

static pycoll_status_t peer_lost(shm_transport_t *t, int r, const char *why)
{
    t->peers[r].state = PEER_DEAD;
    if (t->finalizing)
        return PYCOLL_OK; /* every collective is done: a peer that left early has harmed nothing */
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r, "rank %d %s (rank %d noticed)", r, why,
                           (int)t->base.rank);
}

static const char CORRUPT_INDEX[] = "wrote a corrupt ring index into shared memory";

static void queue_probe(shm_transport_t *t, int r);

/* Nothing more can be read from r now. An ABORT counts at once; a GOODBYE only once every message before it
 * was read (`drained`: no header parked and the ring empty after the flag was seen -- the producer stores the
 * flag after its last head), so a message never received is still found, as over TCP. */
static pycoll_status_t check_closed(shm_transport_t *t, int r, int drained)
{
    shm_peer_t *peer = &t->peers[r];
    const shm_ring_ctrl_t *c = peer->in.ctrl;
    const uint32_t closed = atomic_load_explicit(&c->closed, memory_order_acquire);
    if (closed == RING_OPEN)
        return PYCOLL_OK;
    if (closed != RING_GOODBYE && closed != RING_ABORT && closed != RING_CUT)
        return peer_lost(t, r, "wrote a corrupt closed flag into shared memory");
    pycoll_frame_header_t h = {.magic = PYCOLL_FRAME_MAGIC, .failed_rank = -1, .desc = c->desc, .prev = c->prev};
    if (closed == RING_ABORT) {
        char text[PYCOLL_ERROR_LEN];
        memcpy(text, c->text, sizeof text);
        text[sizeof text - 1] = 0;
        h.kind = FRAME_ABORT;
        h.tag = (uint32_t)c->status;
        h.failed_rank = c->failed_rank; /* checked where every transport's aborts are: frame.c */
        peer->state = PEER_DEAD;
        peer->resumable = 1;
        return pycoll_frame_adopt_abort(&t->base, r, &h, text, t->finalizing);
    }
    if (!drained || peer->hdr_parked)
        return PYCOLL_OK;
    const int64_t avail = ring_available(&peer->in);
    if (avail == RING_CORRUPT)
        return peer_lost(t, r, CORRUPT_INDEX);
    if (avail != 0)
        return PYCOLL_OK;
    h.kind = FRAME_GOODBYE;
    peer->recv_hdr = h;
    peer->hdr_parked = 0;
    peer->state = PEER_DEPARTED;
    return pycoll_frame_on_goodbye(&t->base, r, &h, t->finalizing, peer->q.recv_head || peer->q.send_head);
}

/* Whether a header read from shared memory is one a peer could have sent: a data frame of a non-negative
 * length, or a STATE (no payload; the rank it names is checked with every transport's STATE, in
 * pycoll_on_peer_state). */
static int frame_is_sane(const pycoll_frame_header_t *h)
{
    if (h->magic != PYCOLL_FRAME_MAGIC)
        return 0;
    if (h->kind == FRAME_DATA)
        return h->nbytes >= 0;
    return h->kind == FRAME_STATE && h->nbytes == 0;
}

/* A header was read: decide what it is. *consumed for frames that carry nothing for a receive. */
static pycoll_status_t on_header(shm_transport_t *t, int r, int *consumed)
{
    shm_peer_t *peer = &t->peers[r];
    const pycoll_frame_header_t *h = &peer->recv_hdr;
    *consumed = 0;
    if (!frame_is_sane(h))
        return peer_lost(t, r, "wrote a corrupt frame into shared memory");
    if (h->kind == FRAME_STATE) {
        *consumed = 1;
        int tell_peer;
        pycoll_status_t st = pycoll_on_peer_state(&t->base, &peer->q, r, h, t->finalizing, t->waiting_for,
                                                  &tell_peer);
        if (tell_peer)
            queue_probe(t, r);
        return st;
    }
    if (t->finalizing)
        return pycoll_frame_data_at_close(&t->base, r, h);
    return pycoll_frame_check_data(&t->base, r, h);
}

/* Consume input from peer r while there is input and somewhere to put it. Returns non-OK on error. */
static int64_t ft_available(shm_transport_t *t, int r, int64_t avail, int *moved);
static pycoll_status_t ft_moved(shm_transport_t *t, int r);
static int ft_resynced(shm_transport_t *t, int r);

static pycoll_status_t progress_recv(shm_transport_t *t, int r)
{
    shm_peer_t *peer = &t->peers[r];
    while (peer->state == PEER_OPEN && t->base.status == PYCOLL_OK) {
        if (peer->resync && !ft_resynced(t, r))
            return t->base.status;
        int moved = 0;
        const int64_t avail = ft_available(t, r, ring_available(&peer->in), &moved);
        if (avail == RING_CORRUPT)
            return peer_lost(t, r, CORRUPT_INDEX);
        if (moved)
            return ft_moved(t, r);
        if (!peer->hdr_parked) {
            if (avail < HEADER_BYTES)
                return check_closed(t, r, 1);
            ring_take(&peer->in, &peer->recv_hdr, HEADER_BYTES);
            int consumed;
            pycoll_status_t st = on_header(t, r, &consumed);
            if (st != PYCOLL_OK)
                return st;
            peer->hdr_parked = !consumed;
            continue;
        }
        pycoll_request_t *req = peer->q.recv_head;
        if (!req)
            return check_closed(t, r, 0); /* parked: wait for the matching receive to be posted */
        if (req->progress == 0) {
            pycoll_status_t st = pycoll_frame_match(&t->base, r, &peer->recv_hdr, req);
            if (st != PYCOLL_OK)
                return st;
        }
        int64_t left = req->nbytes - req->progress, n = avail < left ? avail : left;
        if (n > 0) {
            ring_take(&peer->in, (char *)req->buf + req->progress, n);
            req->progress += n;
        }
        if (req->progress < req->nbytes)
            return n > 0 ? PYCOLL_OK : check_closed(t, r, 0);
        pycoll_dequeue_complete(&peer->q.recv_head, &peer->q.recv_tail);
        peer->hdr_parked = 0;
    }
    return t->base.status;
}

/* ---- sending ---- */

/* Write to peer r while its ring has room. Returns non-OK on error (r's tail is corrupt). */
static pycoll_status_t progress_send(shm_transport_t *t, int r)
{
    shm_peer_t *peer = &t->peers[r];
    while (peer->q.send_head && peer->state == PEER_OPEN) {
        pycoll_request_t *req = peer->q.send_head;
        if (peer->send_hdr_done == 0 && req->progress == 0) {
            pycoll_frame_fill(&t->base, &peer->send_hdr, req == &peer->q.probe ? FRAME_STATE : FRAME_DATA, req->tag,
                              req->nbytes);
            if (req == &peer->q.probe)
                peer->send_hdr.failed_rank = t->waiting_for; /* STATE: whom this rank waits for */
        }
        int64_t n;
        if (peer->send_hdr_done < HEADER_BYTES) {
            n = ring_put(&peer->out, (char *)&peer->send_hdr + peer->send_hdr_done, HEADER_BYTES - peer->send_hdr_done);
            if (n == RING_CORRUPT)
                return peer_lost(t, r, CORRUPT_INDEX);
            peer->send_hdr_done += n;
            if (peer->send_hdr_done < HEADER_BYTES)
                return PYCOLL_OK;
        }
        if (req->progress < req->nbytes) {
            n = ring_put(&peer->out, (char *)req->buf + req->progress, req->nbytes - req->progress);
            if (n == RING_CORRUPT)
                return peer_lost(t, r, CORRUPT_INDEX);
            req->progress += n;
            if (req->progress < req->nbytes)
                return PYCOLL_OK; /* the ring is full */
        }
        pycoll_dequeue_complete(&peer->q.send_head, &peer->q.send_tail);
        peer->send_hdr_done = 0;
        if (req == &peer->q.probe)
            peer->q.probe_queued = 0;
    }
    return PYCOLL_OK;
}

static pycoll_status_t shm_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    shm_transport_t *t = impl(p2p);
    pycoll_status_t status = pycoll_frame_check_request(p2p, req);
    if (status != PYCOLL_OK)
        return status;
    shm_peer_t *peer = &t->peers[req->peer];
    status = pycoll_frame_check_peer(p2p, req->peer, peer->state, &peer->recv_hdr);
    if (status != PYCOLL_OK)
        return status;
    if (req->is_send) {
        pycoll_enqueue(&peer->q.send_head, &peer->q.send_tail, req);
        return progress_send(t, req->peer);
    }
    pycoll_enqueue(&peer->q.recv_head, &peer->q.recv_tail, req);
    return progress_recv(t, req->peer);
}

/* ---- waiting ---- */

/* Tell peer r (once per collective) which collective this rank is in and whom it waits for. */
static void queue_probe(shm_transport_t *t, int r)
{
    if (t->peers[r].state == PEER_OPEN && pycoll_queue_probe(&t->base, &t->peers[r].q, r))
        (void)progress_send(t, r); /* an error is on p2p->status, which every wait checks */
}

static void tell(void *t, int r) { queue_probe(t, r); }

/* Peers whose process has exited (a zombie included: its pidfd is readable) without closing their rings: one
 * poll over the pidfds of the peers still open. What a peer wrote before dying is read first: an ABORT or
 * GOODBYE it left says more than its death. */
static void check_liveness(shm_transport_t *t)
{
    int watched = 0;
    for (int r = 0; r < t->base.size; r++) {
        const shm_peer_t *peer = &t->peers[r];
        t->pidfds[r] = (struct pollfd){.fd = peer->state == PEER_OPEN ? peer->pidfd : -1, .events = POLLIN};
        watched |= t->pidfds[r].fd >= 0;
    }
    if (!watched || poll(t->pidfds, (nfds_t)t->base.size, 0) <= 0)
        return;
    for (int r = 0; r < t->base.size && t->base.status == PYCOLL_OK; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (t->pidfds[r].fd < 0 || t->pidfds[r].revents == 0 || peer->state != PEER_OPEN)
            continue;
        progress_recv(t, r);
        if (peer->state == PEER_OPEN && t->base.status == PYCOLL_OK)
            peer_lost(t, r, "died (process exited or was killed?)");
    }
}

/* One pass over every peer: returns whether anything moved (this rank's own indices, which only it stores).
 * Every peer, not only those with requests, so that an ABORT, a GOODBYE or a STATE from anyone is seen while
 * this rank waits. */
static int progress_all(shm_transport_t *t)
{
    int moved = 0;
    for (int r = 0; r < t->base.size && t->base.status == PYCOLL_OK; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (r == t->base.rank || peer->state != PEER_OPEN)
            continue;
        const uint64_t in_tail = peer->in.mine, out_head = peer->out.mine;
        if (peer->q.send_head && progress_send(t, r) != PYCOLL_OK)
            break;
        progress_recv(t, r);
        moved |= in_tail != peer->in.mine || out_head != peer->out.mine;
    }
    return moved;
}

void shm_ring_peers(shm_transport_t *t)
{
    for (int r = 0; r < t->base.size; r++)
        if (r != t->base.rank)
            shm_doorbell_ring(t->peers[r].out.bell);
}

pycoll_status_t shm_poll_peers(shm_transport_t *t)
{
    progress_all(t);
    return t->base.status;
}

static void shm_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message);

/* Headers parked while this rank was in an earlier collective are checked once it reaches the next one. */
static void check_parked_headers(shm_transport_t *t)
{
    if (t->checked_slot == pycoll_slot_key(&t->base.desc))
        return;
    t->checked_slot = pycoll_slot_key(&t->base.desc);
    for (int r = 0; r < t->base.size && t->base.status == PYCOLL_OK; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (peer->state == PEER_OPEN && peer->hdr_parked && !(peer->q.recv_head && peer->q.recv_head->progress))
            pycoll_frame_check_data(&t->base, r, &peer->recv_hdr);
    }
}

/* One pass of a wait that began at started_ns, never sleeping: moves every ring; when nothing moved, tells the
 * peers concerned which collective this rank is in once the wait is long (once per wait), reports the timeout at
 * the deadline and, every LIVENESS_EVERY_NS, checks that the peers live. Returns whether anything moved. The one
 * pass of both shm_wait_until (which sleeps between passes) and ops->progress (the routed transport's). A peer
 * another transport reaches (absent here) may be the one waited for: its owner reports its timeout. */
static int wait_pass(shm_transport_t *t, const shm_wait_cond_t *cond, int64_t started_ns)
{
    pycoll_p2p_t *p2p = &t->base;
    check_parked_headers(t);
    if (progress_all(t))
        return 1;
    if (p2p->status != PYCOLL_OK)
        return 0;
    const int32_t waited = cond->pending_peer(cond->arg);
    if (waited < 0 && cond->ready(cond->arg)) {
        t->waiting_for = -1;
        return 0; /* a wait already over (the routed transport's other child completed it) reports nothing */
    }
    const int64_t now = pycoll_now_ns();
    const int long_wait = now - started_ns >= PYCOLL_PROBE_AFTER_NS;
    t->waiting_for = long_wait ? waited : -1;
    if (long_wait && t->probed_wait != started_ns) {
        t->probed_wait = started_ns;
        cond->probe(cond->arg);
    }
    if (now >= p2p->deadline_ns && (waited < 0 || t->peers[waited].state != PEER_ABSENT)) {
        pycoll_frame_timeout(p2p, waited, waited >= 0 ? t->peers[waited].q.waits_for_slot : 0,
                             waited >= 0 ? t->peers[waited].q.waits_for : -1);
        return 0;
    }
    if (now >= t->next_liveness_ns) {
        t->next_liveness_ns = now + LIVENESS_EVERY_NS;
        check_liveness(t);
    }
    return 0;
}

/* Once the spin is over: sleep until a peer rings this rank's doorbell (it published something: a message, room,
 * a flag) or, at the latest, until the next check that has to run without one -- the peers' liveness, an
 * interrupt, the deadline -- bounded by SLEEP_MAX_NS. The last look before the sleep is a full pass. */
typedef struct last_look {
    shm_transport_t *t;
    const shm_wait_cond_t *cond;
    int64_t started;
} last_look_t;

static int look_before_sleep(void *arg)
{
    const last_look_t *l = arg;
    return wait_pass(l->t, l->cond, l->started) || l->t->base.status != PYCOLL_OK || l->cond->ready(l->cond->arg) ||
           atomic_load_explicit(&l->t->wake, memory_order_relaxed);
}

static void sleep_until_rung(shm_transport_t *t, const shm_wait_cond_t *cond, int64_t started, int64_t next_interrupt)
{
    int64_t until = pycoll_now_ns() + SLEEP_MAX_NS;
    const int64_t checks[] = {t->base.deadline_ns, t->next_liveness_ns, next_interrupt};
    for (size_t i = 0; i < sizeof checks / sizeof *checks; i++)
        until = checks[i] < until ? checks[i] : until;
    last_look_t look = {t, cond, started};
    shm_doorbell_sleep_unless(t->bell, look_before_sleep, &look, until);
}

pycoll_status_t shm_wait_until(shm_transport_t *t, const shm_wait_cond_t *cond)
{
    pycoll_p2p_t *p2p = &t->base;
    const int64_t started = pycoll_now_ns();
    idle_wait_t idle = idle_wait_start(p2p, started);
    int64_t next_interrupt = started + INTERRUPT_EVERY_NS;
    int32_t blocked_on = WAIT_NOT_BLOCKED;
    while (p2p->status == PYCOLL_OK && !cond->ready(cond->arg)) {
        if (wait_pass(t, cond, started)) {
            idle_wait_moved(&idle);
            continue;
        }
        if (p2p->status != PYCOLL_OK)
            break;
        int64_t now = pycoll_now_ns();
        if (now >= next_interrupt || (atomic_load_explicit(&t->wake, memory_order_relaxed) &&
                                      atomic_exchange_explicit(&t->wake, 0, memory_order_relaxed))) {
            next_interrupt = now + INTERRUPT_EVERY_NS;
            if (idle_wait_interrupted(p2p))
                break;
        }
        if (wait_tally_due(blocked_on, now, started))
            blocked_on = cond->pending_peer(cond->arg);
        if (idle_wait_spinning(&idle, now))
            idle_wait_pass(&idle, now, p2p->deadline_ns);
        else
            sleep_until_rung(t, cond, started, next_interrupt);
    }
    wait_tally_end(blocked_on, started);
    t->waiting_for = -1;
    if (p2p->status != PYCOLL_OK) {
        shm_abort(p2p, p2p->status, p2p->error);
        return p2p->status;
    }
    return PYCOLL_OK;
}

/* A message wait: the requests, and the peers to probe -- those it waits for and those waiting for it. */
typedef struct request_wait {
    shm_transport_t *t;
    pycoll_request_t *const *reqs;
    int n;
} request_wait_t;

static int requests_complete(void *arg)
{
    const request_wait_t *w = arg;
    return pycoll_all_complete(w->reqs, w->n);
}

static int32_t request_pending_peer(void *arg)
{
    const request_wait_t *w = arg;
    return pycoll_first_pending_peer(w->reqs, w->n);
}

static void probe_request_peers(void *arg)
{
    const request_wait_t *w = arg;
    pycoll_probe_peers(&w->t->base, w->reqs, w->n, w->t->peers, sizeof *w->t->peers, tell, w->t);
}

void shm_tell_peers(shm_transport_t *t)
{
    for (int r = 0; r < t->base.size; r++)
        if (r != t->base.rank)
            queue_probe(t, r);
}

static pycoll_status_t shm_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    request_wait_t w = {impl(p2p), reqs, n};
    shm_wait_cond_t cond = {requests_complete, request_pending_peer, probe_request_peers, &w};
    return shm_wait_until(impl(p2p), &cond);
}

/* ops->progress (p2p.h): one pass of shm_wait. */
static int shm_progress(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, int64_t started_ns)
{
    if (p2p->status != PYCOLL_OK)
        return 0;
    request_wait_t w = {impl(p2p), reqs, n};
    shm_wait_cond_t cond = {requests_complete, request_pending_peer, probe_request_peers, &w};
    return wait_pass(impl(p2p), &cond, started_ns);
}

shm_doorbell_t *shm_transport_doorbell(pycoll_p2p_t *p2p)
{
    return p2p->ops->wait == shm_wait ? impl(p2p)->bell : NULL;
}

/* ---- closing ---- */

/* Mark every ring this rank writes closed, once: as over TCP, where nothing is read after a GOODBYE, an ABORT
 * after it (a mismatch found at close) does not replace it -- peers see the GOODBYE and judge for themselves. */
static void close_rings(shm_transport_t *t, uint32_t how)
{
    if (t->rings_closed)
        return;
    t->rings_closed = 1;
    for (int r = 0; r < t->base.size; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (r == t->base.rank || !peer->out.ctrl)
            continue;
        shm_ring_ctrl_t *c = peer->out.ctrl;
        c->desc = t->base.desc;
        c->prev = t->base.prev_desc;
        if (how == RING_ABORT) {
            c->status = (int32_t)t->base.status;
            c->failed_rank = t->base.failed_rank;
            snprintf(c->text, sizeof c->text, "%s", t->base.error);
        }
        atomic_store_explicit(&c->closed, how, memory_order_release);
        shm_doorbell_ring(peer->out.bell);
    }
}


static void shm_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message)
{
    shm_transport_t *t = impl(p2p);
    if (p2p->status == PYCOLL_OK)
        pycoll_p2p_fail(p2p, why, -1, "%s", message ? message : "aborted");
    /* Tell every peer once, so ranks not talking to the failed one fail fast with the real reason. */
    if (!t->aborted) {
        t->aborted = 1;
        close_rings(t, RING_ABORT);
    }
    pycoll_drop_queues(t->peers, sizeof *t->peers, t->base.size);
}

static int any_peer_open(const shm_transport_t *t)
{
    for (int r = 0; r < t->base.size; r++)
        if (r != t->base.rank && t->peers[r].state == PEER_OPEN)
            return 1;
    return 0;
}

static pycoll_status_t shm_finalize(pycoll_p2p_t *p2p, int64_t deadline_ns)
{
    shm_transport_t *t = impl(p2p);
    if (p2p->status != PYCOLL_OK || t->aborted || t->said_goodbye)
        return PYCOLL_OK;
    t->finalizing = 1;
    t->said_goodbye = 1;
    close_rings(t, RING_GOODBYE);
    /* only probes can be left; a peer that reads this far needs none */
    pycoll_drop_queues(t->peers, sizeof *t->peers, t->base.size);
    for (int r = 0; r < p2p->size && p2p->status == PYCOLL_OK; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (r == p2p->rank || peer->state == PEER_DEAD)
            continue;
        if (peer->state == PEER_DEPARTED) {
            /* Its GOODBYE came during this rank's last collective. */
            if (!pycoll_same_desc(&peer->recv_hdr.desc, &p2p->desc))
                pycoll_frame_mismatch(p2p, r, &peer->recv_hdr, " at close");
        } else if (peer->hdr_parked) {
            pycoll_frame_data_at_close(p2p, r, &peer->recv_hdr);
        }
    }
    int64_t next_check = pycoll_now_ns() + LIVENESS_EVERY_NS, next_interrupt = next_check + INTERRUPT_EVERY_NS;
    while (p2p->status == PYCOLL_OK && any_peer_open(t)) {
        if (progress_all(t))
            continue;
        int64_t now = pycoll_now_ns();
        if (now >= deadline_ns)
            break; /* peers still busy: they check this rank's GOODBYE when they close */
        if (now >= next_check) {
            next_check = now + LIVENESS_EVERY_NS;
            check_liveness(t);
        }
        if (now >= next_interrupt) {
            next_interrupt = now + INTERRUPT_EVERY_NS;
            if (p2p->check_interrupt && p2p->check_interrupt(p2p->interrupt_ctx))
                break;
        }
        idle_nap(deadline_ns - now < IDLE_NAP_NS ? deadline_ns - now : IDLE_NAP_NS);
    }
    if (p2p->status != PYCOLL_ERR_MISMATCH)
        return PYCOLL_OK;
    shm_abort(p2p, p2p->status, p2p->error);
    return PYCOLL_ERR_MISMATCH;
}

static void shm_destroy(pycoll_p2p_t *p2p)
{
    shm_transport_t *t = impl(p2p);
    /* A clean close: peers that are done with this rank stay calm when it goes. */
    if (p2p->status == PYCOLL_OK && !t->said_goodbye)
        close_rings(t, RING_GOODBYE);
    shm_collectives_detach(t->coll, t->base.size);
    for (int r = 0; r < t->base.size; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (peer->in_map)
            munmap(peer->in_map, (size_t)(SHM_PAGE_BYTES + t->ring_bytes));
        if (peer->out_map)
            munmap(peer->out_map, (size_t)(SHM_PAGE_BYTES + t->ring_bytes));
        if (peer->bell_map)
            munmap(peer->bell_map, (size_t)SHM_PAGE_BYTES);
        if (peer->pidfd >= 0)
            close(peer->pidfd);
    }
    if (t->bell_map)
        munmap(t->bell_map, (size_t)SHM_PAGE_BYTES);
    free(t->peers);
    free(t->pidfds);
    free(t);
}

static const pycoll_p2p_ops_t shm_ops = PYCOLL_P2P_OPS(shm, "shm", .finalize = shm_finalize,
                                                      .native = &shm_native_collectives, .progress = shm_progress);

/* ---- set-up ---- */

static int64_t ring_bytes_or_default(int64_t ring_bytes)
{
    return ring_bytes > 0 ? ring_bytes : DEFAULT_RING_BYTES;
}

/* The rings of every sender, then this rank's collective area (shm_collectives.c). */
static int64_t rings_bytes(int32_t size, int64_t ring_bytes)
{
    return (int64_t)size * (SHM_PAGE_BYTES + ring_bytes_or_default(ring_bytes));
}

int64_t pycoll_shm_segment_bytes(int32_t size, int64_t ring_bytes)
{
    return rings_bytes(size, ring_bytes) + shm_coll_area_bytes(ring_bytes_or_default(ring_bytes));
}

/* The doorbell of the rank whose segment fd is: its collective control page, mapped on its own (also where the
 * native collectives do not run). NULL when it cannot be mapped. */
static shm_doorbell_t *map_bell(int fd, int32_t size, int64_t ring_bytes, void **map)
{
    void *p = mmap(NULL, (size_t)SHM_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                   (off_t)rings_bytes(size, ring_bytes));
    *map = p == MAP_FAILED ? NULL : p;
    return *map ? &((shm_coll_ctrl_t *)p)->bell : NULL;
}

/* Map the ring that `sender` writes in the segment of its receiver (fd). */
static void *map_ring(int fd, int32_t sender, int64_t ring_bytes, ring_t *ring)
{
    size_t len = (size_t)(SHM_PAGE_BYTES + ring_bytes);
    /* MAP_POPULATE: the pages are faulted in here, at set-up, not during the first collectives. */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)sender * (off_t)len);
    if (p == MAP_FAILED)
        return NULL;
    ring->ctrl = p;
    ring->data = (unsigned char *)p + SHM_PAGE_BYTES;
    ring->mask = (uint64_t)ring_bytes - 1;
    /* A fresh segment: every index is 0 (the producer's head and the consumer's tail start equal). */
    ring->mine = ring->theirs = 0;
    return p;
}

pycoll_p2p_t *pycoll_shm_transport_create(int32_t rank, int32_t size, const int *segment_fds, const int32_t *pids,
                                          int64_t ring_bytes, char *error, size_t error_len)
{
    ring_bytes = ring_bytes_or_default(ring_bytes);
    if (size < 1 || rank < 0 || rank >= size) {
        snprintf(error, error_len, "invalid rank %d for world size %d", (int)rank, (int)size);
        return NULL;
    }
    if (ring_bytes < MIN_RING_BYTES || (ring_bytes & (ring_bytes - 1)) != 0) {
        snprintf(error, error_len, "shared-memory ring size must be a power of two of at least %lld bytes, got "
                 "%lld", (long long)MIN_RING_BYTES, (long long)ring_bytes);
        return NULL;
    }
    shm_transport_t *t = calloc(1, sizeof *t);
    shm_peer_t *peers = calloc((size_t)size, sizeof *peers);
    struct pollfd *pidfds = calloc((size_t)size, sizeof *pidfds);
    if (!t || !peers || !pidfds) {
        snprintf(error, error_len, "cannot create the shared-memory transport: out of memory");
        free(t);
        free(peers);
        free(pidfds);
        return NULL;
    }
    t->pidfds = pidfds;
    t->ops = shm_ops;
    t->base.ops = &t->ops;
    t->base.rank = rank;
    t->base.size = size;
    t->base.failed_rank = -1;
    t->peers = peers;
    t->ring_bytes = ring_bytes;
    t->waiting_for = -1;
    for (int r = 0; r < size; r++)
        peers[r].pidfd = -1;
    t->bell = map_bell(segment_fds[rank], size, ring_bytes, &t->bell_map);
    if (!t->bell) {
        snprintf(error, error_len, "cannot map this rank's shared-memory control page: %s", strerror(errno));
        t->said_goodbye = 1;
        shm_destroy(&t->base);
        return NULL;
    }
    for (int r = 0; r < size; r++) {
        if (r == rank)
            continue;
        shm_peer_t *peer = &peers[r];
        if (segment_fds[r] < 0) {
            peer->state = PEER_ABSENT; /* on another host: another transport reaches it */
            t->ops.native = NULL;
            continue;
        }
        peer->in_map = map_ring(segment_fds[rank], r, ring_bytes, &peer->in);
        peer->out_map = map_ring(segment_fds[r], rank, ring_bytes, &peer->out);
        peer->in.bell = peer->out.bell = map_bell(segment_fds[r], size, ring_bytes, &peer->bell_map);
        if (!peer->in_map || !peer->out_map || !peer->bell_map) {
            snprintf(error, error_len, "cannot map the shared-memory rings with rank %d: %s", r, strerror(errno));
            t->said_goodbye = 1; /* never set up: nothing to tell the peers */
            shm_destroy(&t->base);
            return NULL;
        }
#ifdef SYS_pidfd_open
        if (pids && pids[r] > 0)
            peer->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pids[r], 0);
#endif
    }
    if (t->ops.native == NULL)
        return &t->base; /* some peers absent: no native collectives (see ops) */
    t->coll = shm_collectives_attach(t, size, segment_fds, pids, rings_bytes(size, ring_bytes), ring_bytes, error,
                                    error_len);
    if (!t->coll) {
        t->said_goodbye = 1;
        shm_destroy(&t->base);
        return NULL;
    }
    return &t->base;
}

/* ---- fault tolerance (transport/ft_reset.h) ---- */

/* What may be read of r's ring in the epoch this rank is in: up to where r started its next epoch, if it did
 * (it stored that head before any byte of the new epoch: the acquire on the head makes the epoch visible).
 * *moved: r left this epoch and everything of it was read, or it aborted it. */
static int64_t ft_available(shm_transport_t *t, int r, int64_t avail, int *moved)
{
    shm_peer_t *peer = &t->peers[r];
    const shm_ring_ctrl_t *c = peer->in.ctrl;
    if (avail == RING_CORRUPT || atomic_load_explicit(&c->epoch, memory_order_acquire) == peer->epoch_seen)
        return avail;
    if (c->epoch_aborted) {
        *moved = 1;
        return 0;
    }
    const uint64_t left = c->epoch_head - peer->in.mine;
    if (left > (uint64_t)avail)
        return RING_CORRUPT;
    *moved = left == 0;
    return (int64_t)left;
}

/* r left the epoch this rank is in: as its ABORT if it aborted, else as a goodbye (an error only if this rank
 * still needs it). Its ring is read again once this rank starts r's epoch too (shm_ft_reset). */
static pycoll_status_t ft_moved(shm_transport_t *t, int r)
{
    shm_peer_t *peer = &t->peers[r];
    const shm_ring_ctrl_t *c = peer->in.ctrl;
    peer->state = PEER_DEAD;
    peer->resumable = 1;
    if (c->epoch_aborted) {
        char text[PYCOLL_ERROR_LEN];
        memcpy(text, c->text, sizeof text);
        text[sizeof text - 1] = 0;
        pycoll_frame_header_t h = {.magic = PYCOLL_FRAME_MAGIC, .kind = FRAME_ABORT, .tag = (uint32_t)c->status,
                                   .failed_rank = c->failed_rank, .desc = c->desc, .prev = c->prev};
        return pycoll_frame_adopt_abort(&t->base, r, &h, text, t->finalizing);
    }
    if (!peer->q.recv_head && !peer->q.send_head && !peer->hdr_parked)
        return PYCOLL_OK;
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r, "rank %d left this collective: it is agreeing or "
                           "shrinking after a failure or a revoke (rank %d noticed)", r, (int)t->base.rank);
}

/* Whether r started the epoch this rank waits for; then its ring is read from where that epoch begins. 0 while
 * it has not (or it is found gone: the error is recorded). */
static int ft_resynced(shm_transport_t *t, int r)
{
    shm_peer_t *peer = &t->peers[r];
    shm_ring_ctrl_t *c = peer->in.ctrl;
    if (atomic_load_explicit(&c->closed, memory_order_acquire) == RING_CUT) {
        peer_lost(t, r, "cut this rank off (it found this rank gone)");
        return 0;
    }
    const uint32_t epoch = atomic_load_explicit(&c->epoch, memory_order_acquire);
    if (epoch != peer->resync && epoch - peer->epoch_seen < peer->resync - peer->epoch_seen)
        return 0; /* still in an older epoch */
    const uint64_t start = c->epoch_head;
    if (epoch != peer->resync || start - peer->in.mine > peer->in.mask + 1) {
        peer_lost(t, r, "wrote a corrupt epoch into shared memory");
        return 0;
    }
    peer->in.mine = peer->in.theirs = start;
    atomic_store_explicit(&peer->in.ctrl->tail, start, memory_order_release);
    shm_doorbell_ring(peer->in.bell);
    peer->hdr_parked = 0;
    peer->epoch_seen = epoch;
    peer->resync = 0;
    return 1;
}

int shm_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r)
{
    const peer_state_t state = impl(p2p)->peers[r].state;
    return state == PEER_DEAD || state == PEER_DEPARTED;
}

void shm_ft_wake(pycoll_p2p_t *p2p)
{
    shm_transport_t *t = impl(p2p);
    atomic_store_explicit(&t->wake, 1, memory_order_relaxed);
    shm_doorbell_ring(t->bell); /* from another thread: a wait asleep sees it now */
}

void shm_ft_cut(pycoll_p2p_t *p2p, int32_t r)
{
    shm_transport_t *t = impl(p2p);
    shm_peer_t *peer = &t->peers[r];
    if (peer->state == PEER_ABSENT)
        return;
    shm_ring_ctrl_t *c = peer->out.ctrl;
    if (c) { /* read as a goodbye (check_closed): a peer finishing its collective before completes it */
        c->desc = t->base.desc;
        c->prev = t->base.prev_desc;
        c->status = PYCOLL_ERR_PEER_FAILURE;
        c->failed_rank = p2p->rank;
        snprintf(c->text, sizeof c->text, "rank %d found rank %d gone", (int)p2p->rank, (int)r);
        atomic_store_explicit(&c->closed, RING_CUT, memory_order_release);
        shm_doorbell_ring(peer->out.bell);
    }
    peer->state = PEER_DEAD;
    peer->resumable = 0;
}

pycoll_status_t shm_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost)
{
    shm_transport_t *t = impl(p2p);
    if (t->said_goodbye)
        return PYCOLL_ERR_UNSUPPORTED; /* finalized: the peers were told this rank is done */
    const uint32_t aborted = (uint32_t)t->aborted;
    pycoll_ft_clear_error(p2p);
    pycoll_drop_queues(t->peers, sizeof *t->peers, t->base.size);
    t->aborted = 0;
    t->rings_closed = 0;
    t->waiting_for = -1;
    t->checked_slot = 0;
    t->probed_wait = 0;
    for (int r = 0; r < p2p->size; r++) {
        shm_peer_t *peer = &t->peers[r];
        if (r == p2p->rank || peer->state == PEER_ABSENT)
            continue;
        const int resumable = peer->state == PEER_OPEN || (peer->state == PEER_DEAD && peer->resumable);
        if (lost[r] || !resumable) {
            lost[r] = 1;
            shm_ft_cut(p2p, r);
            continue;
        }
        /* This rank's frames of the new epoch start at its head now; r skips what is before. */
        shm_ring_ctrl_t *c = peer->out.ctrl;
        c->epoch_head = peer->out.mine;
        c->epoch_aborted = aborted;
        atomic_store_explicit(&c->closed, RING_OPEN, memory_order_release);
        atomic_store_explicit(&c->epoch, epoch, memory_order_release);
        shm_doorbell_ring(peer->out.bell);
        peer->send_hdr_done = 0;
        peer->resync = epoch;
        peer->state = PEER_OPEN;
        peer->resumable = 0;
    }
    return PYCOLL_OK;
}
