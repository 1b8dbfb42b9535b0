/* Revoking a communicator family, and refusing collectives on the communicators a failure or a revoke left
 * behind (comm.h; the agreements that follow are agree.c's). A revoke marks the family (the transport's
 * interrupt check, progress.c, then fails the collective in flight with PYCOLL_ERR_REVOKED, woken at once) and,
 * where this rank's transport is idle, aborts it at once with that status: every peer learns it from the abort,
 * as from any failed collective. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/ft_state.h"
#include "transport/group_view.h"
#include "transport/ft_reset.h"
#include "common/p2p_share.h"

comm_ft_t *comm_ft_of(comm_family_t *family)
{
    if (family->ft)
        return family->ft;
    const int32_t size = family->transport->size;
    comm_ft_t *ft = calloc(1, sizeof *ft);
    if (!ft || !(ft->failed = calloc((size_t)size, 1))) {
        free(ft);
        return NULL;
    }
    ft->size = size;
    family->ft = ft;
    return ft;
}

void comm_ft_release(comm_family_t *family)
{
    comm_ft_t *ft = family->ft;
    if (!ft)
        return;
    free(ft->failed);
    free(ft->reqs);
    free(ft->msgs);
    free(ft);
    family->ft = NULL;
}

int comm_ft_broken(const pycoll_comm_t *comm)
{
    const comm_ft_t *ft = comm->family->ft;
    return ft && comm->ft_generation < ft->broken_before;
}

pycoll_status_t comm_ft_usable(pycoll_comm_t *comm, char *error, size_t error_len)
{
    comm_family_t *family = comm->family;
    pycoll_p2p_t *transport = family->transport;
    const comm_ft_t *ft = family->ft;
    if (ft && comm->ft_generation < ft->broken_before) {
        snprintf(error, error_len, "%s", ft->broken_error);
        return ft->broken_status;
    }
    if (transport->status != PYCOLL_OK)
        return PYCOLL_OK; /* broken before: comm_usable says so */
    pycoll_ft_poll(transport); /* a late rank fails a revoked collective too */
    /* Revoked while this rank's transport was busy and the collective in flight completed: revoke now. */
    if (atomic_load(&family->revoked) && transport->status == PYCOLL_OK)
        pycoll_p2p_fail(transport, PYCOLL_ERR_REVOKED, -1, "rank %d revoked the communicator", (int)transport->rank);
    if (transport->status == PYCOLL_OK)
        return PYCOLL_OK;
    /* Found now, before the collective: it fails as it would have inside, and the others learn it. */
    transport->ops->abort(transport, transport->status, transport->error);
    if (comm->view)
        p2p_adopt_error(comm->p2p, transport);
    snprintf(error, error_len, "%s", transport->error);
    return transport->status;
}

pycoll_status_t pycoll_comm_revoke(pycoll_comm_t *comm)
{
    pycoll_status_t entered = comm_enter(comm);
    if (entered != PYCOLL_OK)
        return entered;
    comm_family_t *family = comm->family;
    comm_progress_t *p = &family->progress;
    if (family->closed || comm->finalized)
        return PYCOLL_ERR_CLOSED;
    atomic_store(&family->revoked, 1);
    pthread_mutex_lock(&p->lock);
    const int idle = !p->running && !p->caller_running;
    if (idle) {
        p->caller_running = 1; /* the transport is this thread's until progress_end_turn */
        comm_thread_name(p->caller_name, sizeof p->caller_name);
    }
    pthread_mutex_unlock(&p->lock);
    if (!idle) { /* the collective in flight stops at its interrupt check (interrupt_check), run now */
        pycoll_ft_wake(family->transport);
        return PYCOLL_OK;
    }
    pycoll_p2p_t *transport = family->transport;
    if (transport->status == PYCOLL_OK)
        pycoll_p2p_fail(transport, PYCOLL_ERR_REVOKED, -1, "rank %d revoked the communicator", (int)transport->rank);
    transport->ops->abort(transport, transport->status, transport->error); /* every peer learns it now */
    progress_end_turn(comm);
    return PYCOLL_OK;
}

int32_t pycoll_comm_failed_ranks(const pycoll_comm_t *comm, int32_t *ranks, int32_t max)
{
    const comm_ft_t *ft = comm->family->ft;
    int32_t n = 0;
    for (int32_t r = 0; ft && r < comm->p2p->size; r++) {
        const int32_t root = comm->view ? comm->view->members[r] : r;
        if (ft->failed[root]) {
            if (ranks && n < max)
                ranks[n] = r;
            n++;
        }
    }
    return n;
}
