/* The extra connections of a TCP peer pair (tcp_stripes.h): cutting a frame into parts and moving the parts. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pycoll/p2p.h"
#include "transport/tcp_stripes.h"

#define CLOSED_WHY "closed a connection mid-message (process exited or was killed?)"

void tcp_stripe_part(int64_t nbytes, int n, int k, int64_t *off, int64_t *len)
{
    if (n <= 1 || nbytes < TCP_STRIPE_MIN_BYTES) {
        *off = 0;
        *len = k == 0 ? nbytes : 0;
        return;
    }
    /* Parts of whole cache lines, so that no two connections write into the same line of the receive buffer. */
    int64_t part = ((nbytes + n - 1) / n + 63) / 64 * 64;
    *off = (int64_t)k * part < nbytes ? (int64_t)k * part : nbytes;
    *len = nbytes - *off < part ? nbytes - *off : part;
}

int64_t tcp_stripe_first(int64_t nbytes, int n)
{
    int64_t off, len;
    tcp_stripe_part(nbytes, n, 0, &off, &len);
    return len;
}

/* send or recv on connection k: the bytes moved, 0 when the socket has no room or input now, -1 on failure. */
static int64_t move(tcp_stream_t *c, int sending, char *p, int64_t len, const char **why)
{
    ssize_t n = sending ? send(c->fd, p, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(c->fd, p, (size_t)len, MSG_DONTWAIT);
    if (n > 0) {
        if (!sending && n < len)
            c->readable = 0; /* drained: the next input comes with a new edge */
        return n;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!sending && errno != EINTR)
            c->readable = 0;
        return 0;
    }
    *why = n == 0 || errno == EPIPE || errno == ECONNRESET ? CLOSED_WHY : strerror(errno);
    return -1;
}

/* Read past discarded bytes on connection c: 1 when none are left, 0 when more are to come, -1 on failure. */
static int skip_past(tcp_stream_t *c, const char **why)
{
    char sink[16384];
    while (c->skip > 0 && c->readable) {
        int64_t n = move(c, 0, sink, c->skip < (int64_t)sizeof sink ? c->skip : (int64_t)sizeof sink, why);
        if (n < 0)
            return -1;
        c->skip -= n;
    }
    return c->skip == 0;
}

static int stripes_move(tcp_stripes_t *x, int sending, const void *req, char *buf, int64_t nbytes, const char **why)
{
    const void **active = sending ? &x->tx : &x->rx;
    if (*active != req) { /* a new frame this way: the other way's may be midway, its count stays */
        *active = req;
        for (int k = 1; k < x->n; k++)
            *(sending ? &x->s[k].sent : &x->s[k].got) = 0;
    }
    int all = 1;
    for (int k = 1; k < x->n; k++) {
        tcp_stream_t *c = &x->s[k];
        int64_t off, len, *done = sending ? &c->sent : &c->got;
        tcp_stripe_part(nbytes, x->n, k, &off, &len);
        if (!sending) {
            int s = skip_past(c, why);
            if (s < 0)
                return -1;
            if (s == 0) {
                all = 0;
                continue;
            }
        }
        while (*done < len && (sending || c->readable)) {
            int64_t n = move(c, sending, buf + off + *done, len - *done, why);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            *done += n;
        }
        all &= *done == len;
    }
    return all;
}

int tcp_stripes_send(tcp_stripes_t *x, const void *req, const char *buf, int64_t nbytes, const char **why)
{
    return stripes_move(x, 1, req, (char *)buf, nbytes, why);
}

int tcp_stripes_recv(tcp_stripes_t *x, const void *req, char *buf, int64_t nbytes, const char **why)
{
    return stripes_move(x, 0, req, buf, nbytes, why);
}

int tcp_stripes_sending(const tcp_stripes_t *x, const void *req)
{
    if (!req || x->tx != req)
        return 0;
    for (int k = 1; k < x->n; k++)
        if (x->s[k].sent > 0)
            return 1;
    return 0;
}

void tcp_stripes_skip_frame(tcp_stripes_t *x, int64_t nbytes, int matched)
{
    for (int k = 1; k < x->n; k++) {
        int64_t off, len;
        tcp_stripe_part(nbytes, x->n, k, &off, &len);
        x->s[k].skip += len - (matched ? x->s[k].got : 0);
    }
    x->rx = NULL;
}

int tcp_stripes_finish_send(tcp_stripes_t *x, const void *req, const char *buf, int64_t nbytes, int64_t deadline)
{
    for (int k = 1; k < x->n; k++) {
        tcp_stream_t *c = &x->s[k];
        int64_t off, len, done = x->tx == req ? c->sent : 0;
        tcp_stripe_part(nbytes, x->n, k, &off, &len);
        if (c->fd < 0 || tcp_write_all(c->fd, buf + off + done, len - done, deadline) != 0)
            return -1;
        c->sent = len;
    }
    return 0;
}

int tcp_stripes_closed(const tcp_stripes_t *x, int k)
{
    char byte;
    ssize_t n = recv(x->s[k].fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int tcp_stripes_watch(tcp_stripes_t *x, int epfd, int r, uint32_t events)
{
    for (int k = 1; k < x->n; k++) {
        struct epoll_event ev = {.events = events, .data.u32 = tcp_stripe_event(r, k)};
        epoll_ctl(epfd, EPOLL_CTL_DEL, x->s[k].fd, NULL);
        if (x->s[k].fd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, x->s[k].fd, &ev) < 0)
            return -1;
        x->s[k].readable = 1;
    }
    return 0;
}

void tcp_stripes_unwatch(tcp_stripes_t *x, int epfd)
{
    for (int k = 1; k < x->n; k++)
        if (x->s[k].fd >= 0 && epfd >= 0)
            epoll_ctl(epfd, EPOLL_CTL_DEL, x->s[k].fd, NULL);
}

void tcp_stripes_shutdown(tcp_stripes_t *x, int how)
{
    for (int k = 1; k < x->n; k++)
        if (x->s[k].fd >= 0)
            shutdown(x->s[k].fd, how);
}

void tcp_stripes_close(tcp_stripes_t *x)
{
    char sink[4096];
    for (int k = 1; k < x->n; k++) {
        if (x->s[k].fd < 0)
            continue;
        while (recv(x->s[k].fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
            ;
        close(x->s[k].fd);
        x->s[k].fd = -1;
    }
}

int tcp_write_all(int fd, const void *buf, int64_t len, int64_t deadline)
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
