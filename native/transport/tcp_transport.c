/* TCP transport: pycoll_p2p_t over stream sockets to every peer (a full mesh), driven by epoll: one per peer,
 * and with PYCOLL_TCP_STREAMS more that carry parts of large frames (tcp_stripes.h).
 *
 * Why a full mesh and not only ring neighbours: every rank watches every peer's socket while it waits, so a
 * peer that dies (kill -9 closes its sockets) is seen by all ranks at once, not just its neighbours, and a
 * rank that gives up can tell everyone why with an ABORT frame.
 *
 * Wire format: each message is a frame header followed by nbytes of payload. Input is read ahead into a
 * per-peer buffer, so a small frame (header + payload) costs one recv; a payload of at least that buffer's
 * size is read straight into the caller's buffer instead (no copy where copies would cost). The header
 * carries the collective's descriptor (with the fingerprint of the collectives before it) and the previous
 * one's, so a receiver can tell a peer that called a different collective (PYCOLL_ERR_MISMATCH, naming both)
 * instead of hanging or, where the two exchange no message, instead of passing it over:
 *  - a rank blocked for PROBE_AFTER_NS sends the peers it waits for a STATE frame with its descriptor (two
 *    ranks that each wait for the other, as reduce's roots do when they disagree on the root, learn why at
 *    once instead of at the deadline);
 *  - a header that arrived early is checked again when this rank reaches that collective;
 *  - at close, finalize exchanges GOODBYE frames and compares the last descriptors, histories included.
 * Sockets arrive connected and authenticated (pycoll/mesh.py); this file only moves bytes. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "transport/frame.h"
#include "transport/ft_reset.h"
#include "transport/idle_wait.h"
#include "transport/request_queue.h"
#include "common/wait_tally.h"
#include "pycoll/transports.h"
#include "transport/tcp_stripes.h"
#include "transport/tcp_transport.h"

#define INBUF_BYTES (64 * 1024) /* per-peer read-ahead: larger payloads bypass it */
#define PROBE_AFTER_NS PYCOLL_PROBE_AFTER_NS
#define ABORT_DRAIN_NS PYCOLL_ABORT_DRAIN_NS

typedef pycoll_frame_header_t frame_header_t;


typedef struct tcp_peer {
    pycoll_peer_queues_t q; /* first: the shared helpers of transport/request_queue.h see it */
    int fd;
    peer_state_t state;
    /* sending */
    frame_header_t send_hdr;
    int64_t send_hdr_done; /* bytes of send_hdr already written for send_head */
    /* receiving */
    frame_header_t recv_hdr;
    int64_t recv_hdr_done; /* == sizeof(frame_header_t) once a header is parked, waiting for its recv */
    int64_t recv_body_done; /* bytes of that data frame read into its receive: kept here because an abort
                             * must know them after the algorithm that posted the receive has freed it */
    char *inbuf;           /* INBUF_BYTES of read-ahead; bytes [in_start, in_end) are not consumed yet */
    int64_t in_start, in_end;
    int readable;          /* the socket may hold unread input (epoll said so and no recv came up short) */
    /* Fault tolerance (tcp_ft_reset, at the end of this file). */
    pycoll_request_t recover; /* this rank's RECOVER frame, first in its queue in a new epoch */
    uint32_t resync;       /* discard this peer's frames up to its RECOVER of this epoch (0: none) */
    uint32_t moved_to;     /* the epoch of a RECOVER read outside a reset: the peer left the old one */
    int64_t skip;          /* bytes of a discarded frame still to read past */
    int resumable;         /* gone only because it aborted or moved on: its stream ends at a frame boundary */
    int cut_mid_frame;     /* this rank's stream to it stopped inside a frame (it cannot resume) */
    tcp_stripes_t x;       /* the extra connections: parts of large data frames */
} tcp_peer_t;

typedef struct tcp_transport {
    pycoll_p2p_t base;
    int epfd;
    tcp_peer_t *peers;
    uint64_t checked_slot; /* the collective whose early-arrived headers were checked */
    int finalizing;       /* in finalize: peers closing is expected; any data left unreceived is a mismatch */
    int32_t waiting_for;  /* while a wait is blocked past PROBE_AFTER_NS: the peer it waits for, else -1 */
    int said_goodbye;
    int64_t probed_wait;  /* wait_pass: the start of the last wait whose peers were probed */
    int wakefd;           /* tcp_ft_wake: another thread makes a wait run its interrupt check now (-1: none) */
    int woken;
} tcp_transport_t;

#define WAKE_EVENT UINT32_MAX /* the epoll data of wakefd: no rank has it */
static void ft_watch_wakefd(tcp_transport_t *t);

static tcp_transport_t *impl(pycoll_p2p_t *p2p) { return (tcp_transport_t *)p2p; }

static int header_complete(const tcp_peer_t *peer) { return peer->recv_hdr_done == (int64_t)sizeof(frame_header_t); }

/* Sockets are registered once, edge-triggered, for input, output and hang-ups: no epoll_ctl per message. An
 * edge is not repeated, so `readable` remembers input that was left in the socket (read-ahead full, no
 * receive posted) until a receive is posted. */
#define PEER_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

static int64_t buffered(const tcp_peer_t *peer) { return peer->in_end - peer->in_start; }

/* A peer's connections leave the epoll set: nothing more is read from it. */
static void unwatch(tcp_transport_t *t, tcp_peer_t *peer)
{
    if (peer->fd >= 0)
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, peer->fd, NULL);
    tcp_stripes_unwatch(&peer->x, t->epfd);
}

/* The length of a frame's part that follows its header on the first connection. */
static int64_t first_part(const tcp_peer_t *peer, int64_t nbytes) { return tcp_stripe_first(nbytes, peer->x.n); }

/* A data frame whose header is parked, passed over: what is left of it on every connection is read past. */
static void skip_parked_frame(tcp_peer_t *peer)
{
    const int matched = peer->x.rx != NULL && peer->q.recv_head == peer->x.rx;
    peer->skip = first_part(peer, peer->recv_hdr.nbytes) - peer->recv_body_done;
    tcp_stripes_skip_frame(&peer->x, peer->recv_hdr.nbytes, matched);
    peer->recv_hdr_done = 0;
}

static pycoll_status_t peer_lost(tcp_transport_t *t, int r, const char *why)
{
    tcp_peer_t *peer = &t->peers[r];
    peer->state = PEER_DEAD;
    unwatch(t, peer);
    if (t->finalizing)
        return PYCOLL_OK; /* every collective is done: a peer that left early has harmed nothing */
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r, "rank %d %s (rank %d noticed)", r, why,
                           (int)t->base.rank);
}

static pycoll_status_t describe_mismatch(tcp_transport_t *t, int r, const char *context)
{
    return pycoll_frame_mismatch(&t->base, r, &t->peers[r].recv_hdr, context);
}

static pycoll_status_t check_data_header(tcp_transport_t *t, int r)
{
    return pycoll_frame_check_data(&t->base, r, &t->peers[r].recv_hdr);
}

/* Read the text of an ABORT frame (bounded, with a short deadline) and adopt the peer's error. */
static pycoll_status_t adopt_abort(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    char text[PYCOLL_ERROR_LEN] = {0};
    int64_t want = peer->recv_hdr.nbytes, got = 0;
    if (want < 0 || want >= (int64_t)sizeof text)
        want = sizeof text - 1;
    got = buffered(peer) < want ? buffered(peer) : want;
    memcpy(text, peer->inbuf + peer->in_start, (size_t)got);
    peer->in_start += got;
    int64_t deadline = pycoll_now_ns() + ABORT_DRAIN_NS;
    while (got < want && pycoll_now_ns() < deadline) {
        ssize_t n = recv(peer->fd, text + got, (size_t)(want - got), 0);
        if (n > 0) {
            got += n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pfd = {.fd = peer->fd, .events = POLLIN};
            poll(&pfd, 1, 10);
        } else {
            break;
        }
    }
    peer->state = PEER_DEAD;
    unwatch(t, peer);
    peer->resumable = peer->recv_hdr.nbytes >= got;
    peer->skip = peer->resumable ? peer->recv_hdr.nbytes - got : 0;
    peer->recv_hdr_done = 0;
    return pycoll_frame_adopt_abort(&t->base, r, &peer->recv_hdr, text, t->finalizing);
}

static pycoll_status_t on_goodbye(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    peer->state = PEER_DEPARTED;
    unwatch(t, peer);
    return pycoll_frame_on_goodbye(&t->base, r, &peer->recv_hdr, t->finalizing,
                                   peer->q.recv_head || peer->q.send_head);
}

static void queue_probe(tcp_transport_t *t, int r);
static pycoll_status_t ft_on_header(tcp_transport_t *t, int r, int *consumed);
static int ft_skip(tcp_transport_t *t, int r);

/* A peer blocked in a collective says which: at the same number it must be the same collective; at close, a
 * peer waiting in a collective this rank never called disagrees with it. A peer waiting for this rank while
 * this rank itself waits for another is told so, so that its timeout names the rank at the end of the chain. */
static pycoll_status_t on_state(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    int tell_peer;
    pycoll_status_t st = pycoll_on_peer_state(&t->base, &peer->q, r, &peer->recv_hdr, t->finalizing,
                                              t->waiting_for, &tell_peer);
    if (tell_peer)
        queue_probe(t, r);
    return st;
}

/* A header is complete: decide what it is. *consumed is set for frames that carry nothing for a receive.
 * Returns non-OK on error. */
static pycoll_status_t on_header(tcp_transport_t *t, int r, int *consumed)
{
    tcp_peer_t *peer = &t->peers[r];
    const frame_header_t *h = &peer->recv_hdr;
    *consumed = 0;
    if (h->magic != PYCOLL_FRAME_MAGIC)
        return peer_lost(t, r, "sent a corrupt frame");
    if (peer->resync || h->kind == FRAME_RECOVER)
        return ft_on_header(t, r, consumed);
    if (h->kind == FRAME_ABORT)
        return adopt_abort(t, r);
    if (h->kind == FRAME_GOODBYE)
        return on_goodbye(t, r);
    if (h->kind == FRAME_STATE && h->nbytes == 0) {
        *consumed = 1;
        return on_state(t, r);
    }
    if (h->kind != FRAME_DATA || h->nbytes < 0)
        return peer_lost(t, r, "sent a corrupt frame");
    if (t->finalizing)
        return pycoll_frame_data_at_close(&t->base, r, h);
    return check_data_header(t, r);
}

/* Match a parked header against the posted receive at the head of the queue. */
static pycoll_status_t match_header(tcp_transport_t *t, int r)
{
    return pycoll_frame_match(&t->base, r, &t->peers[r].recv_hdr, t->peers[r].q.recv_head);
}

/* recv from peer r; returns the bytes read, 0 when the socket has nothing now (or an error was recorded).
 * A short read means the socket is drained: the next input comes with a new epoll edge. */
static int64_t read_socket(tcp_transport_t *t, int r, void *dst, int64_t len, const char *closed_why)
{
    tcp_peer_t *peer = &t->peers[r];
    if (!peer->readable || len <= 0)
        return 0;
    ssize_t n = recv(peer->fd, dst, (size_t)len, 0);
    if (n == 0) {
        peer_lost(t, r, closed_why);
        return 0;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            peer->readable = 0;
        else if (errno != EINTR)
            peer_lost(t, r, strerror(errno));
        return 0;
    }
    if (n < len)
        peer->readable = 0;
    return n;
}

/* Top up the read-ahead buffer (moving unread bytes to its front first). Returns the bytes read. */
static int64_t fill_inbuf(tcp_transport_t *t, int r, const char *closed_why)
{
    tcp_peer_t *peer = &t->peers[r];
    if (peer->in_start > 0) {
        memmove(peer->inbuf, peer->inbuf + peer->in_start, (size_t)buffered(peer));
        peer->in_end -= peer->in_start;
        peer->in_start = 0;
    }
    int64_t n = read_socket(t, r, peer->inbuf + peer->in_end, INBUF_BYTES - peer->in_end, closed_why);
    peer->in_end += n;
    return n;
}

/* Consume input from peer r while there is input and somewhere to put it. */
static pycoll_status_t progress_recv(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    for (;;) {
        if (peer->state != PEER_OPEN)
            return PYCOLL_OK;
        if (peer->skip > 0) {
            if (!ft_skip(t, r))
                return t->base.status;
            continue;
        }
        if (!header_complete(peer)) {
            if (buffered(peer) < (int64_t)sizeof(frame_header_t)) {
                if (fill_inbuf(t, r, "closed its connection (process exited or was killed?)") == 0)
                    return t->base.status;
                continue;
            }
            memcpy(&peer->recv_hdr, peer->inbuf + peer->in_start, sizeof(frame_header_t));
            peer->in_start += (int64_t)sizeof(frame_header_t);
            peer->recv_hdr_done = sizeof(frame_header_t);
            peer->recv_body_done = 0;
            int consumed;
            pycoll_status_t st = on_header(t, r, &consumed);
            if (st != PYCOLL_OK || peer->state != PEER_OPEN)
                return st;
            if (consumed) {
                peer->recv_hdr_done = 0;
                continue;
            }
        }
        pycoll_request_t *req = peer->q.recv_head;
        if (!req)
            return PYCOLL_OK; /* parked: wait for the matching receive to be posted */
        if (req->progress == 0 && peer->x.rx != req) {
            pycoll_status_t st = match_header(t, r);
            if (st != PYCOLL_OK)
                return st;
        }
        /* Matched: a striped frame's other parts may come in on the extra connections from now on. */
        const int64_t end = first_part(peer, req->nbytes);
        int rest_in = 1;
        if (end < req->nbytes) {
            const char *why = NULL;
            rest_in = tcp_stripes_recv(&peer->x, req, req->buf, req->nbytes, &why);
            if (rest_in < 0)
                return peer_lost(t, r, why);
        }
        const int64_t left = end - req->progress;
        if (left > 0 && buffered(peer) > 0) {
            int64_t n = buffered(peer) < left ? buffered(peer) : left;
            memcpy((char *)req->buf + req->progress, peer->inbuf + peer->in_start, (size_t)n);
            peer->in_start += n;
            req->progress += n;
            peer->recv_body_done += n;
        } else if (left > 0) {
            static const char *mid = "closed its connection mid-message (process exited or was killed?)";
            int64_t n = left >= INBUF_BYTES ? read_socket(t, r, (char *)req->buf + req->progress, left, mid)
                                            : fill_inbuf(t, r, mid);
            if (n == 0)
                return t->base.status;
            if (left >= INBUF_BYTES) {
                req->progress += n;
                peer->recv_body_done += n;
            }
        }
        if (req->progress == end && !rest_in)
            return PYCOLL_OK; /* the extra connections' events bring the rest */
        if (req->progress == end) {
            pycoll_dequeue_complete(&peer->q.recv_head, &peer->q.recv_tail);
            peer->recv_hdr_done = 0;
            peer->x.rx = NULL;
        }
    }
}

static void fill_header(tcp_transport_t *t, frame_header_t *h, int kind, uint32_t tag, int64_t nbytes)
{
    pycoll_frame_fill(&t->base, h, kind, tag, nbytes);
}

static void dequeue_sent(tcp_peer_t *peer, pycoll_request_t *req)
{
    pycoll_dequeue_complete(&peer->q.send_head, &peer->q.send_tail);
    peer->send_hdr_done = 0;
    peer->x.tx = NULL;
    if (req == &peer->q.probe)
        peer->q.probe_queued = 0;
}

/* Write to peer r while the socket takes data. Header and payload go out in one sendmsg. */
static pycoll_status_t progress_send(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    while (peer->q.send_head) {
        if (peer->state == PEER_DEAD)
            return PYCOLL_OK; /* already reported */
        pycoll_request_t *req = peer->q.send_head;
        if (peer->send_hdr_done == 0 && req->progress == 0) {
            fill_header(t, &peer->send_hdr,
                        req == &peer->q.probe ? FRAME_STATE : req == &peer->recover ? FRAME_RECOVER : FRAME_DATA,
                        req->tag, req->nbytes);
            if (req == &peer->q.probe)
                peer->send_hdr.failed_rank = t->waiting_for; /* STATE: whom this rank waits for */
        }
        const int64_t end = first_part(peer, req->nbytes);
        int rest_out = 1;
        if (end < req->nbytes) {
            const char *why = NULL;
            rest_out = tcp_stripes_send(&peer->x, req, req->buf, req->nbytes, &why);
            if (rest_out < 0)
                return peer_lost(t, r, why);
        }
        struct iovec iov[2];
        int iovcnt = 0;
        if (peer->send_hdr_done < (int64_t)sizeof(frame_header_t)) {
            iov[iovcnt].iov_base = (char *)&peer->send_hdr + peer->send_hdr_done;
            iov[iovcnt++].iov_len = sizeof(frame_header_t) - (size_t)peer->send_hdr_done;
        }
        if (req->progress < end) {
            iov[iovcnt].iov_base = (char *)req->buf + req->progress;
            iov[iovcnt++].iov_len = (size_t)(end - req->progress);
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = iovcnt ? sendmsg(peer->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return PYCOLL_OK;
            return peer_lost(t, r, errno == EPIPE || errno == ECONNRESET
                                       ? "closed its connection (process exited or was killed?)"
                                       : strerror(errno));
        }
        int64_t hdr_left = (int64_t)sizeof(frame_header_t) - peer->send_hdr_done;
        if (n <= hdr_left) {
            peer->send_hdr_done += n;
        } else {
            peer->send_hdr_done = sizeof(frame_header_t);
            req->progress += n - hdr_left;
        }
        if (peer->send_hdr_done == (int64_t)sizeof(frame_header_t) && req->progress == end && rest_out) {
            dequeue_sent(peer, req);
        } else {
            return PYCOLL_OK; /* a socket is full */
        }
    }
    return PYCOLL_OK;
}

static pycoll_status_t tcp_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    tcp_transport_t *t = impl(p2p);
    pycoll_status_t status = pycoll_frame_check_request(p2p, req);
    if (status != PYCOLL_OK)
        return status;
    tcp_peer_t *peer = &t->peers[req->peer];
    status = pycoll_frame_check_peer(p2p, req->peer, peer->state, &peer->recv_hdr);
    if (status != PYCOLL_OK)
        return status;
    if (req->is_send)
        pycoll_enqueue(&peer->q.send_head, &peer->q.send_tail, req);
    else
        pycoll_enqueue(&peer->q.recv_head, &peer->q.recv_tail, req);
    /* Start right away: small messages usually go out (or are found waiting) without a trip through epoll. */
    return req->is_send ? progress_send(t, req->peer) : progress_recv(t, req->peer);
}

static void tcp_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message);

/* Headers parked while this rank was in an earlier collective are checked once it reaches the next one: a
 * peer whose message this rank will never post a receive for (it thinks another rank is the root) is named
 * now, not at the deadline. */
static void check_parked_headers(tcp_transport_t *t)
{
    if (t->checked_slot == pycoll_slot_key(&t->base.desc))
        return;
    t->checked_slot = pycoll_slot_key(&t->base.desc);
    for (int r = 0; r < t->base.size && t->base.status == PYCOLL_OK; r++) {
        tcp_peer_t *peer = &t->peers[r];
        if (peer->state == PEER_OPEN && header_complete(peer) && !(peer->q.recv_head && peer->q.recv_head->progress))
            check_data_header(t, r);
    }
}

/* Tell peer r (once per collective) which collective this rank is in and whom it waits for. */
static void queue_probe(tcp_transport_t *t, int r)
{
    if (t->peers[r].state == PEER_OPEN && pycoll_queue_probe(&t->base, &t->peers[r].q, r))
        progress_send(t, r);
}

static void tell(void *t, int r) { queue_probe(t, r); }

static void probe_peers(tcp_transport_t *t, pycoll_request_t *const *reqs, int n)
{
    t->waiting_for = pycoll_first_pending_peer(reqs, n);
    pycoll_probe_peers(&t->base, reqs, n, t->peers, sizeof *t->peers, tell, t);
}

/* The timeout error: the peer this wait was for, or, when that peer said it waits for another rank in this
 * collective, that one (a stopped rank makes a chain of waiting ranks; the first link is rarely the culprit). */
static void fail_timeout(tcp_transport_t *t, pycoll_request_t *const *reqs, int n)
{
    const int32_t waited = pycoll_first_pending_peer(reqs, n);
    pycoll_frame_timeout(&t->base, waited, t->peers[waited].q.waits_for_slot, t->peers[waited].q.waits_for);
}

/* An event on extra connection k of rank r: its input belongs to the striped receive in progress (if any);
 * a hang-up there is the peer's failure even when no part is due (a connection of the pair is gone). */
static void on_stream_event(tcp_transport_t *t, int r, int k, uint32_t events)
{
    tcp_peer_t *peer = &t->peers[r];
    if (peer->state != PEER_OPEN || k >= peer->x.n)
        return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        peer->x.s[k].readable = 1;
        progress_recv(t, r);
        if (t->base.status == PYCOLL_OK && peer->state == PEER_OPEN && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
            peer->x.rx == NULL && tcp_stripes_closed(&peer->x, k))
            peer_lost(t, r, "closed a connection (process exited or was killed?)");
    }
}

/* Act on what epoll reported: input (or a hang-up) to read, room to write. */
static void on_events(tcp_transport_t *t, const struct epoll_event *events, int k)
{
    for (int i = 0; i < k && t->base.status == PYCOLL_OK; i++) {
        if (events[i].data.u32 == WAKE_EVENT) {
            uint64_t count;
            (void)!read(t->wakefd, &count, sizeof count);
            t->woken = 1;
            continue;
        }
        int r = (int)(events[i].data.u32 & ((1u << TCP_STREAM_SHIFT) - 1));
        int stream = (int)(events[i].data.u32 >> TCP_STREAM_SHIFT);
        if (stream > 0) {
            on_stream_event(t, r, stream, events[i].events);
        } else if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            t->peers[r].readable = 1;
            progress_recv(t, r);
        }
        if (t->base.status == PYCOLL_OK && (events[i].events & EPOLLOUT))
            progress_send(t, r);
    }
}

/* One pass of a wait that began at started_ns: acts on what epoll reports within timeout_ms (0: never sleeps);
 * when nothing came, tells the peers waited for which collective this rank is in once the wait is long (once per
 * wait) and reports the timeout at the deadline. Returns epoll_wait's count: > 0 when something moved, -1 when a
 * signal interrupted it. The one pass of both tcp_wait (which chooses how long each pass may sleep) and
 * ops->progress (the routed transport's). reqs may include requests to peers another transport reaches (absent
 * here): they count for whom this rank waits, and their owner reports their timeout. */
static int wait_pass(tcp_transport_t *t, pycoll_request_t *const *reqs, int n, int64_t started_ns, int timeout_ms)
{
    pycoll_p2p_t *p2p = &t->base;
    struct epoll_event events[64];
    check_parked_headers(t);
    int k = epoll_wait(t->epfd, events, 64, timeout_ms);
    if (k < 0 && errno != EINTR) {
        pycoll_p2p_fail(p2p, PYCOLL_ERR_SYSTEM, -1, "epoll_wait: %s", strerror(errno));
        return k;
    }
    if (k > 0) {
        on_events(t, events, k);
        return k;
    }
    const int32_t waited = pycoll_first_pending_peer(reqs, n);
    t->waiting_for = -1;
    if (waited < 0)
        return k;
    int64_t now = pycoll_now_ns();
    if (now - started_ns >= PROBE_AFTER_NS) {
        t->waiting_for = waited;
        if (t->probed_wait != started_ns) {
            t->probed_wait = started_ns;
            probe_peers(t, reqs, n);
        }
    }
    if (now >= p2p->deadline_ns && t->peers[waited].state != PEER_ABSENT)
        fail_timeout(t, reqs, n);
    return k;
}

static pycoll_status_t tcp_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    tcp_transport_t *t = impl(p2p);
    /* Polling first saves the sleep/wake-up of a blocking epoll_wait (tens of microseconds, more than a small
     * message takes to arrive); it is only worth it while the ranks are not short of cores. */
    const int64_t started = pycoll_now_ns(), spin_until = started + p2p->spin_ns;
    int32_t blocked_on = WAIT_NOT_BLOCKED;
    while (p2p->status == PYCOLL_OK && !pycoll_all_complete(reqs, n)) {
        int64_t now = pycoll_now_ns(), left_ns = p2p->deadline_ns - now;
        /* Cap each sleep so a deadline is noticed promptly even without events. */
        int timeout_ms = left_ns <= 0 ? 0 : left_ns >= 100000000 ? 100 : (int)(left_ns / 1000000 + 1);
        const int spinning = now < spin_until;
        if (spinning)
            timeout_ms = 0;
        int k = wait_pass(t, reqs, n, started, timeout_ms);
        if (p2p->status != PYCOLL_OK)
            break;
        /* While polling, let a runnable process on this core (often the very peer being waited for) go first. */
        if (k == 0 && wait_tally_due(blocked_on, now, started))
            blocked_on = pycoll_first_pending_peer(reqs, n);
        if (spinning && k == 0)
            sched_yield();
        const int woken = t->woken;
        t->woken = 0;
        if ((woken || k < 0 || (k == 0 && timeout_ms > 0)) && idle_wait_interrupted(p2p))
            break;
    }
    wait_tally_end(blocked_on, started);
    t->waiting_for = -1;
    if (p2p->status != PYCOLL_OK) {
        tcp_abort(p2p, p2p->status, p2p->error);
        return p2p->status;
    }
    return PYCOLL_OK;
}

/* ops->progress (p2p.h): one pass of tcp_wait that never sleeps. */
static int tcp_progress(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, int64_t started_ns)
{
    tcp_transport_t *t = impl(p2p);
    if (p2p->status != PYCOLL_OK || t->epfd < 0)
        return 0;
    return wait_pass(t, reqs, n, started_ns, 0) > 0;
}

/* Send a control frame to every open peer. A frame cannot be cut into a half-sent message, so a partial send
 * is finished first (within a short deadline); peers that cannot be reached are left to notice the close. */
static void send_control_frames(tcp_transport_t *t, int kind, uint32_t tag, int32_t failed_rank, const char *text)
{
    int64_t deadline = pycoll_now_ns() + ABORT_DRAIN_NS;
    int64_t text_len = text ? (int64_t)strnlen(text, PYCOLL_ERROR_LEN - 1) : 0;
    for (int r = 0; r < t->base.size; r++) {
        tcp_peer_t *peer = &t->peers[r];
        pycoll_request_t *req = peer->q.send_head;
        const int partial = req && (peer->send_hdr_done > 0 || req->progress > 0 || tcp_stripes_sending(&peer->x, req));
        if (r == t->base.rank || peer->fd < 0 || peer->state == PEER_DEAD) {
            peer->cut_mid_frame |= partial; /* what it reads of this rank ends inside that frame */
            continue;
        }
        if (partial) {
            const int64_t end = first_part(peer, req->nbytes);
            if (tcp_write_all(peer->fd, (char *)&peer->send_hdr + peer->send_hdr_done,
                              (int64_t)sizeof(frame_header_t) - peer->send_hdr_done, deadline) != 0 ||
                tcp_write_all(peer->fd, (char *)req->buf + req->progress, end - req->progress, deadline) != 0 ||
                (end < req->nbytes && tcp_stripes_finish_send(&peer->x, req, req->buf, req->nbytes, deadline) != 0)) {
                peer->cut_mid_frame = 1;
                continue;
            }
        }
        frame_header_t h;
        fill_header(t, &h, kind, tag, text_len);
        h.failed_rank = failed_rank;
        if (tcp_write_all(peer->fd, &h, sizeof h, deadline) != 0 || (text_len && tcp_write_all(peer->fd, text, text_len,
                                                                                      deadline) != 0))
            peer->cut_mid_frame = 1;
    }
}

static void drop_queues(tcp_transport_t *t)
{
    pycoll_drop_queues(t->peers, sizeof *t->peers, t->base.size);
    for (int r = 0; r < t->base.size; r++)
        t->peers[r].x.tx = t->peers[r].x.rx = NULL;
}

static void tcp_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message)
{
    tcp_transport_t *t = impl(p2p);
    if (p2p->status == PYCOLL_OK)
        pycoll_p2p_fail(p2p, why, -1, "%s", message ? message : "aborted");
    /* Tell each peer once (the epoll fd doubles as the "not yet aborted" flag), so ranks that are not talking
     * to the failed one fail fast with the real reason instead of waiting for their deadline. */
    if (t->epfd >= 0) {
        send_control_frames(t, FRAME_ABORT, (uint32_t)p2p->status, p2p->failed_rank, p2p->error);
        close(t->epfd);
        t->epfd = -1;
    }
    /* What was being read is discarded on a reset: remember how much of its frame is left. */
    for (int r = 0; r < p2p->size; r++) {
        tcp_peer_t *peer = &t->peers[r];
        if (peer->state == PEER_OPEN && header_complete(peer) && peer->recv_hdr.kind == FRAME_DATA)
            skip_parked_frame(peer);
    }
    drop_queues(t);
}

/* Closing a socket with unread input makes the kernel send a reset, and a reset can destroy data the peer has
 * not read yet -- such as this rank's ABORT frame. So: send FIN, discard what the peers still send (after an
 * abort, for a short while, until they close too), then close. */
static void drain_and_close(tcp_transport_t *t, int aborted)
{
    char sink[4096];
    int64_t deadline = pycoll_now_ns() + (aborted ? ABORT_DRAIN_NS : 0);
    for (int r = 0; r < t->base.size; r++) {
        if (t->peers[r].fd >= 0)
            shutdown(t->peers[r].fd, SHUT_WR);
        tcp_stripes_shutdown(&t->peers[r].x, SHUT_WR);
    }
    for (int r = 0; r < t->base.size; r++) {
        int fd = t->peers[r].fd;
        if (fd < 0)
            continue;
        for (;;) {
            ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
            if (n > 0)
                continue;
            if (n < 0 && errno == EINTR)
                continue;
            int64_t left = deadline - pycoll_now_ns();
            if (n < 0 && errno == EAGAIN && left > 0) {
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                poll(&pfd, 1, (int)(left / 1000000 + 1));
                continue;
            }
            break;
        }
        close(fd);
        t->peers[r].fd = -1;
    }
    for (int r = 0; r < t->base.size; r++)
        tcp_stripes_close(&t->peers[r].x);
}

static int any_peer_open(const tcp_transport_t *t)
{
    for (int r = 0; r < t->base.size; r++)
        if (r != t->base.rank && t->peers[r].fd >= 0 && t->peers[r].state == PEER_OPEN)
            return 1;
    return 0;
}

static pycoll_status_t tcp_finalize(pycoll_p2p_t *p2p, int64_t deadline_ns)
{
    tcp_transport_t *t = impl(p2p);
    if (p2p->status != PYCOLL_OK || t->epfd < 0 || t->said_goodbye)
        return PYCOLL_OK;
    t->finalizing = 1;
    t->said_goodbye = 1;
    send_control_frames(t, FRAME_GOODBYE, 0, -1, NULL);
    drop_queues(t); /* only probes can be left; a peer that reads this far needs none */
    /* Input that arrived before: a parked header, or bytes read ahead whose epoll edge has passed. */
    for (int r = 0; r < p2p->size && p2p->status == PYCOLL_OK; r++) {
        tcp_peer_t *peer = &t->peers[r];
        if (r == p2p->rank || peer->fd < 0 || peer->state == PEER_DEAD)
            continue;
        if (peer->state == PEER_DEPARTED) {
            /* Its GOODBYE came during this rank's last collective (nothing is read after it). */
            if (!pycoll_same_desc(&peer->recv_hdr.desc, &p2p->desc))
                describe_mismatch(t, r, " at close");
        } else if (header_complete(peer)) {
            int consumed;
            on_header(t, r, &consumed);
        } else {
            peer->readable = 1;
            progress_recv(t, r);
        }
    }
    struct epoll_event events[64];
    while (p2p->status == PYCOLL_OK && any_peer_open(t)) {
        int64_t left_ns = deadline_ns - pycoll_now_ns();
        if (left_ns <= 0)
            break; /* peers still busy: they check this rank's GOODBYE when they close */
        int k = epoll_wait(t->epfd, events, 64, (int)(left_ns > 100000000LL ? 100 : left_ns / 1000000 + 1));
        if (k < 0 && errno != EINTR)
            break;
        if (p2p->check_interrupt && k <= 0 && p2p->check_interrupt(p2p->interrupt_ctx))
            break;
        on_events(t, events, k);
    }
    if (p2p->status != PYCOLL_ERR_MISMATCH)
        return PYCOLL_OK;
    tcp_abort(p2p, p2p->status, p2p->error); /* peers still in a collective learn why at once */
    return PYCOLL_ERR_MISMATCH;
}

static void tcp_destroy(pycoll_p2p_t *p2p)
{
    tcp_transport_t *t = impl(p2p);
    if (p2p->status == PYCOLL_OK && !t->said_goodbye) {
        /* A clean close: peers that are done with this rank stay calm when its sockets close. */
        send_control_frames(t, FRAME_GOODBYE, 0, -1, NULL);
    }
    drain_and_close(t, p2p->status != PYCOLL_OK);
    if (t->epfd >= 0)
        close(t->epfd);
    if (t->wakefd >= 0)
        close(t->wakefd);
    for (int r = 0; r < t->base.size; r++)
        free(t->peers[r].inbuf);
    free(t->peers);
    free(t);
}

static const pycoll_p2p_ops_t tcp_ops = PYCOLL_P2P_OPS(tcp, "tcp", .finalize = tcp_finalize, .progress = tcp_progress);

int tcp_transport_wait_fd(const pycoll_p2p_t *p2p)
{
    /* The epoll set itself: its descriptor polls readable while an event waits in it. */
    return p2p->ops == &tcp_ops ? ((const tcp_transport_t *)p2p)->epfd : -1;
}

pycoll_p2p_t *pycoll_tcp_transport_create(int32_t rank, int32_t size, const int *fds, char *error,
                                          size_t error_len)
{
    return tcp_transport_create_striped(rank, size, 1, fds, error, error_len);
}

pycoll_p2p_t *tcp_transport_create_striped(int32_t rank, int32_t size, int streams, const int *fds, char *error,
                                           size_t error_len)
{
    if (streams < 1 || streams > TCP_MAX_STREAMS) {
        snprintf(error, error_len, "%d connections per pair of ranks: expected 1 to %d", streams, TCP_MAX_STREAMS);
        return NULL;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        snprintf(error, error_len, "invalid rank %d for world size %d", (int)rank, (int)size);
        return NULL;
    }
    tcp_transport_t *t = calloc(1, sizeof *t);
    tcp_peer_t *peers = calloc((size_t)size, sizeof *peers);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!t || !peers || epfd < 0) {
        snprintf(error, error_len, "cannot create the TCP transport: %s", strerror(errno ? errno : ENOMEM));
        free(t);
        free(peers);
        if (epfd >= 0)
            close(epfd);
        return NULL;
    }
    t->base.ops = &tcp_ops;
    t->base.rank = rank;
    t->base.size = size;
    t->base.failed_rank = -1;
    t->epfd = epfd;
    t->peers = peers;
    t->waiting_for = -1;
    t->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ft_watch_wakefd(t);
    for (int r = 0; r < size; r++) {
        peers[r].fd = r == rank ? -1 : fds[r];
        peers[r].x.n = peers[r].fd < 0 ? 1 : streams;
        for (int k = 1; k < TCP_MAX_STREAMS; k++)
            peers[r].x.s[k].fd = k < peers[r].x.n ? fds[(size_t)k * (size_t)size + (size_t)r] : -1;
        if (peers[r].fd < 0) {
            if (r != rank)
                peers[r].state = PEER_ABSENT; /* reached over another transport, or a world of one */
            continue;
        }
        int flags = fcntl(peers[r].fd, F_GETFL, 0);
        struct epoll_event ev = {.events = PEER_EVENTS, .data.u32 = (uint32_t)r};
        peers[r].inbuf = malloc(INBUF_BYTES);
        peers[r].readable = 1;
        if (!peers[r].inbuf || flags < 0 || fcntl(peers[r].fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
            epoll_ctl(epfd, EPOLL_CTL_ADD, peers[r].fd, &ev) < 0 || tcp_stripes_watch(&peers[r].x, epfd, r, PEER_EVENTS) < 0) {
            snprintf(error, error_len, "socket for rank %d is unusable: %s", r,
                     peers[r].inbuf ? strerror(errno) : "out of memory");
            for (int q = 0; q < size; q++) { /* the caller still owns the sockets on failure */
                peers[q].fd = -1;
                peers[q].x.n = 1;
            }
            tcp_destroy(&t->base);
            return NULL;
        }
    }
    return &t->base;
}

/* ---- fault tolerance (transport/ft_reset.h) ---- */

/* A header while this peer's stream is being resynchronised, or a RECOVER: frames before the peer's RECOVER of
 * the awaited epoch are passed over; a RECOVER read outside a reset means the peer left the epoch this rank is
 * in (an error only if this rank still needs it, as a goodbye). */
static pycoll_status_t ft_on_header(tcp_transport_t *t, int r, int *consumed)
{
    tcp_peer_t *peer = &t->peers[r];
    const frame_header_t *h = &peer->recv_hdr;
    *consumed = 1;
    if (h->nbytes < 0)
        return peer_lost(t, r, "sent a corrupt frame");
    if (peer->resync) {
        if (h->kind == FRAME_RECOVER && h->tag == peer->resync) {
            peer->resync = 0;
        } else if (h->kind == FRAME_DATA) {
            peer->recv_body_done = 0;
            skip_parked_frame(peer);
        } else {
            peer->skip = h->nbytes;
        }
        return PYCOLL_OK;
    }
    peer->moved_to = h->tag;
    peer->state = PEER_DEAD;
    peer->resumable = 1;
    peer->recv_hdr_done = 0;
    unwatch(t, peer);
    if (!peer->q.recv_head && !peer->q.send_head)
        return PYCOLL_OK;
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r, "rank %d left this collective: it is agreeing or "
                           "shrinking after a failure or a revoke (rank %d noticed)", r, (int)t->base.rank);
}

/* Read past some of a discarded frame's payload: 0 when nothing could be read now. */
static int ft_skip(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    if (buffered(peer) == 0 && fill_inbuf(t, r, "closed its connection (process exited or was killed?)") == 0)
        return 0;
    const int64_t n = buffered(peer) < peer->skip ? buffered(peer) : peer->skip;
    peer->in_start += n;
    peer->skip -= n;
    return 1;
}

int tcp_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r)
{
    const peer_state_t state = impl(p2p)->peers[r].state;
    return state == PEER_DEAD || state == PEER_DEPARTED;
}

static void ft_watch_wakefd(tcp_transport_t *t)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = WAKE_EVENT};
    if (t->wakefd >= 0 && epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->wakefd, &ev) < 0) {
        close(t->wakefd); /* no quick wake-up: waits still check every 100 ms */
        t->wakefd = -1;
    }
}

/* From any thread: the wait in progress wakes and runs its interrupt check. */
void tcp_ft_wake(pycoll_p2p_t *p2p)
{
    tcp_transport_t *t = impl(p2p);
    const uint64_t one = 1;
    if (t->wakefd >= 0)
        (void)!write(t->wakefd, &one, sizeof one);
}

/* Edge-triggered events that came with an error were not acted on (on_events stops at the first error), and
 * they do not come again: read every open peer as if each had one. */
void tcp_ft_rearm(pycoll_p2p_t *p2p)
{
    tcp_transport_t *t = impl(p2p);
    for (int r = 0; r < p2p->size && p2p->status == PYCOLL_OK; r++) {
        if (r == p2p->rank || t->peers[r].state != PEER_OPEN)
            continue;
        t->peers[r].readable = 1;
        for (int k = 1; k < t->peers[r].x.n; k++)
            t->peers[r].x.s[k].readable = 1;
        progress_send(t, r);
        progress_recv(t, r);
    }
}

void tcp_ft_cut(pycoll_p2p_t *p2p, int32_t r)
{
    tcp_transport_t *t = impl(p2p);
    tcp_peer_t *peer = &t->peers[r];
    if (peer->state == PEER_ABSENT)
        return;
    if (peer->fd >= 0) {
        if (t->epfd >= 0)
            unwatch(t, peer);
        /* A goodbye first, where the stream is between frames: a peer still finishing the collective before
         * (a healthy rank left out) completes it, and fails only where it needs this rank again. */
        const pycoll_request_t *req = peer->q.send_head;
        if (peer->state == PEER_OPEN &&
            !(req && (peer->send_hdr_done > 0 || req->progress > 0 || tcp_stripes_sending(&peer->x, req)))) {
            frame_header_t h;
            fill_header(t, &h, FRAME_GOODBYE, 0, 0);
            (void)!send(peer->fd, &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        shutdown(peer->fd, SHUT_RDWR); /* then end-of-stream: this rank is gone for it */
        tcp_stripes_shutdown(&peer->x, SHUT_RDWR);
    }
    peer->state = PEER_DEAD;
    peer->resumable = 0;
}

pycoll_status_t tcp_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost)
{
    tcp_transport_t *t = impl(p2p);
    if (t->said_goodbye)
        return PYCOLL_ERR_UNSUPPORTED; /* finalized: the peers were told this rank is done */
    drop_queues(t);
    if (t->epfd < 0) {
        if ((t->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
            return pycoll_p2p_fail(p2p, PYCOLL_ERR_SYSTEM, -1, "epoll_create1: %s", strerror(errno));
        ft_watch_wakefd(t);
    }
    pycoll_ft_clear_error(p2p);
    t->waiting_for = -1;
    t->checked_slot = 0;
    t->probed_wait = 0;
    for (int r = 0; r < p2p->size; r++) {
        tcp_peer_t *peer = &t->peers[r];
        if (r == p2p->rank || peer->state == PEER_ABSENT)
            continue;
        const int resumable = peer->state == PEER_OPEN || (peer->state == PEER_DEAD && peer->resumable);
        if (lost[r] || peer->fd < 0 || peer->cut_mid_frame || !resumable) {
            lost[r] = 1;
            tcp_ft_cut(p2p, r);
            continue;
        }
        if (peer->moved_to == epoch) {
            peer->resync = 0; /* its RECOVER was read already: what follows is this epoch's */
        } else {
            peer->resync = epoch;
            if (header_complete(peer)) { /* an earlier epoch's frame, never received */
                if (peer->recv_hdr.kind == FRAME_DATA) {
                    skip_parked_frame(peer);
                } else {
                    peer->skip = 0;
                    peer->recv_hdr_done = 0;
                }
            }
        }
        peer->moved_to = 0;
        peer->state = PEER_OPEN;
        peer->resumable = 0;
        peer->readable = 1;
        struct epoll_event ev = {.events = PEER_EVENTS, .data.u32 = (uint32_t)r};
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, peer->fd, NULL);
        if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, peer->fd, &ev) < 0 || tcp_stripes_watch(&peer->x, t->epfd, r, PEER_EVENTS) < 0) {
            lost[r] = 1;
            tcp_ft_cut(p2p, r);
            continue;
        }
        peer->recover = (pycoll_request_t){.peer = r, .is_send = 1, .tag = epoch};
        pycoll_enqueue(&peer->q.send_head, &peer->q.send_tail, &peer->recover);
        progress_send(t, r);
        if (p2p->status != PYCOLL_OK) { /* gone since: a reset or write error */
            pycoll_ft_clear_error(p2p);
            lost[r] = 1;
            tcp_ft_cut(p2p, r);
        }
    }
    return PYCOLL_OK;
}
