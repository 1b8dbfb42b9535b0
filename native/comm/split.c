/* Splitting a communicator (pycoll_comm_split, as MPI_Comm_split and ncclCommSplit): one exchange of every
 * rank's (color, key) over the parent, then each new communicator is a view of its members over the root's
 * transport (group_view.h) -- no new connections, ports or rendezvous -- in the parent's family, so its
 * collectives queue behind the family's in call order (comm_internal.h). */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_internal.h"
#include "transport/group_view.h"

/* The id every member derives alike: the parent's group, how many splits the parent made (a collective count,
 * equal on every rank) and the color. Members of other communicators that share a pair of ranks with this one
 * have other ids: a sibling split of the same call has another color, another split another count. */
static uint32_t split_group(uint32_t parent_group, uint64_t split_index, int32_t color)
{
    uint64_t words[3] = {parent_group, split_index, (uint64_t)(uint32_t)color};
    uint32_t h = 2166136261u; /* FNV-1a */
    const unsigned char *p = (const unsigned char *)words;
    for (size_t i = 0; i < sizeof words; i++)
        h = (h ^ p[i]) * 16777619u;
    return h ? h : 1; /* 0 names a root */
}

/* Members (parent ranks) of `color`, ordered by (key, parent rank); their number. */
static int32_t members_of(const int64_t *pairs, int32_t size, int32_t color, int32_t *members)
{
    int32_t n = 0;
    for (int32_t r = 0; r < size; r++) {
        if (pairs[2 * r] != color)
            continue;
        int32_t i = n++;
        /* Insertion sort: splits are made once, and ties keep the parent's order. */
        while (i > 0 && pairs[2 * members[i - 1] + 1] > pairs[2 * r + 1]) {
            members[i] = members[i - 1];
            i--;
        }
        members[i] = r;
    }
    return n;
}

/* The child's host map: the parent's hosts of its members, renumbered 0.. in order of first appearance. */
static int32_t *child_hosts(const int32_t *parent_hosts, const int32_t *members, int32_t n, int32_t parent_size)
{
    if (!parent_hosts)
        return NULL;
    int32_t *renumber = malloc((size_t)parent_size * sizeof *renumber);
    int32_t *hosts = malloc((size_t)n * sizeof *hosts);
    if (!renumber || !hosts) {
        free(renumber);
        free(hosts);
        return NULL;
    }
    for (int32_t h = 0; h < parent_size; h++)
        renumber[h] = -1;
    int32_t next = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t h = parent_hosts[members[i]];
        if (renumber[h] < 0)
            renumber[h] = next++;
        hosts[i] = renumber[h];
    }
    free(renumber);
    return hosts;
}

static pycoll_status_t fail(pycoll_comm_t *comm, pycoll_status_t status, const char *message, int rank, int value)
{
    snprintf(comm->error, sizeof comm->error, message, rank, value);
    return status;
}

pycoll_status_t pycoll_comm_split(pycoll_comm_t *comm, int32_t color, int32_t key, pycoll_comm_t **out)
{
    *out = NULL;
    if (comm_foreign(comm))
        return comm_foreign_error(comm, comm->error, sizeof comm->error);
    const int32_t size = comm->p2p->size, me = comm->p2p->rank;
    int64_t *pairs = malloc((size_t)size * 2 * sizeof *pairs);
    int32_t *members = malloc((size_t)size * sizeof *members);
    if (!pairs || !members) {
        free(pairs);
        free(members);
        return fail(comm, PYCOLL_ERR_NOMEM, "split: out of memory (rank %d, %d ranks)", me, size);
    }
    /* Every rank takes part, a bad color included, so that all of them fail alike rather than some waiting. An
     * all-reduce (sum) of a table in which each rank fills its own row: where the transport has its own
     * all-reduce (shared memory) that is one round, where an all-gather is size - 1 ring steps. */
    for (int32_t r = 0; r < 2 * size; r++)
        pairs[r] = 0;
    pairs[2 * me] = color;
    pairs[2 * me + 1] = key;
    pycoll_status_t st = pycoll_comm_all_reduce(comm, pairs, pairs, 2 * (int64_t)size, PYCOLL_INT64, PYCOLL_SUM,
                                                PYCOLL_ALGO_AUTO, PYCOLL_ACCURACY_FAST);
    for (int32_t r = 0; st == PYCOLL_OK && r < size; r++)
        if (pairs[2 * r] < PYCOLL_SPLIT_NONE)
            st = fail(comm, PYCOLL_ERR_INVALID, "split: rank %d passed a negative color (%d); colors are >= 0, or "
                      "PYCOLL_SPLIT_NONE (-1) for a rank that joins no new communicator", r, (int)pairs[2 * r]);
    const uint64_t split_index = ++comm->splits; /* counted on every rank, whatever the outcome */
    if (st != PYCOLL_OK || color == PYCOLL_SPLIT_NONE) {
        free(pairs);
        free(members);
        return st;
    }
    const int32_t n = members_of(pairs, size, color, members);
    free(pairs);
    int32_t index = 0;
    while (members[index] != me)
        index++;
    return comm_view_child(comm, members, n, index, split_group(comm->group, split_index, color), out);
}

pycoll_status_t comm_view_child(pycoll_comm_t *comm, int32_t *members, int32_t n, int32_t index, uint32_t group,
                                pycoll_comm_t **out)
{
    const int32_t size = comm->p2p->size, me = comm->p2p->rank;
    pycoll_comm_t *child = calloc(1, sizeof *child);
    int32_t *root_ranks = malloc((size_t)n * sizeof *root_ranks);
    int32_t *host_of = child_hosts(comm->host_of, members, n, size);
    group_view_t *view = NULL;
    if (child && root_ranks && (host_of || !comm->host_of)) {
        for (int32_t i = 0; i < n; i++) /* views always sit on the root's transport: no chains of views */
            root_ranks[i] = comm->view ? comm->view->members[members[i]] : members[i];
        view = group_view_create(comm->family->transport, root_ranks, n, index);
    }
    free(root_ranks);
    if (!view) {
        free(child);
        free(host_of);
        free(members);
        return fail(comm, PYCOLL_ERR_NOMEM, "split: out of memory (rank %d, %d members)", me, n);
    }
    child->group = group;
    child->ft_generation = comm->ft_generation;
    child->family = comm->family;
    child->view = view;
    child->p2p = &view->p2p;
    child->ctx.p2p = child->p2p;
    child->ctx.segment_bytes = comm->options.segment_bytes;
    child->options = comm->options;
    child->model = comm->model;
    child->parent_ranks = members;
    child->host_of = host_of;
    child->ctx.host_of = host_of;
    child->hosts = 1;
    child->max_local = n;
    comm_host_shape(host_of, n, &child->hosts, &child->max_local);
    view->p2p.spin_ns = comm->options.spin_ns;
    pthread_mutex_lock(&comm->family->progress.lock);
    comm->family->refs++;
    pthread_mutex_unlock(&comm->family->progress.lock);
    child->owner = pthread_self();
    child->pid = comm->pid;
    comm_live_add(child);
    *out = child;
    return PYCOLL_OK;
}

int32_t pycoll_comm_parent_rank(const pycoll_comm_t *comm, int32_t rank)
{
    if (rank < 0 || rank >= comm->p2p->size)
        return -1;
    return comm->parent_ranks ? comm->parent_ranks[rank] : rank;
}
