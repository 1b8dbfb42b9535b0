/* Step 3 of pycoll_comm_init_rank (init_rank.c): the hosts and the transport, from the table, and the TCP
 * mesh between the pairs of ranks that need it: PYCOLL_TCP_STREAMS connections per pair, each authenticated by
 * its own handshake and then naming its place among them (STREAM_INDEX_BYTES). Where the ranks listen on
 * several interfaces (a PYCOLL_SOCKET_IFNAME list), connection k goes from this rank's interface k mod n to
 * the peer's address on the same interface, so the pair's connections spread over the hosts' links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/init_rank.h"

#define STREAM_INDEX_BYTES 4 /* after a PEER handshake: which of the pair's connections this one is */

/* Connection k to rank r. */
static int *peer_fd(const boot_state_t *s, int k, int32_t r)
{
    return &s->peer_fds[(size_t)k * (size_t)s->size + (size_t)r];
}

pycoll_status_t init_find_hosts_and_transport(boot_state_t *s)
{
    int all_can_share = 1;
    for (int32_t r = 0; r < s->size; r++) {
        s->host_of[r] = r;
        for (int32_t q = 0; q < r; q++)
            if (strcmp(s->table[q].host, s->table[r].host) == 0) {
                s->host_of[r] = s->host_of[q];
                break;
            }
        s->n_hosts += s->host_of[r] == r;
        all_can_share &= s->table[r].segment[0] != 0;
    }
    /* Hosts numbered in order of their lowest rank, 0, 1, ...: the map pycoll_comm_set_hosts expects. */
    int32_t *number = malloc((size_t)s->size * sizeof *number), next = 0;
    if (!number)
        return init_fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    for (int32_t r = 0; r < s->size; r++)
        number[r] = s->host_of[r] == r ? next++ : number[s->host_of[r]];
    memcpy(s->host_of, number, (size_t)s->size * sizeof *number);
    free(number);
    if (s->cfg.transport == PYCOLL_TRANSPORT_SHM && s->n_hosts > 1) {
        int32_t *away = malloc((size_t)s->size * sizeof *away);
        int n_away = 0;
        for (int32_t r = 0; away && r < s->size; r++)
            if (s->host_of[r] != s->host_of[0])
                away[n_away++] = r;
        char ranks[256];
        init_format_ranks(ranks, sizeof ranks, away, away ? n_away : 0);
        free(away);
        return init_fail(s, PYCOLL_ERR_INVALID, "shared memory needs every rank on one host, but ranks %s are on "
                         "another host than rank 0 (%d hosts: different boot id, IPC or network namespace); use the "
                         "default transport or TCP", ranks, (int)s->n_hosts);
    }
    if (s->cfg.transport == PYCOLL_TRANSPORT_TCP || !all_can_share)
        s->transport = INIT_TRANSPORT_TCP;
    else if (s->n_hosts == 1)
        s->transport = INIT_TRANSPORT_SHM;
    else
        s->transport = s->size > s->n_hosts ? INIT_TRANSPORT_SHM_TCP : INIT_TRANSPORT_TCP;
    return PYCOLL_OK;
}

/* Whether this rank talks to rank r over TCP. */
static int over_tcp(const boot_state_t *s, int32_t r)
{
    if (r == s->rank || s->transport == INIT_TRANSPORT_SHM)
        return 0;
    return s->transport == INIT_TRANSPORT_TCP || s->host_of[r] != s->host_of[s->rank];
}

/* Whether every connection rank r makes to this rank is in. */
static int mesh_complete_with(const boot_state_t *s, int32_t r)
{
    for (int k = 0; k < s->streams; k++)
        if (*peer_fd(s, k, r) < 0)
            return 0;
    return 1;
}

static int mesh_complete(const boot_state_t *s)
{
    for (int32_t r = s->rank + 1; r < s->size; r++)
        if (over_tcp(s, r) && !mesh_complete_with(s, r))
            return 0;
    return 1;
}

static pycoll_status_t admit_peer(boot_state_t *s, boot_conn_t *c, int *taken)
{
    int32_t r = c->rank;
    uint32_t k = get_u32(c->buf);
    if (c->world_size != s->size || r <= s->rank || r >= s->size || !over_tcp(s, r) || k >= (uint32_t)s->streams ||
        *peer_fd(s, (int)k, r) >= 0) {
        char why[96];
        snprintf(why, sizeof why, "a connection claiming rank %d (connection %u) was not expected", (int)r, k);
        init_note_dropped(s, why);
        return PYCOLL_OK;
    }
    *peer_fd(s, (int)k, r) = c->fd;
    *taken = 1;
    return PYCOLL_OK;
}

/* During the mesh the root watches every rank's registration connection: a rank sends its segment's name
 * there (step 4), or why it failed, as soon as its own part of the mesh is done -- a failure ends the root's
 * wait at once -- and a rank that closes it died. A rank watches its connection to the root: the root sends
 * why the job failed, or closes because it died. */
static pycoll_status_t root_hears_rank(boot_state_t *s, int fd, int32_t who, int *stop)
{
    uint8_t msg[STATUS_BYTES];
    char what[48];
    snprintf(what, sizeof what, "rank %d", (int)who);
    if (boot_recv_all(fd, msg, sizeof msg, boot_now() + 1.0, what, s->error, BOOT_ERROR_LEN) != PYCOLL_OK)
        return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d failed or exited while the ranks connected", (int)who);
    pycoll_status_t st = init_status_get(s, msg);
    /* Its segment's name (step 4), sent as soon as its own mesh was done; in a job over TCP alone, where no
     * rank has a segment, that it is ready (agree_ready hears it no more). */
    if (st == PYCOLL_OK && s->transport != INIT_TRANSPORT_TCP)
        st = init_take_name_from_status(s, who, msg);
    if (st == PYCOLL_OK)
        s->names_seen[who] = 1;
    *stop = 1;
    return st;
}

static pycoll_status_t rank_sees_root_message(boot_state_t *s, int fd, int32_t who, int *stop)
{
    (void)who, (void)stop;
    uint8_t msg[STATUS_BYTES];
    if (boot_recv_all(fd, msg, sizeof msg, boot_now() + 1.0, "the bootstrap root", s->error, BOOT_ERROR_LEN) !=
        PYCOLL_OK)
        return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "the bootstrap root (the rank that made the unique id) failed or "
                         "exited while the ranks connected");
    pycoll_status_t st = init_status_get(s, msg);
    return st == PYCOLL_OK ? init_fail(s, PYCOLL_ERR_PEER_FAILURE, "the bootstrap root sent an unexpected message")
                           : st;
}

/* Connection k to rank r: which of both ranks' addresses it joins (the n both have, k mod n); with a single
 * interface on either side, the kernel picks the local end as it always did. */
static int interface_of(const boot_state_t *s, int32_t r, int k, const boot_addr_t **from)
{
    uint32_t mine = s->table[s->rank].n_addrs, theirs = s->table[r].n_addrs;
    uint32_t n = mine < theirs ? mine : theirs;
    int i = (int)((uint32_t)k % n);
    *from = n > 1 ? &s->table[s->rank].addrs[i] : NULL;
    return i;
}

pycoll_status_t init_connect_mesh(boot_state_t *s)
{
    char what[BOOT_ADDR_TEXT_LEN + 32];
    pycoll_status_t st = PYCOLL_OK;
    for (int32_t r = 0; r < s->rank && st == PYCOLL_OK; r++) {
        if (!over_tcp(s, r))
            continue;
        for (int k = 0; k < s->streams && st == PYCOLL_OK; k++) {
            const boot_addr_t *from;
            const boot_addr_t *to = &s->table[r].addrs[interface_of(s, r, k, &from)];
            char addr[BOOT_ADDR_TEXT_LEN];
            boot_addr_text(to, addr, sizeof addr);
            snprintf(what, sizeof what, "rank %d (%s)", (int)r, addr);
            uint8_t index[STREAM_INDEX_BYTES];
            put_u32(index, (uint32_t)k);
            st = init_connect_authenticated(s, from, to, BOOT_KIND_PEER, r, what, peer_fd(s, k, r));
            if (st == PYCOLL_OK)
                st = boot_send_all(*peer_fd(s, k, r), index, sizeof index, s->deadline, what, s->error,
                                   BOOT_ERROR_LEN);
        }
        if (st == PYCOLL_ERR_TIMEOUT)
            init_fail(s, st, "rank %d did not accept rank %d's connection within %.3g s", (int)r, (int)s->rank,
                      s->timeout_s);
    }
    if (st != PYCOLL_OK)
        return st;
    int root = s->root_fd < 0;
    st = init_serve(s, s->listen_fds, s->n_listen, BOOT_KIND_PEER, STREAM_INDEX_BYTES, admit_peer, mesh_complete,
                    root ? s->client_fds : &s->root_fd, root ? s->size : 1,
                    root ? root_hears_rank : rank_sees_root_message, "");
    if (st == PYCOLL_ERR_TIMEOUT) {
        int32_t *missing = malloc((size_t)s->size * sizeof *missing);
        int n = 0;
        for (int32_t r = s->rank + 1; missing && r < s->size; r++)
            if (over_tcp(s, r) && !mesh_complete_with(s, r))
                missing[n++] = r;
        char m[256], d[200];
        init_format_ranks(m, sizeof m, missing, missing ? n : 0);
        init_dropped_clause(s, d, sizeof d);
        free(missing);
        init_fail(s, st, "rank%s %s did not connect to rank %d within %.3g s%s", n == 1 ? "" : "s", m, (int)s->rank,
                  s->timeout_s, d);
    }
    return st;
}
