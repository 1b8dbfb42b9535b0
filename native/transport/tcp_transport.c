/* TCP transport: pycoll_p2p_t over one stream socket per peer (a full mesh), driven by epoll.
 *
 * Why a full mesh and not only ring neighbours: every rank watches every peer's socket while it waits, so a
 * peer that dies (kill -9 closes its sockets) is seen by all ranks at once, not just its neighbours, and a
 * rank that gives up can tell everyone why with an ABORT frame.
 *
 * Wire format: each message is a frame header followed by nbytes of payload. Input is read ahead into a
 * per-peer buffer, so a small frame (header + payload) costs one recv; a payload of at least that buffer's
 * size is read straight into the caller's buffer instead (no copy where copies would cost). The header
 * carries the collective's descriptor so a receiver can tell a peer that called a different collective
 * (PYCOLL_ERR_MISMATCH, naming both) instead of hanging.
 * Sockets arrive connected and authenticated (pycoll/mesh.py); this file only moves bytes. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "pycoll/transports.h"

#define FRAME_MAGIC 0x50434c31u /* "PCL1" */
#define ABORT_DRAIN_NS 200000000LL /* how long an aborting rank tries to get its reason out */
#define INBUF_BYTES (64 * 1024) /* per-peer read-ahead: larger payloads bypass it */

enum frame_kind { FRAME_DATA = 1, FRAME_ABORT = 2, FRAME_GOODBYE = 3 };

typedef struct frame_header {
    uint32_t magic;
    uint32_t tag;    /* DATA: the message tag; ABORT: the pycoll_status_t */
    int64_t nbytes;  /* payload bytes (ABORT: the message text) */
    int32_t kind;
    int32_t failed_rank; /* ABORT: the rank the error is about */
    pycoll_coll_desc_t desc;
} frame_header_t;

typedef enum peer_state { PEER_OPEN, PEER_DEPARTED, PEER_DEAD } peer_state_t;

typedef struct tcp_peer {
    int fd;
    peer_state_t state;
    /* sending */
    pycoll_request_t *send_head, *send_tail;
    frame_header_t send_hdr;
    int64_t send_hdr_done; /* bytes of send_hdr already written for send_head */
    /* receiving */
    pycoll_request_t *recv_head, *recv_tail;
    frame_header_t recv_hdr;
    int64_t recv_hdr_done; /* == sizeof(frame_header_t) once a header is parked, waiting for its recv */
    char *inbuf;           /* INBUF_BYTES of read-ahead; bytes [in_start, in_end) are not consumed yet */
    int64_t in_start, in_end;
    int readable;          /* the socket may hold unread input (epoll said so and no recv came up short) */
} tcp_peer_t;

typedef struct tcp_transport {
    pycoll_p2p_t base;
    int epfd;
    int64_t spin_ns; /* how long a wait polls before it sleeps in epoll_wait */
    tcp_peer_t *peers;
} tcp_transport_t;

static tcp_transport_t *impl(pycoll_p2p_t *p2p) { return (tcp_transport_t *)p2p; }

static int header_complete(const tcp_peer_t *peer) { return peer->recv_hdr_done == (int64_t)sizeof(frame_header_t); }

/* Sockets are registered once, edge-triggered, for input, output and hang-ups: no epoll_ctl per message. An
 * edge is not repeated, so `readable` remembers input that was left in the socket (read-ahead full, no
 * receive posted) until a receive is posted. */
#define PEER_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

static int64_t buffered(const tcp_peer_t *peer) { return peer->in_end - peer->in_start; }

static pycoll_status_t peer_lost(tcp_transport_t *t, int r, const char *why)
{
    tcp_peer_t *peer = &t->peers[r];
    peer->state = PEER_DEAD;
    if (peer->fd >= 0)
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, peer->fd, NULL);
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r, "rank %d %s (rank %d noticed)", r, why,
                           (int)t->base.rank);
}

static pycoll_status_t describe_mismatch(tcp_transport_t *t, int r, const char *what)
{
    char mine[160], theirs[160];
    pycoll_describe_coll(&t->base.desc, mine, sizeof mine);
    pycoll_describe_coll(&t->peers[r].recv_hdr.desc, theirs, sizeof theirs);
    return pycoll_p2p_fail(&t->base, PYCOLL_ERR_MISMATCH, r, "collective mismatch%s: rank %d called %s, but rank %d called %s",
                           what, (int)t->base.rank, mine, r, theirs);
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
    uint32_t status = peer->recv_hdr.tag;
    /* A peer that was interrupted (or sent nonsense) has, for this rank, simply gone away. */
    if (status == PYCOLL_OK || status >= PYCOLL_ERR_INTERRUPTED)
        status = PYCOLL_ERR_PEER_FAILURE;
    peer->state = PEER_DEAD;
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, peer->fd, NULL);
    /* A peer that aborted because of a peer failure names the failed rank; otherwise the aborting rank. */
    int32_t failed = peer->recv_hdr.failed_rank >= 0 ? peer->recv_hdr.failed_rank : r;
    return pycoll_p2p_fail(&t->base, (pycoll_status_t)status, failed, "%s (reported by rank %d)",
                           got ? text : "peer aborted", r);
}

/* A header is complete: decide what it is. Returns non-OK on error. */
static pycoll_status_t on_header(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    const frame_header_t *h = &peer->recv_hdr;
    if (h->magic != FRAME_MAGIC)
        return peer_lost(t, r, "sent a corrupt frame");
    if (h->kind == FRAME_ABORT)
        return adopt_abort(t, r);
    if (h->kind == FRAME_GOODBYE) {
        /* A clean close: only an error if this rank still needs the peer. */
        peer->state = PEER_DEPARTED;
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, peer->fd, NULL);
        if (peer->recv_head || peer->send_head)
            return pycoll_p2p_fail(&t->base, PYCOLL_ERR_PEER_FAILURE, r,
                                   "rank %d closed its communicator while rank %d still expected data from it",
                                   r, (int)t->base.rank);
        return PYCOLL_OK;
    }
    if (h->kind != FRAME_DATA || h->nbytes < 0)
        return peer_lost(t, r, "sent a corrupt frame");
    /* Same collective number but a different collective: the ranks disagree. A later number just means the
     * peer is ahead; the header stays parked until this rank gets there. */
    if (h->desc.seq == t->base.desc.seq && memcmp(&h->desc, &t->base.desc, sizeof h->desc) != 0)
        return describe_mismatch(t, r, "");
    if (h->desc.seq < t->base.desc.seq)
        return describe_mismatch(t, r, " (stale message)");
    return PYCOLL_OK;
}

/* Match a parked header against the posted receive at the head of the queue. */
static pycoll_status_t match_header(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    const frame_header_t *h = &peer->recv_hdr;
    pycoll_request_t *req = peer->recv_head;
    if (memcmp(&h->desc, &t->base.desc, sizeof h->desc) != 0)
        return describe_mismatch(t, r, "");
    if (h->tag != req->tag || h->nbytes != req->nbytes)
        return pycoll_p2p_fail(&t->base, PYCOLL_ERR_MISMATCH, r,
                               "message mismatch in %s: rank %d expected tag %u with %lld bytes from rank %d, "
                               "got tag %u with %lld bytes (ranks run different algorithms?)",
                               pycoll_algorithm_name((pycoll_algorithm_t)t->base.desc.algorithm),
                               (int)t->base.rank, req->tag, (long long)req->nbytes, r, h->tag,
                               (long long)h->nbytes);
    return PYCOLL_OK;
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
        if (!header_complete(peer)) {
            if (buffered(peer) < (int64_t)sizeof(frame_header_t)) {
                if (fill_inbuf(t, r, "closed its connection (process exited or was killed?)") == 0)
                    return t->base.status;
                continue;
            }
            memcpy(&peer->recv_hdr, peer->inbuf + peer->in_start, sizeof(frame_header_t));
            peer->in_start += (int64_t)sizeof(frame_header_t);
            peer->recv_hdr_done = sizeof(frame_header_t);
            pycoll_status_t st = on_header(t, r);
            if (st != PYCOLL_OK || peer->state != PEER_OPEN)
                return st;
        }
        pycoll_request_t *req = peer->recv_head;
        if (!req)
            return PYCOLL_OK; /* parked: wait for the matching receive to be posted */
        if (req->progress == 0) {
            pycoll_status_t st = match_header(t, r);
            if (st != PYCOLL_OK)
                return st;
        }
        const int64_t left = req->nbytes - req->progress;
        if (left > 0 && buffered(peer) > 0) {
            int64_t n = buffered(peer) < left ? buffered(peer) : left;
            memcpy((char *)req->buf + req->progress, peer->inbuf + peer->in_start, (size_t)n);
            peer->in_start += n;
            req->progress += n;
        } else if (left > 0) {
            static const char *mid = "closed its connection mid-message (process exited or was killed?)";
            int64_t n = left >= INBUF_BYTES ? read_socket(t, r, (char *)req->buf + req->progress, left, mid)
                                            : fill_inbuf(t, r, mid);
            if (n == 0)
                return t->base.status;
            if (left >= INBUF_BYTES)
                req->progress += n;
        }
        if (req->progress == req->nbytes) {
            req->complete = 1;
            peer->recv_head = req->next;
            if (!peer->recv_head)
                peer->recv_tail = NULL;
            peer->recv_hdr_done = 0;
        }
    }
}

static void fill_header(tcp_transport_t *t, frame_header_t *h, int kind, uint32_t tag, int64_t nbytes)
{
    memset(h, 0, sizeof *h);
    h->magic = FRAME_MAGIC;
    h->kind = kind;
    h->tag = tag;
    h->nbytes = nbytes;
    h->failed_rank = -1;
    h->desc = t->base.desc;
}

/* Write to peer r while the socket takes data. Header and payload go out in one sendmsg. */
static pycoll_status_t progress_send(tcp_transport_t *t, int r)
{
    tcp_peer_t *peer = &t->peers[r];
    while (peer->send_head) {
        if (peer->state == PEER_DEAD)
            return PYCOLL_OK; /* already reported */
        pycoll_request_t *req = peer->send_head;
        if (peer->send_hdr_done == 0 && req->progress == 0)
            fill_header(t, &peer->send_hdr, FRAME_DATA, req->tag, req->nbytes);
        struct iovec iov[2];
        int iovcnt = 0;
        if (peer->send_hdr_done < (int64_t)sizeof(frame_header_t)) {
            iov[iovcnt].iov_base = (char *)&peer->send_hdr + peer->send_hdr_done;
            iov[iovcnt++].iov_len = sizeof(frame_header_t) - (size_t)peer->send_hdr_done;
        }
        if (req->progress < req->nbytes) {
            iov[iovcnt].iov_base = (char *)req->buf + req->progress;
            iov[iovcnt++].iov_len = (size_t)(req->nbytes - req->progress);
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
        if (peer->send_hdr_done == (int64_t)sizeof(frame_header_t) && req->progress == req->nbytes) {
            req->complete = 1;
            peer->send_head = req->next;
            if (!peer->send_head)
                peer->send_tail = NULL;
            peer->send_hdr_done = 0;
        } else {
            return PYCOLL_OK; /* the socket is full */
        }
    }
    return PYCOLL_OK;
}

static pycoll_status_t tcp_post(pycoll_p2p_t *p2p, pycoll_request_t *req)
{
    tcp_transport_t *t = impl(p2p);
    if (p2p->status != PYCOLL_OK)
        return p2p->status;
    if (req->peer < 0 || req->peer >= p2p->size || req->peer == p2p->rank || req->nbytes < 0)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "invalid %s to rank %d of %lld bytes",
                               req->is_send ? "send" : "receive", (int)req->peer, (long long)req->nbytes);
    tcp_peer_t *peer = &t->peers[req->peer];
    if (peer->state == PEER_DEAD)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, req->peer, "rank %d is gone", (int)req->peer);
    if (peer->state == PEER_DEPARTED)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, req->peer,
                               "rank %d closed its communicator, but rank %d still needs it", (int)req->peer,
                               (int)p2p->rank);
    req->complete = 0;
    req->progress = 0;
    req->next = NULL;
    pycoll_request_t **head = req->is_send ? &peer->send_head : &peer->recv_head;
    pycoll_request_t **tail = req->is_send ? &peer->send_tail : &peer->recv_tail;
    if (*tail)
        (*tail)->next = req;
    else
        *head = req;
    *tail = req;
    /* Start right away: small messages usually go out (or are found waiting) without a trip through epoll. */
    return req->is_send ? progress_send(t, req->peer) : progress_recv(t, req->peer);
}

static int all_complete(pycoll_request_t *const *reqs, int n)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete)
            return 0;
    return 1;
}

static int first_pending_peer(pycoll_request_t *const *reqs, int n)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete)
            return reqs[i]->peer;
    return -1;
}

static void tcp_abort(pycoll_p2p_t *p2p, pycoll_status_t why, const char *message);

static pycoll_status_t tcp_wait(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n)
{
    tcp_transport_t *t = impl(p2p);
    struct epoll_event events[64];
    /* Polling first saves the sleep/wake-up of a blocking epoll_wait (tens of microseconds, more than a small
     * message takes to arrive); it is only worth it while the ranks are not short of cores. */
    const int64_t spin_until = pycoll_now_ns() + t->spin_ns;
    while (p2p->status == PYCOLL_OK && !all_complete(reqs, n)) {
        int64_t now = pycoll_now_ns();
        int64_t left_ns = p2p->deadline_ns - now;
        if (left_ns <= 0) {
            char what[160];
            pycoll_describe_coll(&p2p->desc, what, sizeof what);
            int waiting_for = first_pending_peer(reqs, n);
            pycoll_p2p_fail(p2p, PYCOLL_ERR_TIMEOUT, waiting_for,
                            "rank %d timed out in %s waiting for rank %d (is it stopped or overloaded?)",
                            (int)p2p->rank, what, waiting_for);
            break;
        }
        /* Cap each sleep so a deadline is noticed promptly even without events. */
        int timeout_ms = (int)(left_ns / 1000000 + 1);
        if (timeout_ms > 100)
            timeout_ms = 100;
        const int spinning = now < spin_until;
        if (spinning)
            timeout_ms = 0;
        int k = epoll_wait(t->epfd, events, 64, timeout_ms);
        /* While polling, let a runnable process on this core (often the very peer being waited for) go first. */
        if (spinning && k == 0)
            sched_yield();
        if (k < 0 && errno != EINTR) {
            pycoll_p2p_fail(p2p, PYCOLL_ERR_SYSTEM, -1, "epoll_wait: %s", strerror(errno));
            break;
        }
        if (p2p->check_interrupt && (k < 0 || (k == 0 && timeout_ms > 0)) &&
            p2p->check_interrupt(p2p->interrupt_ctx)) {
            pycoll_p2p_fail(p2p, PYCOLL_ERR_INTERRUPTED, -1, "rank %d was interrupted during a collective",
                            (int)p2p->rank);
            break;
        }
        for (int i = 0; i < k && p2p->status == PYCOLL_OK; i++) {
            int r = (int)events[i].data.u32;
            if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                t->peers[r].readable = 1;
                progress_recv(t, r);
            }
            if (p2p->status == PYCOLL_OK && (events[i].events & EPOLLOUT))
                progress_send(t, r);
        }
    }
    if (p2p->status != PYCOLL_OK) {
        tcp_abort(p2p, p2p->status, p2p->error);
        return p2p->status;
    }
    return PYCOLL_OK;
}

/* Blocking write with a deadline, for the abort path only. */
static int write_all(int fd, const void *buf, int64_t len, int64_t deadline)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        int64_t left = deadline - pycoll_now_ns();
        if (left <= 0)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        poll(&pfd, 1, (int)(left / 1000000 + 1));
    }
    return 0;
}

/* Send a control frame to every open peer. A frame cannot be cut into a half-sent message, so a partial send
 * is finished first (within a short deadline); peers that cannot be reached are left to notice the close. */
static void send_control_frames(tcp_transport_t *t, int kind, uint32_t tag, int32_t failed_rank, const char *text)
{
    int64_t deadline = pycoll_now_ns() + ABORT_DRAIN_NS;
    int64_t text_len = text ? (int64_t)strnlen(text, PYCOLL_ERROR_LEN - 1) : 0;
    for (int r = 0; r < t->base.size; r++) {
        tcp_peer_t *peer = &t->peers[r];
        if (r == t->base.rank || peer->fd < 0 || peer->state == PEER_DEAD)
            continue;
        pycoll_request_t *req = peer->send_head;
        if (req && (peer->send_hdr_done > 0 || req->progress > 0)) {
            if (write_all(peer->fd, (char *)&peer->send_hdr + peer->send_hdr_done,
                          (int64_t)sizeof(frame_header_t) - peer->send_hdr_done, deadline) != 0 ||
                write_all(peer->fd, (char *)req->buf + req->progress, req->nbytes - req->progress, deadline) != 0)
                continue;
        }
        frame_header_t h;
        fill_header(t, &h, kind, tag, text_len);
        h.failed_rank = failed_rank;
        if (write_all(peer->fd, &h, sizeof h, deadline) == 0 && text_len)
            write_all(peer->fd, text, text_len, deadline);
    }
}

static void drop_queues(tcp_transport_t *t)
{
    for (int r = 0; r < t->base.size; r++) {
        t->peers[r].send_head = t->peers[r].send_tail = NULL;
        t->peers[r].recv_head = t->peers[r].recv_tail = NULL;
    }
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
    drop_queues(t);
}

/* Closing a socket with unread input makes the kernel send a reset, and a reset can destroy data the peer has
 * not read yet -- such as this rank's ABORT frame. So: send FIN, discard what the peers still send (after an
 * abort, for a short while, until they close too), then close. */
static void drain_and_close(tcp_transport_t *t, int aborted)
{
    char sink[4096];
    int64_t deadline = pycoll_now_ns() + (aborted ? ABORT_DRAIN_NS : 0);
    for (int r = 0; r < t->base.size; r++)
        if (t->peers[r].fd >= 0)
            shutdown(t->peers[r].fd, SHUT_WR);
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
}

static void tcp_destroy(pycoll_p2p_t *p2p)
{
    tcp_transport_t *t = impl(p2p);
    if (p2p->status == PYCOLL_OK) {
        /* A clean close: peers that are done with this rank stay calm when its sockets close. */
        send_control_frames(t, FRAME_GOODBYE, 0, -1, NULL);
    }
    drain_and_close(t, p2p->status != PYCOLL_OK);
    if (t->epfd >= 0)
        close(t->epfd);
    for (int r = 0; r < t->base.size; r++)
        free(t->peers[r].inbuf);
    free(t->base.workspace);
    free(t->peers);
    free(t);
}

static const pycoll_p2p_ops_t tcp_ops = {
    .version = PYCOLL_P2P_VERSION,
    .name = "tcp",
    .post = tcp_post,
    .wait = tcp_wait,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
};

pycoll_p2p_t *pycoll_tcp_transport_create(int32_t rank, int32_t size, const int *fds, int64_t spin_ns, char *error,
                                          size_t error_len)
{
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
    t->spin_ns = spin_ns > 0 ? spin_ns : 0;
    t->peers = peers;
    for (int r = 0; r < size; r++) {
        peers[r].fd = r == rank ? -1 : fds[r];
        if (peers[r].fd < 0)
            continue;
        int flags = fcntl(peers[r].fd, F_GETFL, 0);
        struct epoll_event ev = {.events = PEER_EVENTS, .data.u32 = (uint32_t)r};
        peers[r].inbuf = malloc(INBUF_BYTES);
        peers[r].readable = 1;
        if (!peers[r].inbuf || flags < 0 || fcntl(peers[r].fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
            epoll_ctl(epfd, EPOLL_CTL_ADD, peers[r].fd, &ev) < 0) {
            snprintf(error, error_len, "socket for rank %d is unusable: %s", r,
                     peers[r].inbuf ? strerror(errno) : "out of memory");
            for (int q = 0; q < size; q++)
                peers[q].fd = -1; /* the caller still owns the sockets on failure */
            tcp_destroy(&t->base);
            return NULL;
        }
    }
    return &t->base;
}
