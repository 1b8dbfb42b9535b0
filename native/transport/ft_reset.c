/* pycoll_ft_reset, pycoll_ft_cut and the rest (transport/ft_reset.h): each transport that can start over has its
 * own, picked by ops->name. */
#include <string.h>

#include "transport/ft_reset.h"
#include "transport/shm_transport.h"

/* One transport's fault-tolerance functions, found by its ops->name. */
typedef struct {
    const char *name;
    pycoll_status_t (*reset)(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost);
    void (*cut)(pycoll_p2p_t *p2p, int32_t r);
    int (*peer_gone)(pycoll_p2p_t *p2p, int32_t r);
    void (*wake)(pycoll_p2p_t *p2p);
} ft_kind_t;

#define FT_KIND(kind) {#kind, kind##_ft_reset, kind##_ft_cut, kind##_ft_peer_gone, kind##_ft_wake},
static const ft_kind_t ft_kinds[] = {PYCOLL_FT_TRANSPORTS(FT_KIND)};
#undef FT_KIND

static const ft_kind_t *ft_kind_of(const pycoll_p2p_t *p2p)
{
    for (size_t i = 0; i < sizeof ft_kinds / sizeof ft_kinds[0]; i++)
        if (strcmp(p2p->ops->name, ft_kinds[i].name) == 0)
            return &ft_kinds[i];
    return NULL;
}

int pycoll_ft_can_reset(const pycoll_p2p_t *p2p)
{
    return ft_kind_of(p2p) != NULL;
}

pycoll_status_t pycoll_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost)
{
    const ft_kind_t *kind = ft_kind_of(p2p);
    return kind ? kind->reset(p2p, epoch, lost) : PYCOLL_ERR_UNSUPPORTED;
}

void pycoll_ft_cut(pycoll_p2p_t *p2p, int32_t r)
{
    const ft_kind_t *kind = ft_kind_of(p2p);
    if (kind && r >= 0 && r < p2p->size && r != p2p->rank)
        kind->cut(p2p, r);
}

int pycoll_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r)
{
    const ft_kind_t *kind = ft_kind_of(p2p);
    return kind ? kind->peer_gone(p2p, r) : 0;
}

void pycoll_ft_wake(pycoll_p2p_t *p2p)
{
    const ft_kind_t *kind = ft_kind_of(p2p);
    if (kind)
        kind->wake(p2p);
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
