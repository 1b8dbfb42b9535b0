/* The extra connections of one TCP peer pair (PYCOLL_TCP_STREAMS): a large data frame's payload is cut into
 * contiguous parts, one per connection. Part 0 follows the frame header on the pair's first connection
 * (tcp_transport.c); part k goes, bare, on extra connection k. Both ends cut alike from the length the header
 * carries (the receive only starts once that header matched it), and each connection carries its parts in
 * the order of the frames, so the parts need no header of their own: the length, descriptor and mismatch
 * checks all stay on the first connection, and a small frame uses only that one. */
#ifndef PYCOLL_TRANSPORT_TCP_STRIPES_H
#define PYCOLL_TRANSPORT_TCP_STRIPES_H

#include <stdint.h>

#define TCP_MAX_STREAMS 8
/* Frames from this size are striped: below it one connection already moves a frame in about a round trip. */
#define TCP_STRIPE_MIN_BYTES (256 * 1024)

typedef struct tcp_stream {
    int fd;
    int readable;       /* may hold unread input (its edge-triggered epoll event came, no read came up short) */
    int64_t sent, got;  /* bytes of the frame in progress each way: of this connection's part */
    int64_t skip;       /* bytes of discarded frames (an abort, a reset) still to read past */
} tcp_stream_t;

typedef struct tcp_stripes {
    int n;                     /* connections in all, the first included (1: no striping) */
    tcp_stream_t s[TCP_MAX_STREAMS]; /* s[0] is unused: the first connection is the peer's own */
    const void *tx, *rx;       /* the requests whose parts are moving on the extra connections, else NULL */
} tcp_stripes_t;

/* Part k of a frame of nbytes over n connections: [*off, *off + *len). */
void tcp_stripe_part(int64_t nbytes, int n, int k, int64_t *off, int64_t *len);
/* The length of part 0, the part that follows the header on the first connection. */
int64_t tcp_stripe_first(int64_t nbytes, int n);

/* Move the extra parts of request req (buf, nbytes) as far as the sockets allow: 1 when every extra part is
 * through, 0 when more is to come, -1 when a connection closed or failed (*why says how). */
int tcp_stripes_send(tcp_stripes_t *x, const void *req, const char *buf, int64_t nbytes, const char **why);
int tcp_stripes_recv(tcp_stripes_t *x, const void *req, char *buf, int64_t nbytes, const char **why);
/* Whether any extra part of the frame being sent went out already (it cannot be cut off there). */
int tcp_stripes_sending(const tcp_stripes_t *x, const void *req);
/* A frame of nbytes being passed over on the receiving side (matched: its receive had started): what its
 * extra parts still hold is read past before the next frame's. */
void tcp_stripes_skip_frame(tcp_stripes_t *x, int64_t nbytes, int matched);
/* Writes what is left of req's extra parts before the deadline (the abort path); -1 when it could not. */
int tcp_stripes_finish_send(tcp_stripes_t *x, const void *req, const char *buf, int64_t nbytes, int64_t deadline);
/* Whether extra connection k is closed at the other end (after a hang-up event). */
int tcp_stripes_closed(const tcp_stripes_t *x, int k);

/* epoll: extra connection k of rank r is registered with data.u32 = tcp_stripe_event(r, k). */
#define TCP_STREAM_SHIFT 24
static inline uint32_t tcp_stripe_event(int r, int k) { return (uint32_t)r | (uint32_t)k << TCP_STREAM_SHIFT; }
int tcp_stripes_watch(tcp_stripes_t *x, int epfd, int r, uint32_t events);
void tcp_stripes_unwatch(tcp_stripes_t *x, int epfd);
void tcp_stripes_shutdown(tcp_stripes_t *x, int how);
/* Discards pending input (without waiting) and closes the extra connections. */
void tcp_stripes_close(tcp_stripes_t *x);

/* Blocking write with a deadline (the abort path): 0 when all of it went. */
int tcp_write_all(int fd, const void *buf, int64_t len, int64_t deadline);

#endif
