/* The end of pycoll_comm_init_rank: the transport the job chose over the descriptors set-up opened, and the
 * communicator on it, with its spin default. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/init_rank.h"
#include "common/error_format.h"
#include "pycoll/transports.h"
#include "transport/tcp_transport.h"

/* How long a wait polls before it sleeps, by how many of this machine's ranks share each core. A rank with a core
 * of its own loses nothing by polling. Where a few ranks more than cores share them, a short poll still catches
 * most messages (the peer is often running on the other core) and saves a sleep's wake-up. Where ranks are twice
 * the cores or more, the peer waited for is usually waiting for this very core: each poll only holds it off. */
#define SPIN_NS_OWN_CORE 2000000LL
#define SPIN_NS_SHARED_CORE 200000LL
#define SPIN_NS_CROWDED_CORE 50000LL

static pycoll_p2p_t *make_transport(boot_state_t *s)
{
    char *error = s->error;
    int32_t n = s->size;
    pycoll_p2p_t *tcp = NULL, *shm = NULL;
    int want_tcp = s->transport != INIT_TRANSPORT_SHM, want_shm = s->transport != INIT_TRANSPORT_TCP;
    if (want_shm) {
        shm = pycoll_shm_transport_create(s->rank, n, s->seg_fds, s->pids, s->cfg.shm_ring_bytes, error,
                                          BOOT_ERROR_LEN);
        if (!shm)
            return NULL;
    }
    if (want_tcp) {
        tcp = tcp_transport_create_striped(s->rank, n, s->streams, s->peer_fds, error, BOOT_ERROR_LEN);
        if (!tcp) {
            if (shm)
                shm->ops->destroy(shm);
            return NULL;
        }
        for (int64_t i = 0; i < (int64_t)n * s->streams; i++)
            s->peer_fds[i] = -1; /* the transport owns them now */
    }
    if (!want_tcp || !want_shm)
        return want_tcp ? tcp : shm;
    int32_t *route = malloc((size_t)n * sizeof *route);
    if (!route) {
        shm->ops->destroy(shm);
        tcp->ops->destroy(tcp);
        pycoll_format_error(error, BOOT_ERROR_LEN, PYCOLL_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int32_t r = 0; r < n; r++)
        route[r] = s->host_of[r] == s->host_of[s->rank] ? 0 : 1;
    pycoll_p2p_t *children[2] = {shm, tcp};
    pycoll_p2p_t *routed = pycoll_routed_transport_create(2, children, route, error, BOOT_ERROR_LEN);
    free(route);
    return routed;
}

static long cores_here(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* Whether two ranks' host identities (pycoll_host_identity: "BOOT_ID:IPC_NS:NET_NS", or a PYCOLL_HOSTID as
 * given) name one machine: the same boot id, whatever their namespaces. Hosts that are namespaces or containers
 * of one machine are separate hosts to the transport but run on that machine's cores. */
static int same_machine(const char *a, const char *b)
{
    const size_t n = strcspn(a, ":");
    return n == strcspn(b, ":") && strncmp(a, b, n) == 0;
}

/* The default spin: a long one only while every rank on this machine can have a core of its own, a short one
 * while ranks outnumber cores, a shorter one from twice as many ranks as cores; a rank that polls while the peer
 * it waits for needs its core holds the peer off for the poll's length. */
static int64_t default_spin_ns(const boot_state_t *s)
{
    int64_t here = 0;
    for (int32_t r = 0; r < s->size; r++)
        here += same_machine(s->table[r].host, s->table[s->rank].host);
    const int64_t cores = cores_here();
    if (here <= cores)
        return SPIN_NS_OWN_CORE;
    return here < 2 * cores ? SPIN_NS_SHARED_CORE : SPIN_NS_CROWDED_CORE;
}

pycoll_status_t init_build_comm(boot_state_t *s, pycoll_comm_t **comm)
{
    pycoll_p2p_t *p2p = make_transport(s);
    if (!p2p)
        return PYCOLL_ERR_SYSTEM;
    p2p->check_interrupt = s->cfg.check_interrupt;
    p2p->interrupt_ctx = s->cfg.interrupt_ctx;
    pycoll_comm_options_t options;
    pycoll_comm_options_init(&options);
    options.timeout_s = s->timeout_s;
    options.segment_bytes = s->cfg.segment_bytes;
    options.spin_ns = s->cfg.spin_ns >= 0 ? s->cfg.spin_ns : default_spin_ns(s);
    pycoll_status_t st = pycoll_comm_create(comm, p2p, &options, s->error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK) {
        p2p->ops->destroy(p2p);
        return st;
    }
    st = pycoll_comm_set_hosts(*comm, s->host_of);
    if (st != PYCOLL_OK) {
        snprintf(s->error, BOOT_ERROR_LEN, "%s", pycoll_comm_error(*comm));
        pycoll_comm_destroy(*comm);
        *comm = NULL;
    }
    return st;
}
