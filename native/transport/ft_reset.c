/* pycoll_ft_reset and pycoll_ft_cut (transport/ft_reset.h): each transport that can start over has its own. */
#include <string.h>

#include "transport/ft_reset.h"
#include "transport/shm_transport.h"

int pycoll_ft_can_reset(const pycoll_p2p_t *p2p)
{
    const char *name = p2p->ops->name;
    return strcmp(name, "tcp") == 0 || strcmp(name, "shm") == 0 || strcmp(name, "routed") == 0;
}

pycoll_status_t pycoll_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost)
{
    const char *name = p2p->ops->name;
    if (strcmp(name, "tcp") == 0)
        return tcp_ft_reset(p2p, epoch, lost);
    if (strcmp(name, "shm") == 0)
        return shm_ft_reset(p2p, epoch, lost);
    if (strcmp(name, "routed") == 0)
        return routed_ft_reset(p2p, epoch, lost);
    return PYCOLL_ERR_UNSUPPORTED;
}

void pycoll_ft_cut(pycoll_p2p_t *p2p, int32_t r)
{
    if (r < 0 || r >= p2p->size || r == p2p->rank)
        return;
    if (strcmp(p2p->ops->name, "tcp") == 0)
        tcp_ft_cut(p2p, r);
    else if (strcmp(p2p->ops->name, "shm") == 0)
        shm_ft_cut(p2p, r);
    else if (strcmp(p2p->ops->name, "routed") == 0)
        routed_ft_cut(p2p, r);
}

int pycoll_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r)
{
    if (strcmp(p2p->ops->name, "tcp") == 0)
        return tcp_ft_peer_gone(p2p, r);
    if (strcmp(p2p->ops->name, "shm") == 0)
        return shm_ft_peer_gone(p2p, r);
    if (strcmp(p2p->ops->name, "routed") == 0)
        return routed_ft_peer_gone(p2p, r);
    return 0;
}

void pycoll_ft_wake(pycoll_p2p_t *p2p)
{
    if (strcmp(p2p->ops->name, "tcp") == 0)
        tcp_ft_wake(p2p);
    else if (strcmp(p2p->ops->name, "shm") == 0)
        shm_ft_wake(p2p);
    else if (strcmp(p2p->ops->name, "routed") == 0)
        routed_ft_wake(p2p);
}

void pycoll_ft_poll(pycoll_p2p_t *p2p)
{
    if (p2p->status != PYCOLL_OK)
        return;
    if (strcmp(p2p->ops->name, "shm") == 0)
        shm_poll_peers((shm_transport_t *)p2p);
    else if (strcmp(p2p->ops->name, "routed") == 0)
        routed_ft_poll(p2p);
}

void pycoll_ft_clear_error(pycoll_p2p_t *p2p)
{
    p2p->status = PYCOLL_OK;
    p2p->failed_rank = -1;
    p2p->error[0] = 0;
}

void pycoll_ft_resume(pycoll_p2p_t *p2p)
{
    if (strcmp(p2p->ops->name, "routed") == 0) {
        routed_ft_resume(p2p); /* each child resumes as its own kind does */
        return;
    }
    pycoll_ft_clear_error(p2p);
    if (strcmp(p2p->ops->name, "tcp") == 0)
        tcp_ft_rearm(p2p); /* shared memory polls every ring on every pass: nothing is left behind there */
}
