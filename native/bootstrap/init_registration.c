/* Steps 1 and 2 of pycoll_comm_init_rank (init_rank.c): this rank's record and listener, then registration
 * -- the root collects every rank's record, checks it, and sends all of them the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/init_rank.h"
#include "common/settings.h"
#include "pycoll/transports.h"

/* rank, world size, address count, addresses, pid, pid namespace, ring bytes, transport, host, segment name,
 * streams */
#define ADDRS_BYTES (4 + BOOT_MAX_INTERFACES * BOOT_ADDR_WIRE_BYTES)
#define RECORD_BYTES (4 + 4 + ADDRS_BYTES + 4 + 8 + 8 + 4 + HOST_TEXT_BYTES + SEGMENT_NAME_BYTES + 4)
/* Descriptors set-up needs beyond one per rank (two on the root): listeners, the root connection, what the
 * process already holds (Python's own, a few libraries'), and poll()'s pending handshakes (MAX_PENDING). */
#define SPARE_FDS (MAX_PENDING + 64)

static void record_put(uint8_t *p, const rank_record_t *r)
{
    put_u32(p, (uint32_t)r->rank);
    put_u32(p + 4, (uint32_t)r->world_size);
    put_u32(p + 8, r->n_addrs);
    for (int i = 0; i < BOOT_MAX_INTERFACES; i++)
        boot_addr_put(p + 12 + i * BOOT_ADDR_WIRE_BYTES, &r->addrs[i]);
    p += 8 + ADDRS_BYTES;
    put_u32(p, (uint32_t)r->pid);
    put_u64(p + 4, r->pid_ns);
    put_u64(p + 12, (uint64_t)r->ring_bytes);
    put_u32(p + 20, r->transport);
    memcpy(p + 24, r->host, HOST_TEXT_BYTES);
    memcpy(p + 24 + HOST_TEXT_BYTES, r->segment, SEGMENT_NAME_BYTES);
    put_u32(p + 24 + HOST_TEXT_BYTES + SEGMENT_NAME_BYTES, r->streams);
}

static void record_get(const uint8_t *p, rank_record_t *r)
{
    r->rank = (int32_t)get_u32(p);
    r->world_size = (int32_t)get_u32(p + 4);
    r->n_addrs = get_u32(p + 8);
    for (int i = 0; i < BOOT_MAX_INTERFACES; i++)
        boot_addr_get(p + 12 + i * BOOT_ADDR_WIRE_BYTES, &r->addrs[i]);
    p += 8 + ADDRS_BYTES;
    r->pid = (int32_t)get_u32(p);
    r->pid_ns = get_u64(p + 4);
    r->ring_bytes = (int64_t)get_u64(p + 12);
    r->transport = get_u32(p + 20);
    memcpy(r->host, p + 24, HOST_TEXT_BYTES);
    memcpy(r->segment, p + 24 + HOST_TEXT_BYTES, SEGMENT_NAME_BYTES);
    r->streams = get_u32(p + 24 + HOST_TEXT_BYTES + SEGMENT_NAME_BYTES);
    r->host[HOST_TEXT_BYTES - 1] = r->segment[SEGMENT_NAME_BYTES - 1] = 0;
}

/* Whether this process may open the descriptors set-up and the transports need: one per rank (its TCP socket
 * or its shared-memory segment), another per rank on the root (the registrations), and SPARE_FDS. Checked
 * before anything waits, so a world size the limit cannot hold fails at once, naming both. */
static pycoll_status_t check_descriptor_limit(boot_state_t *s)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
        return PYCOLL_OK;
    int root = s->root_listen_fd >= 0;
    long long needed = (long long)s->size * (s->streams + root) + BOOT_MAX_INTERFACES + SPARE_FDS;
    if (s->size == 1 || needed <= (long long)limit.rlim_cur)
        return PYCOLL_OK;
    return init_fail(s, PYCOLL_ERR_INVALID, "world_size %d needs about %lld file descriptors on rank %d (%s%d spare), "
                     "more than this process may open (RLIMIT_NOFILE %llu, hard limit %llu): raise it (ulimit -n, or "
                     "resource.setrlimit) or use a smaller world_size or PYCOLL_TCP_STREAMS", (int)s->size, needed,
                     (int)s->rank, root ? "one more per rank on the rank serving the id, " : "", SPARE_FDS,
                     (unsigned long long)limit.rlim_cur, (unsigned long long)limit.rlim_max);
}

/* PYCOLL_TCP_STREAMS, checked against what the transport can stripe over; unset, one connection per interface
 * this rank listens on, so that a host given several NICs (PYCOLL_SOCKET_IFNAME=eth0,eth1) uses them all without
 * a second setting. */
static pycoll_status_t read_streams(boot_state_t *s, int interfaces)
{
    const char *text = setting_text(SETTING_TCP_STREAMS);
    char *end = NULL;
    long streams = text ? strtol(text, &end, 10) : interfaces;
    if (text && (end == text || *end || streams < 1 || streams > TCP_MAX_STREAMS))
        return init_fail(s, PYCOLL_ERR_INVALID, "PYCOLL_TCP_STREAMS=%s: expected a whole number from 1 to %d", text,
                         TCP_MAX_STREAMS);
    s->streams = (int)streams;
    return PYCOLL_OK;
}

pycoll_status_t init_prepare(boot_state_t *s, rank_record_t *mine)
{
    char *error = s->error;
    const char *ifname = s->cfg.ifname, *source = "ifname";
    if (!ifname || !ifname[0]) {
        ifname = setting_text(SETTING_SOCKET_IFNAME);
        source = "PYCOLL_SOCKET_IFNAME";
    }
    memset(mine, 0, sizeof *mine);
    boot_addr_t here[BOOT_MAX_INTERFACES];
    int n_here = 0;
    pycoll_status_t st = boot_choose_addresses(ifname, source, &s->root_addr, here, &n_here, error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = read_streams(s, n_here);
    if (st == PYCOLL_OK)
        st = check_descriptor_limit(s);
    if (st != PYCOLL_OK)
        return st;
    mine->rank = s->rank;
    mine->world_size = s->size;
    mine->pid = (int32_t)getpid();
    mine->pid_ns = init_pid_namespace();
    mine->ring_bytes = s->cfg.shm_ring_bytes;
    mine->transport = s->cfg.transport;
    mine->streams = (uint32_t)s->streams;
    pycoll_host_identity(mine->host, sizeof mine->host);
    mine->n_addrs = (uint32_t)n_here;
    /* One listener per interface: a pair's connection k arrives on the interface it was bound to. */
    for (int i = 0; st == PYCOLL_OK && s->size > 1 && i < n_here; i++)
        st = boot_listen(&here[i], s->size * s->streams + 16, &s->listen_fds[i], &mine->addrs[i], error,
                         BOOT_ERROR_LEN);
    s->n_listen = s->size > 1 ? n_here : 0;
    if (st != PYCOLL_OK || s->cfg.transport == PYCOLL_TRANSPORT_TCP)
        return st;
    struct stat dir;
    if (stat(SHM_DIR, &dir) != 0 || !S_ISDIR(dir.st_mode)) {
        if (s->cfg.transport == PYCOLL_TRANSPORT_SHM)
            return init_fail(s, PYCOLL_ERR_SYSTEM, "%s is missing (POSIX shared memory is not mounted)", SHM_DIR);
        return PYCOLL_OK; /* no shared memory here: the job runs over TCP (every rank sees that in the table) */
    }
    snprintf(mine->segment, sizeof mine->segment, "shm");
    return PYCOLL_OK;
}

static void put_record_of(const boot_state_t *s, int32_t rank, uint8_t *out) { record_put(out, &s->table[rank]); }

/* Why a registration cannot join this job, or PYCOLL_OK. */
static pycoll_status_t check_record(boot_state_t *s, const rank_record_t *r)
{
    const rank_record_t *root = &s->table[s->rank];
    if (r->world_size != s->size)
        return init_fail(s, PYCOLL_ERR_INVALID, "rank %d called pycoll_comm_init_rank with world size %d, rank %d "
                         "with %d", (int)r->rank, (int)r->world_size, (int)s->rank, (int)s->size);
    if (r->rank < 0 || r->rank >= s->size)
        return init_fail(s, PYCOLL_ERR_INVALID, "a process registered as rank %d of a world of %d", (int)r->rank,
                         (int)s->size);
    if (s->table[r->rank].world_size != 0)
        return init_fail(s, PYCOLL_ERR_INVALID, "two processes registered as rank %d", (int)r->rank);
    if (r->transport != root->transport || r->ring_bytes != root->ring_bytes)
        return init_fail(s, PYCOLL_ERR_INVALID, "rank %d asked for transport %u with shared-memory rings of %lld "
                         "bytes, rank %d for transport %u with %lld bytes; every rank must ask alike", (int)r->rank,
                         r->transport, (long long)r->ring_bytes, (int)s->rank, root->transport,
                         (long long)root->ring_bytes);
    if (r->n_addrs < 1 || r->n_addrs > BOOT_MAX_INTERFACES)
        return init_fail(s, PYCOLL_ERR_INVALID, "rank %d registered %u listening addresses (1 to %d expected)",
                         (int)r->rank, r->n_addrs, BOOT_MAX_INTERFACES);
    if (r->streams != root->streams)
        return init_fail(s, PYCOLL_ERR_INVALID, "rank %d opens %u TCP connections per pair of ranks, rank %d %u "
                         "(PYCOLL_TCP_STREAMS, by default one per interface of PYCOLL_SOCKET_IFNAME): every rank must "
                         "use alike", (int)r->rank, r->streams, (int)s->rank, root->streams);
    return PYCOLL_OK;
}

static int all_registered(const boot_state_t *s)
{
    for (int32_t r = 0; r < s->size; r++)
        if (s->table[r].world_size == 0)
            return 0;
    return 1;
}

/* Answer a registration the job will not take with the job's failure (st, message). */
static void refuse_registration(boot_state_t *s, const boot_conn_t *c, pycoll_status_t st, int32_t about,
                                const char *message)
{
    uint8_t msg[STATUS_BYTES];
    init_status_put(msg, st, about, message);
    boot_send_all(c->fd, msg, sizeof msg, boot_now() + 1.0, "a rank", NULL, 0);
    s->refused++;
}

static pycoll_status_t admit_registration(boot_state_t *s, boot_conn_t *c, int *taken)
{
    rank_record_t r;
    record_get(c->buf, &r);
    if (r.rank != c->rank || r.world_size != c->world_size)
        return init_note_dropped(s, "its registration contradicts its handshake"), PYCOLL_OK;
    pycoll_status_t st = check_record(s, &r);
    if (st != PYCOLL_OK) {
        refuse_registration(s, c, st, r.rank, s->error);
        return st;
    }
    s->table[r.rank] = r;
    s->client_fds[r.rank] = c->fd;
    *taken = 1;
    return PYCOLL_OK;
}

/* A registered rank's connection became readable before the table went out: it closed (it died). */
static pycoll_status_t registered_rank_closed(boot_state_t *s, int fd, int32_t who, int *stop)
{
    (void)fd, (void)stop;
    return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d closed its connection to the bootstrap root (rank %d) during "
                     "set-up: it failed or exited", (int)who, (int)s->rank);
}

/* How long a root whose job failed at registration (a duplicate rank, a world size that differs) keeps the id's
 * listener open for the ranks that have not registered yet. Ranks started together arrive within it and hear the
 * reason, instead of finding the listener closed and timing out on a root that seems never to have come. */
#define TELL_LATE_RANKS_S 2.0

typedef struct late_answer {
    pycoll_status_t status;
    char message[BOOT_ERROR_LEN];
} late_answer_t;

static pycoll_status_t answer_late_rank(boot_state_t *s, boot_conn_t *c, int *taken)
{
    (void)taken;
    refuse_registration(s, c, s->late_answer->status, c->rank, s->late_answer->message);
    return PYCOLL_OK;
}

static int every_rank_answered(const boot_state_t *s)
{
    int32_t registered = 0;
    for (int32_t r = 0; r < s->size; r++)
        registered += s->table[r].world_size != 0;
    return registered + s->refused >= s->size;
}

/* After a registration failed with st: answer every rank that still registers, until each rank of the world is
 * accounted for or TELL_LATE_RANKS_S has passed (never past the set-up's own deadline). */
static void answer_late_ranks(boot_state_t *s, pycoll_status_t st)
{
    late_answer_t answer = {.status = st};
    snprintf(answer.message, sizeof answer.message, "%s", s->error); /* init_serve may overwrite s->error */
    const double deadline = s->deadline, until = boot_now() + TELL_LATE_RANKS_S;
    s->deadline = until < deadline ? until : deadline;
    s->late_answer = &answer;
    init_serve(s, &s->root_listen_fd, 1, BOOT_KIND_ROOT, RECORD_BYTES, answer_late_rank, every_rank_answered, NULL,
               0, NULL, "");
    s->late_answer = NULL;
    s->deadline = deadline;
    snprintf(s->error, BOOT_ERROR_LEN, "%s", answer.message);
}

pycoll_status_t init_root_register(boot_state_t *s, const rank_record_t *mine)
{
    s->table[s->rank] = *mine;
    char timeout_what[BOOT_ERROR_LEN];
    pycoll_status_t st = init_serve(s, &s->root_listen_fd, 1, BOOT_KIND_ROOT, RECORD_BYTES, admit_registration,
                                    all_registered, s->client_fds, s->size, registered_rank_closed, "");
    if (st == PYCOLL_ERR_TIMEOUT) {
        int32_t *missing = malloc((size_t)s->size * sizeof *missing);
        int32_t *present = malloc((size_t)s->size * sizeof *present);
        int n_missing = 0, n_present = 0;
        for (int32_t r = 0; missing && present && r < s->size; r++) {
            if (s->table[r].world_size == 0)
                missing[n_missing++] = r;
            else
                present[n_present++] = r;
        }
        char m[256], p[256], d[200];
        init_format_ranks(m, sizeof m, missing, n_missing);
        init_format_ranks(p, sizeof p, present, n_present);
        init_dropped_clause(s, d, sizeof d);
        snprintf(timeout_what, sizeof timeout_what, "rank%s %s of %d did not register with the bootstrap root "
                 "(rank %d, %s) within %.3g s (registered: %s)%s", n_missing == 1 ? "" : "s", m, (int)s->size,
                 (int)s->rank, s->root_text, s->timeout_s, p, d);
        init_fail(s, PYCOLL_ERR_TIMEOUT, "%s", timeout_what);
        free(missing);
        free(present);
    }
    if (st != PYCOLL_OK) {
        init_broadcast_status(s, st, s->rank, s->error);
        if (st == PYCOLL_ERR_INVALID) /* a registration the job cannot take: ranks still to come hear it too */
            answer_late_ranks(s, st);
    }
    init_close_fd(&s->root_listen_fd);
    return st != PYCOLL_OK ? st : init_send_root_table(s, RECORD_BYTES, put_record_of);
}

pycoll_status_t init_client_register(boot_state_t *s, const rank_record_t *mine)
{
    char what[BOOT_ADDR_TEXT_LEN + 64];
    snprintf(what, sizeof what, "the bootstrap root at %s", s->root_text);
    uint8_t record[RECORD_BYTES], *table = NULL;
    record_put(record, mine);
    pycoll_status_t st = init_connect_authenticated(s, NULL, &s->root_addr, BOOT_KIND_ROOT, -1, what, &s->root_fd);
    if (st == PYCOLL_OK)
        st = boot_send_all(s->root_fd, record, sizeof record, s->deadline, what, s->error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = init_hear_root_table(s, what, RECORD_BYTES, &table);
    if (st == PYCOLL_ERR_TIMEOUT && s->root_fd >= 0)
        return init_fail(s, st, "rank %d reached the bootstrap root at %s but the other ranks did not all "
                         "arrive within %.3g s", (int)s->rank, s->root_text, s->timeout_s);
    if (st == PYCOLL_ERR_TIMEOUT) {
        char last[256];
        snprintf(last, sizeof last, "%s", s->error);
        /* last names the root and its address */
        return init_fail(s, st, "rank %d could not register within %.3g s: %s; did the process that made the unique id "
                         "call pycoll_comm_init_rank?", (int)s->rank, s->timeout_s, last);
    }
    for (int32_t r = 0; st == PYCOLL_OK && r < s->size; r++)
        record_get(table + (size_t)r * RECORD_BYTES, &s->table[r]);
    free(table);
    return st;
}
