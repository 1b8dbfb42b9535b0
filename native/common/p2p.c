/* Transport-independent parts of the point-to-point interface: error recording and blocking helpers. */
#include <stdarg.h>
#include <time.h>

#include "common/error_format.h"
#include "pycoll/p2p.h"

int64_t pycoll_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

pycoll_status_t pycoll_p2p_fail(pycoll_p2p_t *p2p, pycoll_status_t status, int32_t failed_rank, const char *fmt,
                                ...)
{
    /* The first error is the cause; later ones are usually its consequences. */
    if (p2p->status != PYCOLL_OK)
        return p2p->status;
    va_list ap;
    va_start(ap, fmt);
    p2p->status = pycoll_vformat_error(p2p->error, sizeof p2p->error, status, fmt, ap);
    va_end(ap);
    p2p->failed_rank = failed_rank;
    return status;
}

pycoll_status_t pycoll_send(pycoll_p2p_t *p2p, int32_t peer, const void *buf, int64_t nbytes, uint32_t tag)
{
    pycoll_request_t req = {.buf = (void *)buf, .nbytes = nbytes, .peer = peer, .tag = tag, .is_send = 1};
    pycoll_request_t *reqs[1] = {&req};
    pycoll_status_t st = p2p->ops->post(p2p, &req);
    return st != PYCOLL_OK ? st : p2p->ops->wait(p2p, reqs, 1);
}

pycoll_status_t pycoll_recv(pycoll_p2p_t *p2p, int32_t peer, void *buf, int64_t nbytes, uint32_t tag)
{
    pycoll_request_t req = {.buf = buf, .nbytes = nbytes, .peer = peer, .tag = tag, .is_send = 0};
    pycoll_request_t *reqs[1] = {&req};
    pycoll_status_t st = p2p->ops->post(p2p, &req);
    return st != PYCOLL_OK ? st : p2p->ops->wait(p2p, reqs, 1);
}

pycoll_status_t pycoll_sendrecv(pycoll_p2p_t *p2p, int32_t send_peer, const void *send_buf, int64_t send_nbytes,
                                int32_t recv_peer, void *recv_buf, int64_t recv_nbytes, uint32_t tag)
{
    pycoll_request_t recv = {.buf = recv_buf, .nbytes = recv_nbytes, .peer = recv_peer, .tag = tag};
    pycoll_request_t send = {.buf = (void *)send_buf, .nbytes = send_nbytes, .peer = send_peer, .tag = tag,
                             .is_send = 1};
    pycoll_request_t *reqs[2] = {&recv, &send};
    pycoll_status_t st = p2p->ops->post(p2p, &recv);
    if (st == PYCOLL_OK)
        st = p2p->ops->post(p2p, &send);
    return st != PYCOLL_OK ? st : p2p->ops->wait(p2p, reqs, 2);
}
