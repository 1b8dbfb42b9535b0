/* pycoll_comm_init_rank: how the ranks of a job meet, from a unique id alone.
 *
 * 1. Every rank listens on an ephemeral port (for the TCP mesh).
 * 2. Registration: the rank of the process that made the id (the root) serves the id's listener; every other
 *    rank connects to it, authenticates (handshake.h) and sends its record: rank, world size, mesh address,
 *    host identity, pid, whether it can use shared memory, shared-memory settings. The root checks them
 *    (world size, duplicate ranks, settings) and sends every rank the table of all records -- or why the job
 *    failed.
 * 3. From the table each rank finds the hosts (pycoll_host_identity), picks the transport (the same choice
 *    everywhere) and connects the TCP mesh between the pairs that need it (each rank connects to the lower
 *    ranks and accepts the higher ones; every connection authenticated).
 * 4. Where shared memory is used: each rank creates its segment in /dev/shm only now and sends its name to the
 *    root, which sends every rank all the names; each opens its host's segments.
 * 5. Ready: every rank tells the root whether steps 3-4 worked; the root tells every rank whether all did,
 *    naming the rank that failed and why. Only then are the segments unlinked (every peer has opened them) and
 *    the communicator built. A rank that dies or fails anywhere is reported to every rank, not waited for.
 *
 * A segment's name is drawn at random by the rank that creates it ("pycoll-<pid>-<rank>-<32 hex digits>",
 * init_segments.c), so another user of the host can neither guess it nor take it first; a name already taken is
 * drawn again. A name a peer sends is checked to be one that peer's segment may have (its pid and rank, then
 * the random digits: never a path), and opened without following links, mapped only when it is a regular file
 * of this user, of the expected size, beside this rank's own. A segment exists under its name only from step 4
 * to step 5, a few milliseconds once every rank is there. The survivors remove a segment whose owner was killed
 * in that window: once the job's outcome is decided (the root's verdict, or set-up done) each rank unlinks every
 * segment name of its host it knows, and the segments of its host's dead ranks whose names it never learnt (by
 * their pid and rank); only a host whose every rank was killed keeps one, and `pycoll run` removes those of its
 * ranks (pycoll/launcher.py). Every wait ends at the deadline (timeout_s from the call). The root keeps its
 * registration connections open until step 5, so it learns of a rank that dies during step 3 at once. */
#include "bootstrap/init_rank.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error_format.h"
#include "pycoll/settings.h"
#include "pycoll/transports.h"

pycoll_status_t init_fail(boot_state_t *s, pycoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pycoll_vformat_error(s->error, BOOT_ERROR_LEN, status, fmt, ap);
    va_end(ap);
    return status;
}

void init_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void init_format_ranks(char *out, size_t len, const int32_t *ranks, int n)
{
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < n && used + 16 < len; i++)
        used += (size_t)snprintf(out + used, len - used, i ? ", %d" : "%d", (int)ranks[i]);
    if (n == 0)
        snprintf(out, len, "none");
}

uint64_t init_pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static pycoll_status_t agree_ready(boot_state_t *s, pycoll_status_t mine)
{
    /* This rank's failure as the others hear it: naming this rank, unless it relays another's. */
    char told[MESSAGE_BYTES] = "";
    if (mine != PYCOLL_OK && s->relayed)
        snprintf(told, sizeof told, "%.380s", s->error);
    else if (mine != PYCOLL_OK)
        snprintf(told, sizeof told, "rank %d: %.360s", (int)s->rank, s->error);
    if (s->root_fd < 0) { /* the root: its own failure, or every rank heard, goes to all */
        int32_t failed = s->rank;
        /* Over TCP alone a rank says it is ready as soon as its mesh is done: perhaps while the root still
         * connected its own (root_hears_rank heard it then). */
        const uint8_t *heard = s->transport == INIT_TRANSPORT_TCP ? s->names_seen : NULL;
        pycoll_status_t st = mine != PYCOLL_OK ? mine : init_hear_every_rank(s, heard, NULL, &failed);
        init_broadcast_status(s, st, failed, mine != PYCOLL_OK ? told : st != PYCOLL_OK ? s->error : "");
        return st;
    }
    /* A rank: say how it went, hear how it went everywhere. */
    uint8_t msg[STATUS_BYTES];
    init_status_put(msg, mine, s->rank, told);
    pycoll_status_t st = boot_send_all(s->root_fd, msg, sizeof msg, s->deadline, "the bootstrap root", NULL, 0);
    if (mine != PYCOLL_OK)
        return mine;
    if (st == PYCOLL_OK)
        st = boot_recv_all(s->root_fd, msg, sizeof msg, s->deadline, "the bootstrap root", s->error,
                           BOOT_ERROR_LEN);
    if (st == PYCOLL_ERR_TIMEOUT)
        return init_fail(s, st, "rank %d: the other ranks did not finish connecting within %.3g s", (int)s->rank,
                         s->timeout_s);
    return st == PYCOLL_OK ? init_status_get(s, msg) : st;
}

void pycoll_init_config_init(pycoll_init_config_t *config)
{
    memset(config, 0, sizeof *config);
    config->version = PYCOLL_INIT_CONFIG_VERSION;
    config->transport = PYCOLL_TRANSPORT_AUTO;
    config->timeout_s = PYCOLL_DEFAULT_TIMEOUT_S;
    config->spin_ns = -1;
}

static pycoll_status_t check_arguments(boot_state_t *s, pycoll_comm_t **comm, const pycoll_unique_id_t *id,
                                       const pycoll_init_config_t *config)
{
    if (!comm || !id || !config)
        return init_fail(s, PYCOLL_ERR_INVALID, "comm, id and config must not be NULL");
    if (config->version != PYCOLL_INIT_CONFIG_VERSION)
        return init_fail(s, PYCOLL_ERR_INVALID, "config is of version %u, this library reads version %d",
                         config->version, PYCOLL_INIT_CONFIG_VERSION);
    if (s->size < 1 || s->size > PYCOLL_MAX_WORLD_SIZE)
        return init_fail(s, PYCOLL_ERR_INVALID, "world_size must be in [1, %d] (PYCOLL_MAX_WORLD_SIZE), got %d",
                         PYCOLL_MAX_WORLD_SIZE, (int)s->size);
    if (s->rank < 0 || s->rank >= s->size)
        return init_fail(s, PYCOLL_ERR_INVALID, "rank must be in [0, %d), got %d", (int)s->size, (int)s->rank);
    if (!(config->timeout_s > 0))
        return init_fail(s, PYCOLL_ERR_INVALID, "timeout_s must be positive, got %g", config->timeout_s);
    if (pycoll_settings_check(s->error, BOOT_ERROR_LEN) != PYCOLL_OK)
        return PYCOLL_ERR_INVALID;
    if (config->transport > PYCOLL_TRANSPORT_SHM)
        return init_fail(s, PYCOLL_ERR_INVALID, "transport must be AUTO, TCP or SHM, got %u", config->transport);
    int64_t ring = config->shm_ring_bytes;
    if (ring != 0 && (ring < 4096 || (ring & (ring - 1))))
        return init_fail(s, PYCOLL_ERR_INVALID, "shm_ring_bytes must be 0 or a power of two of at least 4096, got %lld",
                         (long long)ring);
    pycoll_status_t st = boot_id_decode(id, &s->id, s->error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK)
        return st;
    s->root_addr = s->id.root;
    boot_addr_text(&s->id.root, s->root_text, sizeof s->root_text);
    memcpy(s->auth.job, s->id.job, BOOT_JOB_BYTES);
    memcpy(s->auth.secret, s->id.secret, BOOT_SECRET_BYTES);
    return PYCOLL_OK;
}

/* Closes what set-up opened (the arrays hold -1 wherever it opened nothing) and frees the state. */
static void release(boot_state_t *s)
{
    for (int32_t r = 0; r < s->size; r++) {
        if (s->client_fds)
            init_close_fd(&s->client_fds[r]);
        for (int k = 0; s->peer_fds && k < TCP_MAX_STREAMS; k++)
            init_close_fd(&s->peer_fds[(size_t)k * (size_t)s->size + (size_t)r]);
        if (s->seg_fds)
            init_close_fd(&s->seg_fds[r]);
    }
    for (int i = 0; i < BOOT_MAX_INTERFACES; i++)
        init_close_fd(&s->listen_fds[i]);
    init_close_fd(&s->root_listen_fd);
    init_close_fd(&s->root_fd);
    init_close_fd(&s->seg_fd);
    init_unlink_segments(s);
    free(s->client_fds);
    free(s->peer_fds);
    free(s->seg_fds);
    free(s->pids);
    free(s->table);
    free(s->host_of);
    free(s->names_seen);
}

/* Whether a rank's connection to the root is closed at the other end (the root died or gave up): no verdict
 * will come, so the outcome is decided. */
static int root_gone(const boot_state_t *s)
{
    if (s->root_fd < 0)
        return 0;
    struct pollfd p = {.fd = s->root_fd, .events = POLLIN};
    char byte;
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR) ||
                                   recv(s->root_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0);
}

/* An array of n descriptors, every one -1 (none), or NULL: release closes only what set-up put there. */
static int *no_descriptors(size_t n)
{
    int *fds = malloc(n * sizeof *fds);
    for (size_t i = 0; fds && i < n; i++)
        fds[i] = -1;
    return fds;
}

pycoll_status_t pycoll_comm_init_rank_config(pycoll_comm_t **comm, int32_t world_size, const pycoll_unique_id_t *id,
                                             int32_t rank, const pycoll_init_config_t *config)
{
    boot_state_t s = {.rank = rank, .size = world_size, .root_listen_fd = -1, .root_fd = -1, .seg_fd = -1,
                      .error = boot_error()};
    for (int i = 0; i < BOOT_MAX_INTERFACES; i++)
        s.listen_fds[i] = -1;
    s.error[0] = 0;
    if (comm)
        *comm = NULL;
    pycoll_status_t st = check_arguments(&s, comm, id, config);
    if (st != PYCOLL_OK)
        return st;
    s.cfg = *config;
    s.timeout_s = config->timeout_s;
    s.deadline = boot_now() + config->timeout_s;
    s.auth.rank = rank;
    s.auth.world_size = world_size;
    s.root_listen_fd = boot_claim_listener(&s.id);
    boot_set_stop_check(config->should_stop, config->stop_ctx);
    size_t n = (size_t)world_size;
    s.client_fds = no_descriptors(n);
    s.peer_fds = no_descriptors(n * TCP_MAX_STREAMS);
    s.seg_fds = no_descriptors(n);
    s.pids = calloc(n, sizeof(int32_t));
    s.table = calloc(n, sizeof(rank_record_t));
    s.host_of = calloc(n, sizeof(int32_t));
    s.names_seen = calloc(n, 1);
    if (!s.client_fds || !s.peer_fds || !s.seg_fds || !s.pids || !s.table || !s.host_of || !s.names_seen) {
        release(&s);
        return init_fail(&s, PYCOLL_ERR_NOMEM, "out of memory");
    }

    rank_record_t mine;
    st = init_prepare(&s, &mine);
    if (world_size == 1) {
        init_close_fd(&s.root_listen_fd);
        s.table[0] = mine;
    } else if (st == PYCOLL_OK && s.root_listen_fd >= 0) {
        st = init_root_register(&s, &mine);
    } else if (st == PYCOLL_OK) {
        st = init_client_register(&s, &mine);
    } else if (s.root_listen_fd >= 0) {
        /* The root itself could not prepare: the ranks that reach it hear why. */
        init_close_fd(&s.root_listen_fd);
    }
    if (st == PYCOLL_OK) {
        st = init_find_hosts_and_transport(&s);
        if (st == PYCOLL_OK)
            st = init_connect_mesh(&s);
        if (st == PYCOLL_OK)
            st = init_open_segments(&s);
        if (world_size > 1)
            st = agree_ready(&s, st);
        /* decided for the whole job: set-up worked, this rank is the root (its verdict went out), or the failure
         * is the root's verdict about another rank */
        s.shm_unlink_all = st == PYCOLL_OK || s.root_fd < 0 || s.relayed || root_gone(&s);
    }
    if (st == PYCOLL_OK)
        st = init_build_comm(&s, comm);
    boot_set_stop_check(NULL, NULL);
    release(&s);
    return st;
}

pycoll_status_t pycoll_comm_init_rank(pycoll_comm_t **comm, int32_t world_size, pycoll_unique_id_t id, int32_t rank,
                                      double timeout_s)
{
    pycoll_init_config_t config;
    pycoll_init_config_init(&config);
    config.timeout_s = timeout_s;
    return pycoll_comm_init_rank_config(comm, world_size, &id, rank, &config);
}
