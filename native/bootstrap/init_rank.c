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
 * A segment's name is never taken from a peer: every rank derives it from the job (the id's job tag), the
 * owner's pid and rank ("pycoll-<pid>-<job>-<rank>", segment_name), checks that the name a peer sent is that
 * one, and opens it without following links, mapping it only when it is a regular file of this user, of the
 * expected size, beside this rank's own. A segment exists under its name only from step 4 to step 5, a few
 * milliseconds once every rank is there. Since every rank of a host knows every name there, the survivors
 * remove a segment whose owner was killed in that window: once the job's outcome is decided (the root's
 * verdict, or set-up done) each rank unlinks every segment name of its host; only a host whose every rank was
 * killed keeps one, and `pycoll run` removes those of its ranks (pycoll/launcher.py). Every wait ends at the
 * deadline (timeout_s from the call). The root keeps its registration connections open until
 * step 5, so it learns of a rank that dies during step 3 at once. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap_internal.h"
#include "common/error_format.h"
#include "pycoll/transports.h"

#define HOST_TEXT_BYTES 96
#define SEGMENT_NAME_BYTES 64
#define MESSAGE_BYTES 384
/* rank, world size, address, pid, pid namespace, ring bytes, transport, host, segment name */
#define RECORD_BYTES (4 + 4 + BOOT_ADDR_WIRE_BYTES + 4 + 8 + 8 + 4 + HOST_TEXT_BYTES + SEGMENT_NAME_BYTES)
#define STATUS_BYTES (4 + 4 + MESSAGE_BYTES) /* status, the rank it concerns, message */
#define MAX_PENDING 64 /* handshakes in progress on one listener: a flood cannot grow memory or stall others */
#define SHM_DIR "/dev/shm"
#define SEGMENT_PREFIX "pycoll-" /* pycoll/launcher.py removes a dead rank's leftovers by this prefix and its pid */
#define JOB_TAG_BYTES 8          /* of the id's job bytes, in hex in every segment name of the job */
/* Descriptors set-up needs beyond one per rank (two on the root): listeners, the root connection, what the
 * process already holds (Python's own, a few libraries'), and poll()'s pending handshakes (MAX_PENDING). */
#define SPARE_FDS (MAX_PENDING + 64)
#define SPIN_NS_OWN_CORE 2000000LL /* pycoll.plugins.tcp.spin_us tells why these two */
#define SPIN_NS_SHARED_CORE 200000LL

typedef struct rank_record {
    int32_t rank, world_size;
    boot_addr_t addr;
    int32_t pid;
    uint64_t pid_ns;
    int64_t ring_bytes;
    uint32_t transport;
    char host[HOST_TEXT_BYTES];
    char segment[SEGMENT_NAME_BYTES]; /* in the record: "shm" when this rank can use shared memory, else "";
                                       * from step 4 on: its segment's name */
} rank_record_t;

typedef struct boot_state {
    int32_t rank, size;
    double deadline, timeout_s;
    pycoll_init_config_t cfg;
    boot_id_t id;
    boot_auth_t auth;
    boot_addr_t root_addr;
    char root_text[BOOT_ADDR_TEXT_LEN];
    int listen_fd;      /* this rank's mesh listener */
    int root_listen_fd; /* the id's listener, on the root */
    int root_fd;        /* a non-root rank's connection to the root */
    int *client_fds;    /* the root's connection to each rank */
    rank_record_t *table;
    int32_t *host_of;
    int32_t n_hosts;
    const char *transport; /* "tcp", "shm" or "shm+tcp" */
    char job_tag[2 * JOB_TAG_BYTES + 1];
    int seg_fd;
    char seg_path[SEGMENT_NAME_BYTES + 16];
    int shm_unlink_all;     /* the outcome is decided: unlink every segment name of this host on the way out */
    int *peer_fds; /* TCP sockets, -1 where none */
    int *seg_fds;  /* this host's segments, -1 elsewhere */
    int32_t *pids;
    uint8_t *names_seen; /* the root: ranks whose segment name arrived while it still connected its mesh */
    int relayed;         /* s->error is another rank's failure, already naming it */
    int dropped;   /* connections to our listeners that failed their handshake */
    char dropped_why[128];
    char *error;
} boot_state_t;

static pycoll_status_t fail(boot_state_t *s, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static pycoll_status_t fail(boot_state_t *s, pycoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pycoll_vformat_error(s->error, BOOT_ERROR_LEN, status, fmt, ap);
    va_end(ap);
    return status;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---- records and status messages on the wire ---- */

static void record_put(uint8_t *p, const rank_record_t *r)
{
    put_u32(p, (uint32_t)r->rank);
    put_u32(p + 4, (uint32_t)r->world_size);
    boot_addr_put(p + 8, &r->addr);
    p += 8 + BOOT_ADDR_WIRE_BYTES;
    put_u32(p, (uint32_t)r->pid);
    put_u64(p + 4, r->pid_ns);
    put_u64(p + 12, (uint64_t)r->ring_bytes);
    put_u32(p + 20, r->transport);
    memcpy(p + 24, r->host, HOST_TEXT_BYTES);
    memcpy(p + 24 + HOST_TEXT_BYTES, r->segment, SEGMENT_NAME_BYTES);
}

static void record_get(const uint8_t *p, rank_record_t *r)
{
    r->rank = (int32_t)get_u32(p);
    r->world_size = (int32_t)get_u32(p + 4);
    boot_addr_get(p + 8, &r->addr);
    p += 8 + BOOT_ADDR_WIRE_BYTES;
    r->pid = (int32_t)get_u32(p);
    r->pid_ns = get_u64(p + 4);
    r->ring_bytes = (int64_t)get_u64(p + 12);
    r->transport = get_u32(p + 20);
    memcpy(r->host, p + 24, HOST_TEXT_BYTES);
    memcpy(r->segment, p + 24 + HOST_TEXT_BYTES, SEGMENT_NAME_BYTES);
    r->host[HOST_TEXT_BYTES - 1] = r->segment[SEGMENT_NAME_BYTES - 1] = 0;
}

static void status_put(uint8_t *p, pycoll_status_t status, int32_t about, const char *message)
{
    memset(p, 0, STATUS_BYTES);
    put_u32(p, (uint32_t)status);
    put_u32(p + 4, (uint32_t)about);
    snprintf((char *)p + 8, MESSAGE_BYTES, "%s", message);
}

/* A status message received: the status it carries, its text into s->error. */
static pycoll_status_t status_get(boot_state_t *s, const uint8_t *p)
{
    pycoll_status_t status = (pycoll_status_t)get_u32(p);
    if (status == PYCOLL_OK)
        return PYCOLL_OK;
    char message[MESSAGE_BYTES];
    memcpy(message, p + 8, MESSAGE_BYTES);
    message[MESSAGE_BYTES - 1] = 0;
    s->relayed = 1;
    /* The kinds a rank can act on keep their status; whatever else went wrong elsewhere is a peer's failure. */
    int kept = status == PYCOLL_ERR_INVALID || status == PYCOLL_ERR_AUTH || status == PYCOLL_ERR_TIMEOUT;
    return fail(s, kept ? status : PYCOLL_ERR_PEER_FAILURE, "%s", message);
}

static uint64_t pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void format_ranks(char *out, size_t len, const int32_t *ranks, int n)
{
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < n && used + 16 < len; i++)
        used += (size_t)snprintf(out + used, len - used, i ? ", %d" : "%d", (int)ranks[i]);
    if (n == 0)
        snprintf(out, len, "none");
}

/* ---- step 1: this rank's listener ---- */

/* Whether this process may open the descriptors set-up and the transports need: one per rank (its TCP socket
 * or its shared-memory segment), another per rank on the root (the registrations), and SPARE_FDS. Checked
 * before anything waits, so a world size the limit cannot hold fails at once, naming both. */
static pycoll_status_t check_descriptor_limit(boot_state_t *s)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
        return PYCOLL_OK;
    int root = s->root_listen_fd >= 0;
    long long needed = (long long)s->size * (root ? 2 : 1) + SPARE_FDS;
    if (s->size == 1 || needed <= (long long)limit.rlim_cur)
        return PYCOLL_OK;
    return fail(s, PYCOLL_ERR_INVALID, "world_size %d needs about %lld file descriptors on rank %d (%s%d spare), "
                "more than this process may open (RLIMIT_NOFILE %llu, hard limit %llu): raise it (ulimit -n, or "
                "resource.setrlimit) or use a smaller world_size", (int)s->size, needed, (int)s->rank,
                root ? "two per rank on the rank serving the id, " : "one per rank, ", SPARE_FDS,
                (unsigned long long)limit.rlim_cur, (unsigned long long)limit.rlim_max);
}

static pycoll_status_t prepare(boot_state_t *s, rank_record_t *mine)
{
    char *error = s->error;
    const char *ifname = s->cfg.ifname, *source = "ifname";
    if (!ifname || !ifname[0]) {
        ifname = getenv("PYCOLL_SOCKET_IFNAME");
        source = "PYCOLL_SOCKET_IFNAME";
    }
    memset(mine, 0, sizeof *mine);
    pycoll_status_t st = check_descriptor_limit(s);
    if (st != PYCOLL_OK)
        return st;
    mine->rank = s->rank;
    mine->world_size = s->size;
    mine->pid = (int32_t)getpid();
    mine->pid_ns = pid_namespace();
    mine->ring_bytes = s->cfg.shm_ring_bytes;
    mine->transport = s->cfg.transport;
    pycoll_host_identity(mine->host, sizeof mine->host);
    boot_addr_t here;
    st = boot_choose_address(ifname, source, &s->root_addr, &here, error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK && s->size > 1)
        st = boot_listen(&here, s->size + 16, &s->listen_fd, &mine->addr, error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK || s->cfg.transport == PYCOLL_TRANSPORT_TCP)
        return st;
    struct stat dir;
    if (stat(SHM_DIR, &dir) != 0 || !S_ISDIR(dir.st_mode)) {
        if (s->cfg.transport == PYCOLL_TRANSPORT_SHM)
            return fail(s, PYCOLL_ERR_SYSTEM, "%s is missing (POSIX shared memory is not mounted)", SHM_DIR);
        return PYCOLL_OK; /* no shared memory here: the job runs over TCP (every rank sees that in the table) */
    }
    snprintf(mine->segment, sizeof mine->segment, "shm");
    return PYCOLL_OK;
}

/* ---- step 2: registration ---- */

/* Tells every connected rank that the job failed, and why (best effort: they may be gone). */
/* The root sends msg to every connected rank: until the deadline, stopping at the first failure; or, with
 * best_effort, to each with a second's grace, whatever the others do (they may be gone). */
static pycoll_status_t send_to_every_rank(boot_state_t *s, const uint8_t *msg, size_t bytes, int best_effort)
{
    pycoll_status_t st = PYCOLL_OK;
    for (int32_t r = 0; r < s->size && (best_effort || st == PYCOLL_OK); r++) {
        if (s->client_fds[r] < 0)
            continue;
        char what[48];
        snprintf(what, sizeof what, "rank %d", (int)r);
        if (best_effort)
            boot_send_all(s->client_fds[r], msg, bytes, boot_now() + 1.0, what, NULL, 0);
        else
            st = boot_send_all(s->client_fds[r], msg, bytes, s->deadline, what, s->error, BOOT_ERROR_LEN);
    }
    return st;
}

static void broadcast_status(boot_state_t *s, pycoll_status_t status, int32_t about, const char *message)
{
    uint8_t msg[STATUS_BYTES];
    status_put(msg, status, about, message);
    send_to_every_rank(s, msg, sizeof msg, 1);
}

/* The root hears one status message from every connected rank but those marked in skip (may be NULL), in rank
 * order; each OK message's text goes to on_ok (may be NULL), which may refuse it. On a failure *failed names
 * the rank. */
static pycoll_status_t hear_every_rank(boot_state_t *s, const uint8_t *skip,
                                       pycoll_status_t (*on_ok)(boot_state_t *s, int32_t rank, const uint8_t *msg),
                                       int32_t *failed)
{
    pycoll_status_t st = PYCOLL_OK;
    *failed = -1;
    for (int32_t r = 0; r < s->size && st == PYCOLL_OK; r++) {
        if (s->client_fds[r] < 0 || (skip && skip[r]))
            continue;
        uint8_t msg[STATUS_BYTES];
        char what[48];
        snprintf(what, sizeof what, "rank %d", (int)r);
        st = boot_recv_all(s->client_fds[r], msg, sizeof msg, s->deadline, what, s->error, BOOT_ERROR_LEN);
        if (st == PYCOLL_OK)
            st = status_get(s, msg);
        if (st == PYCOLL_OK && on_ok)
            st = on_ok(s, r, msg);
        if (st != PYCOLL_OK)
            *failed = r;
    }
    if (st == PYCOLL_ERR_TIMEOUT)
        fail(s, st, "rank %d did not finish connecting within %.3g s", (int)*failed, s->timeout_s);
    return st;
}

/* A rank hears from the root: its status, then (where OK) one item of item_bytes per rank, into *items (freed
 * by the caller; NULL on failure). */
static pycoll_status_t hear_root_table(boot_state_t *s, const char *what, size_t item_bytes, uint8_t **items)
{
    uint8_t status[STATUS_BYTES];
    size_t bytes = (size_t)s->size * item_bytes;
    *items = NULL;
    pycoll_status_t st = boot_recv_all(s->root_fd, status, sizeof status, s->deadline, what, s->error,
                                       BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = status_get(s, status);
    if (st == PYCOLL_OK && !(*items = malloc(bytes)))
        st = fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    if (st == PYCOLL_OK)
        st = boot_recv_all(s->root_fd, *items, bytes, s->deadline, what, s->error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK) {
        free(*items);
        *items = NULL;
    }
    return st;
}

/* The root: an OK status, then one item of item_bytes per rank (item(s, r) writes rank r's), to every rank. */
static pycoll_status_t send_root_table(boot_state_t *s, size_t item_bytes,
                                       void (*item)(const boot_state_t *s, int32_t rank, uint8_t *out))
{
    size_t bytes = STATUS_BYTES + (size_t)s->size * item_bytes;
    uint8_t *msg = calloc(1, bytes);
    if (!msg)
        return fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    status_put(msg, PYCOLL_OK, s->rank, "");
    for (int32_t r = 0; r < s->size; r++)
        item(s, r, msg + STATUS_BYTES + (size_t)r * item_bytes);
    pycoll_status_t st = send_to_every_rank(s, msg, bytes, 0);
    free(msg);
    return st;
}

static void put_record_of(const boot_state_t *s, int32_t rank, uint8_t *out) { record_put(out, &s->table[rank]); }

static void put_segment_of(const boot_state_t *s, int32_t rank, uint8_t *out)
{
    memcpy(out, s->table[rank].segment, SEGMENT_NAME_BYTES);
}

/* The name of rank's segment: made from what every rank agrees on (the job's tag, the rank, the pid it
 * registered), so no rank ever needs to trust a name a peer sends. Never a path: no '/', no "..". */
static void segment_name(const boot_state_t *s, int32_t rank, char *out, size_t len)
{
    snprintf(out, len, SEGMENT_PREFIX "%d-%s-%d", (int)s->table[rank].pid, s->job_tag, (int)rank);
}

/* A segment name from a message (a status message's text, or an item of the root's table): accepted only
 * when it is the name rank's segment must have (segment_name), else the peer that sent it is refused. */
static pycoll_status_t take_segment_name(boot_state_t *s, int32_t rank, const uint8_t *name)
{
    char expected[SEGMENT_NAME_BYTES], got[SEGMENT_NAME_BYTES];
    segment_name(s, rank, expected, sizeof expected);
    memcpy(got, name, SEGMENT_NAME_BYTES);
    got[SEGMENT_NAME_BYTES - 1] = 0;
    if (strcmp(got, expected) != 0) {
        for (char *c = got; *c; c++) /* a peer's bytes, printed: nothing that could pass for a control code */
            *c = *c >= 0x20 && *c < 0x7f ? *c : '?';
        return fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d sent the shared-memory segment name \"%s\", not the "
                    "one this job gives it (%s): refused", (int)rank, got, expected);
    }
    memcpy(s->table[rank].segment, expected, SEGMENT_NAME_BYTES);
    return PYCOLL_OK;
}

static pycoll_status_t take_name_from_status(boot_state_t *s, int32_t rank, const uint8_t *msg)
{
    return take_segment_name(s, rank, msg + 8);
}

/* Why a registration cannot join this job, or PYCOLL_OK. */
static pycoll_status_t check_record(boot_state_t *s, const rank_record_t *r)
{
    const rank_record_t *root = &s->table[s->rank];
    if (r->world_size != s->size)
        return fail(s, PYCOLL_ERR_INVALID, "rank %d called pycoll_comm_init_rank with world size %d, rank %d "
                    "with %d", (int)r->rank, (int)r->world_size, (int)s->rank, (int)s->size);
    if (r->rank < 0 || r->rank >= s->size)
        return fail(s, PYCOLL_ERR_INVALID, "a process registered as rank %d of a world of %d", (int)r->rank,
                    (int)s->size);
    if (s->table[r->rank].world_size != 0)
        return fail(s, PYCOLL_ERR_INVALID, "two processes registered as rank %d", (int)r->rank);
    if (r->transport != root->transport || r->ring_bytes != root->ring_bytes)
        return fail(s, PYCOLL_ERR_INVALID, "rank %d asked for transport %u with shared-memory rings of %lld "
                    "bytes, rank %d for transport %u with %lld bytes; every rank must ask alike", (int)r->rank,
                    r->transport, (long long)r->ring_bytes, (int)s->rank, root->transport,
                    (long long)root->ring_bytes);
    return PYCOLL_OK;
}

static void note_dropped(boot_state_t *s, const char *why)
{
    s->dropped++;
    snprintf(s->dropped_why, sizeof s->dropped_why, "%.120s", why);
}

/* A dropped-connections clause for timeout messages ("" when none). */
static void dropped_clause(const boot_state_t *s, char *out, size_t len)
{
    if (s->dropped)
        snprintf(out, len, "; %d connection%s dropped (last: %s)", s->dropped, s->dropped == 1 ? "" : "s",
                 s->dropped_why);
    else
        out[0] = 0;
}

/* Accepts and advances handshakes on `listen_fd` until `done` says enough ranks are in. Shared by the root's
 * registration (kind ROOT, records follow) and the mesh (kind PEER). `admit` takes a finished connection:
 * PYCOLL_OK keeps it, another status ends the wait with that failure; it returns 1 in *keep when it took the
 * descriptor. `watch` (n_watch descriptors, -1 for none) are established connections that on_watch reads when
 * they become readable (watch[i] is rank i's, or the root's when n_watch is 1): it returns a failure to end
 * the wait, or sets *stop to stop watching that one. */
typedef pycoll_status_t (*admit_fn)(boot_state_t *s, boot_conn_t *c, int *taken);
typedef int (*done_fn)(const boot_state_t *s);
typedef pycoll_status_t (*watch_fn)(boot_state_t *s, int fd, int32_t who, int *stop);

static pycoll_status_t serve(boot_state_t *s, int listen_fd, int kind, size_t extra, admit_fn admit, done_fn done,
                             const int *watch, int32_t n_watch, watch_fn on_watch, const char *timeout_what)
{
    boot_conn_t *pending = calloc(MAX_PENDING, sizeof *pending);
    struct pollfd *fds = calloc((size_t)(1 + MAX_PENDING + n_watch), sizeof *fds);
    int *watching = malloc((size_t)(n_watch > 0 ? n_watch : 1) * sizeof *watching);
    pycoll_status_t st = PYCOLL_OK;
    int n = 0;
    if (!pending || !fds || !watching)
        st = fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; watching && i < n_watch; i++)
        watching[i] = watch[i];
    while (st == PYCOLL_OK && !done(s)) {
        double now = boot_now(), wake = s->deadline;
        if (now >= s->deadline) {
            st = fail(s, PYCOLL_ERR_TIMEOUT, "%s", timeout_what);
            break;
        }
        if (boot_should_stop()) {
            st = fail(s, PYCOLL_ERR_INTERRUPTED, "set-up interrupted by the caller");
            break;
        }
        for (int i = 0; i < n; i++)
            wake = pending[i].deadline < wake ? pending[i].deadline : wake;
        int nfds = 0;
        fds[nfds++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        for (int i = 0; i < n; i++)
            fds[nfds++] = (struct pollfd){.fd = pending[i].fd, .events = POLLIN};
        for (int32_t i = 0; i < n_watch; i++)
            fds[nfds++] = (struct pollfd){.fd = watching[i], .events = POLLIN};
        if (wake - now > BOOT_CHECK_S)
            wake = now + BOOT_CHECK_S;
        int k = poll(fds, (nfds_t)nfds, (int)((wake - now) * 1000) + 1);
        if (k < 0 && errno != EINTR) {
            st = fail(s, PYCOLL_ERR_SYSTEM, "poll: %s", strerror(errno));
            break;
        }
        for (int32_t i = 0; i < n_watch && st == PYCOLL_OK; i++)
            if (watching[i] >= 0 && fds[1 + n + i].revents) {
                int stop = 0;
                st = on_watch(s, watching[i], i, &stop);
                if (stop)
                    watching[i] = -1;
            }
        now = boot_now();
        for (int i = 0; i < n && st == PYCOLL_OK;) {
            char why[160];
            int r = now > pending[i].deadline ? -1 : boot_server_step(&pending[i], &s->auth, kind, extra, why,
                                                                     sizeof why);
            if (now > pending[i].deadline)
                snprintf(why, sizeof why, "silent for %.0f s during the handshake", BOOT_HANDSHAKE_S);
            if (r == 0) {
                i++;
                continue;
            }
            int taken = 0;
            if (r > 0)
                st = admit(s, &pending[i], &taken);
            else
                note_dropped(s, why);
            if (!taken)
                close(pending[i].fd);
            pending[i] = pending[--n];
        }
        /* A flood of silent connections must not keep a rank out: at the bound the oldest handshake makes room
         * (a rank it evicts connects again; a rank's own handshake takes milliseconds). */
        for (int accepted = 0, fd; st == PYCOLL_OK && (fds[0].revents & POLLIN) && accepted < MAX_PENDING &&
                                   (fd = boot_accept(listen_fd)) >= 0;
             accepted++) {
            if (n == MAX_PENDING) {
                int oldest = -1;
                for (int i = 0; i < n; i++)
                    if (!boot_conn_authenticated(&pending[i]) &&
                        (oldest < 0 || pending[i].deadline < pending[oldest].deadline))
                        oldest = i;
                if (oldest < 0) { /* every one of them is a rank of the job: never dropped */
                    close(fd);
                    break;
                }
                close(pending[oldest].fd);
                note_dropped(s, "evicted while too many connections were in their handshake");
                pending[oldest] = pending[--n];
            }
            boot_conn_start(&pending[n++], fd, now);
        }
    }
    for (int i = 0; i < n; i++)
        close(pending[i].fd);
    free(pending);
    free(fds);
    free(watching);
    return st;
}

static int all_registered(const boot_state_t *s)
{
    for (int32_t r = 0; r < s->size; r++)
        if (s->table[r].world_size == 0)
            return 0;
    return 1;
}

static pycoll_status_t admit_registration(boot_state_t *s, boot_conn_t *c, int *taken)
{
    rank_record_t r;
    record_get(c->buf, &r);
    if (r.rank != c->rank || r.world_size != c->world_size)
        return note_dropped(s, "its registration contradicts its handshake"), PYCOLL_OK;
    pycoll_status_t st = check_record(s, &r);
    if (st != PYCOLL_OK) {
        uint8_t msg[STATUS_BYTES];
        status_put(msg, st, r.rank, s->error);
        boot_send_all(c->fd, msg, sizeof msg, boot_now() + 1.0, "a rank", NULL, 0);
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
    return fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d closed its connection to the bootstrap root (rank %d) during "
                "set-up: it failed or exited", (int)who, (int)s->rank);
}

static pycoll_status_t root_register(boot_state_t *s, const rank_record_t *mine)
{
    s->table[s->rank] = *mine;
    char timeout_what[BOOT_ERROR_LEN];
    pycoll_status_t st = serve(s, s->root_listen_fd, BOOT_KIND_ROOT, RECORD_BYTES, admit_registration,
                               all_registered, s->client_fds, s->size, registered_rank_closed, "");
    close_fd(&s->root_listen_fd);
    if (st == PYCOLL_ERR_TIMEOUT) {
        int32_t *missing = malloc((size_t)s->size * sizeof *missing), *present = malloc((size_t)s->size * sizeof *present);
        int n_missing = 0, n_present = 0;
        for (int32_t r = 0; missing && present && r < s->size; r++) {
            if (s->table[r].world_size == 0)
                missing[n_missing++] = r;
            else
                present[n_present++] = r;
        }
        char m[256], p[256], d[200];
        format_ranks(m, sizeof m, missing, n_missing);
        format_ranks(p, sizeof p, present, n_present);
        dropped_clause(s, d, sizeof d);
        snprintf(timeout_what, sizeof timeout_what, "rank%s %s of %d did not register with the bootstrap root "
                 "(rank %d, %s) within %.3g s (registered: %s)%s", n_missing == 1 ? "" : "s", m, (int)s->size,
                 (int)s->rank, s->root_text, s->timeout_s, p, d);
        fail(s, PYCOLL_ERR_TIMEOUT, "%s", timeout_what);
        free(missing);
        free(present);
    }
    if (st != PYCOLL_OK) {
        broadcast_status(s, st, s->rank, s->error);
        return st;
    }
    return send_root_table(s, RECORD_BYTES, put_record_of);
}

/* Connects to `to` and completes the handshake (up to the ACK). A listener drops handshakes while flooded:
 * a connection closed before the ACK is worth another try, until the deadline. */
static pycoll_status_t connect_authenticated(boot_state_t *s, const boot_addr_t *to, int kind, int32_t server_rank,
                                             const char *what, int *fd)
{
    const struct timespec pause = {0, 20 * 1000 * 1000};
    for (;;) {
        pycoll_status_t st = boot_connect(to, s->deadline, what, fd, s->error, BOOT_ERROR_LEN);
        if (st == PYCOLL_OK)
            st = boot_client_handshake(*fd, &s->auth, kind, server_rank, s->deadline, what, s->error,
                                       BOOT_ERROR_LEN);
        if (st == PYCOLL_ERR_PEER_FAILURE && boot_should_stop())
            return fail(s, PYCOLL_ERR_INTERRUPTED, "set-up interrupted by the caller");
        if (st != PYCOLL_ERR_PEER_FAILURE || boot_now() >= s->deadline)
            return st;
        close_fd(fd);
        nanosleep(&pause, NULL);
    }
}

static pycoll_status_t client_register(boot_state_t *s, const rank_record_t *mine)
{
    char what[BOOT_ADDR_TEXT_LEN + 64];
    snprintf(what, sizeof what, "the bootstrap root at %s", s->root_text);
    uint8_t record[RECORD_BYTES], *table = NULL;
    record_put(record, mine);
    pycoll_status_t st = connect_authenticated(s, &s->root_addr, BOOT_KIND_ROOT, -1, what, &s->root_fd);
    if (st == PYCOLL_OK)
        st = boot_send_all(s->root_fd, record, sizeof record, s->deadline, what, s->error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = hear_root_table(s, what, RECORD_BYTES, &table);
    if (st == PYCOLL_ERR_TIMEOUT && s->root_fd >= 0)
        return fail(s, st, "rank %d reached the bootstrap root at %s but the other ranks did not all "
                    "arrive within %.3g s", (int)s->rank, s->root_text, s->timeout_s);
    if (st == PYCOLL_ERR_TIMEOUT) {
        char last[256];
        snprintf(last, sizeof last, "%s", s->error);
        /* last names the root and its address */
        return fail(s, st, "rank %d could not register within %.3g s: %s; did the process that made the unique id "
                    "call pycoll_comm_init_rank?", (int)s->rank, s->timeout_s, last);
    }
    for (int32_t r = 0; st == PYCOLL_OK && r < s->size; r++)
        record_get(table + (size_t)r * RECORD_BYTES, &s->table[r]);
    free(table);
    return st;
}

/* ---- step 3: hosts, transport, mesh, segments ---- */

static pycoll_status_t find_hosts_and_transport(boot_state_t *s)
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
        return fail(s, PYCOLL_ERR_NOMEM, "out of memory");
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
        format_ranks(ranks, sizeof ranks, away, away ? n_away : 0);
        free(away);
        return fail(s, PYCOLL_ERR_INVALID, "shared memory needs every rank on one host, but ranks %s are on "
                    "another host than rank 0 (%d hosts: different boot id, IPC or network namespace); use the "
                    "default transport or TCP", ranks, (int)s->n_hosts);
    }
    if (s->cfg.transport == PYCOLL_TRANSPORT_TCP || !all_can_share)
        s->transport = "tcp";
    else if (s->n_hosts == 1)
        s->transport = "shm";
    else
        s->transport = s->size > s->n_hosts ? "shm+tcp" : "tcp";
    return PYCOLL_OK;
}

/* Whether this rank talks to rank r over TCP. */
static int over_tcp(const boot_state_t *s, int32_t r)
{
    if (r == s->rank || strcmp(s->transport, "shm") == 0)
        return 0;
    return strcmp(s->transport, "tcp") == 0 || s->host_of[r] != s->host_of[s->rank];
}

static int mesh_complete(const boot_state_t *s)
{
    for (int32_t r = s->rank + 1; r < s->size; r++)
        if (over_tcp(s, r) && s->peer_fds[r] < 0)
            return 0;
    return 1;
}

static pycoll_status_t admit_peer(boot_state_t *s, boot_conn_t *c, int *taken)
{
    int32_t r = c->rank;
    if (c->world_size != s->size || r <= s->rank || r >= s->size || !over_tcp(s, r) || s->peer_fds[r] >= 0) {
        char why[96];
        snprintf(why, sizeof why, "a connection claiming rank %d was not expected", (int)r);
        note_dropped(s, why);
        return PYCOLL_OK;
    }
    s->peer_fds[r] = c->fd;
    *taken = 1;
    return PYCOLL_OK;
}

/* During the mesh the root watches every rank's registration connection: a rank sends its segment's name
 * there (step 4), or why it failed, as soon as its own part of the mesh is done -- a failure ends the root's
 * wait at once -- and a rank that closes it died. A rank watches its connection to the root: the root sends why the job failed, or closes because it
 * died. */
static pycoll_status_t root_hears_rank(boot_state_t *s, int fd, int32_t who, int *stop)
{
    uint8_t msg[STATUS_BYTES];
    char what[48];
    snprintf(what, sizeof what, "rank %d", (int)who);
    if (boot_recv_all(fd, msg, sizeof msg, boot_now() + 1.0, what, s->error, BOOT_ERROR_LEN) != PYCOLL_OK)
        return fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d failed or exited while the ranks connected", (int)who);
    pycoll_status_t st = status_get(s, msg);
    if (st == PYCOLL_OK) /* its segment's name (step 4), sent as soon as its own mesh was done */
        st = take_name_from_status(s, who, msg);
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
        return fail(s, PYCOLL_ERR_PEER_FAILURE, "the bootstrap root (the rank that made the unique id) failed or "
                    "exited while the ranks connected");
    pycoll_status_t st = status_get(s, msg);
    return st == PYCOLL_OK ? fail(s, PYCOLL_ERR_PEER_FAILURE, "the bootstrap root sent an unexpected message") : st;
}

static pycoll_status_t connect_mesh(boot_state_t *s)
{
    char what[BOOT_ADDR_TEXT_LEN + 32];
    pycoll_status_t st = PYCOLL_OK;
    for (int32_t r = 0; r < s->rank && st == PYCOLL_OK; r++) {
        if (!over_tcp(s, r))
            continue;
        char addr[BOOT_ADDR_TEXT_LEN];
        boot_addr_text(&s->table[r].addr, addr, sizeof addr);
        snprintf(what, sizeof what, "rank %d (%s)", (int)r, addr);
        st = connect_authenticated(s, &s->table[r].addr, BOOT_KIND_PEER, r, what, &s->peer_fds[r]);
        if (st == PYCOLL_ERR_TIMEOUT)
            fail(s, st, "rank %d did not accept rank %d's connection within %.3g s", (int)r, (int)s->rank,
                 s->timeout_s);
    }
    if (st != PYCOLL_OK)
        return st;
    int root = s->root_fd < 0;
    st = serve(s, s->listen_fd, BOOT_KIND_PEER, 0, admit_peer, mesh_complete, root ? s->client_fds : &s->root_fd,
               root ? s->size : 1, root ? root_hears_rank : rank_sees_root_message, "");
    if (st == PYCOLL_ERR_TIMEOUT) {
        int32_t *missing = malloc((size_t)s->size * sizeof *missing);
        int n = 0;
        for (int32_t r = s->rank + 1; missing && r < s->size; r++)
            if (over_tcp(s, r) && s->peer_fds[r] < 0)
                missing[n++] = r;
        char m[256], d[200];
        format_ranks(m, sizeof m, missing, missing ? n : 0);
        dropped_clause(s, d, sizeof d);
        free(missing);
        fail(s, st, "rank%s %s did not connect to rank %d within %.3g s%s", n == 1 ? "" : "s", m, (int)s->rank,
             s->timeout_s, d);
    }
    return st;
}

static pycoll_status_t create_segment(boot_state_t *s)
{
    rank_record_t *mine = &s->table[s->rank];
    segment_name(s, s->rank, mine->segment, sizeof mine->segment);
    snprintf(s->seg_path, sizeof s->seg_path, "%s/%s", SHM_DIR, mine->segment);
    /* O_EXCL: a file or link someone put under this name is never used (nor followed) */
    s->seg_fd = open(s->seg_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->seg_fd < 0) {
        s->seg_path[0] = 0;
        return fail(s, PYCOLL_ERR_SYSTEM, "cannot create %s/%s: %s", SHM_DIR, mine->segment, strerror(errno));
    }
    if (ftruncate(s->seg_fd, pycoll_shm_segment_bytes(s->size, s->cfg.shm_ring_bytes)) != 0)
        return fail(s, PYCOLL_ERR_SYSTEM, "cannot size %s: %s", s->seg_path, strerror(errno));
    return PYCOLL_OK;
}

/* Step 4 on a rank: its segment's name to the root, every name back. A failure here goes to the root the same
 * way, and step 5 tells the others. */
static pycoll_status_t client_exchange_names(boot_state_t *s)
{
    uint8_t msg[STATUS_BYTES];
    pycoll_status_t st = create_segment(s);
    if (st != PYCOLL_OK)
        return st;
    status_put(msg, PYCOLL_OK, s->rank, s->table[s->rank].segment);
    uint8_t *names = NULL;
    st = boot_send_all(s->root_fd, msg, sizeof msg, s->deadline, "the bootstrap root", s->error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = hear_root_table(s, "the bootstrap root", SEGMENT_NAME_BYTES, &names);
    for (int32_t r = 0; st == PYCOLL_OK && r < s->size; r++)
        if (s->table[r].segment[0]) /* only the ranks that use shared memory send a name */
            st = take_segment_name(s, r, names + (size_t)r * SEGMENT_NAME_BYTES);
    free(names);
    if (st == PYCOLL_ERR_TIMEOUT)
        fail(s, st, "rank %d: the other ranks did not finish connecting within %.3g s", (int)s->rank, s->timeout_s);
    return st;
}

/* Step 4 on the root: every rank's name (some arrived during the mesh), then all of them to every rank. */
static pycoll_status_t root_exchange_names(boot_state_t *s)
{
    int32_t failed;
    pycoll_status_t st = create_segment(s);
    if (st == PYCOLL_OK)
        st = hear_every_rank(s, s->names_seen, take_name_from_status, &failed);
    /* On a failure step 5 tells every rank. */
    return st == PYCOLL_OK ? send_root_table(s, SEGMENT_NAME_BYTES, put_segment_of) : st;
}

/* A peer's segment missing when this rank came to open it: the other ranks unlink the names only once the job's
 * outcome is decided, so the root's verdict that the job failed is on its way here -- and it, not the missing
 * file, is the reason to report. Returns that verdict, or st when none comes. */
static pycoll_status_t verdict_behind(boot_state_t *s, pycoll_status_t st)
{
    uint8_t msg[STATUS_BYTES];
    struct pollfd p = {.fd = s->root_fd, .events = POLLIN};
    if (s->root_fd < 0 || poll(&p, 1, 200) != 1 ||
        boot_recv_all(s->root_fd, msg, sizeof msg, boot_now() + 1.0, "the bootstrap root", NULL, 0) != PYCOLL_OK)
        return st;
    char mine[BOOT_ERROR_LEN];
    snprintf(mine, sizeof mine, "%s", s->error);
    pycoll_status_t verdict = status_get(s, msg);
    if (verdict == PYCOLL_OK) { /* not a verdict after all: keep this rank's own reason */
        snprintf(s->error, BOOT_ERROR_LEN, "%s", mine);
        return st;
    }
    return verdict;
}

/* Opens rank r's segment by the name the job gives it, never following a link, and keeps it only when it is
 * what that rank created: a regular file of this user, of the size every segment of the job has, on the file
 * system of this rank's own (own). Anything else is refused before it is mapped. */
static pycoll_status_t open_peer_segment(boot_state_t *s, int32_t r, const struct stat *own, int *fd)
{
    char name[SEGMENT_NAME_BYTES], path[SEGMENT_NAME_BYTES + 16];
    segment_name(s, r, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", SHM_DIR, name);
    *fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0) {
        int missing = errno == ENOENT;
        pycoll_status_t st = fail(s, errno == ELOOP ? PYCOLL_ERR_PEER_FAILURE : PYCOLL_ERR_SYSTEM, "rank %d cannot "
                                  "open rank %d's shared memory %s: %s", (int)s->rank, (int)r, path,
                                  errno == ELOOP ? "it is a symbolic link, refused" : strerror(errno));
        return missing ? verdict_behind(s, st) : st;
    }
    struct stat st = {0};
    int64_t expected = pycoll_shm_segment_bytes(s->size, s->cfg.shm_ring_bytes);
    const char *why = fstat(*fd, &st) != 0          ? strerror(errno)
                      : !S_ISREG(st.st_mode)        ? "not a regular file"
                      : st.st_uid != geteuid()      ? "owned by another user"
                      : st.st_dev != own->st_dev    ? "not on the file system of this rank's own segment"
                      : (int64_t)st.st_size != expected ? "not of the size of this job's segments"
                                                    : NULL;
    if (!why)
        return PYCOLL_OK;
    close_fd(fd);
    return fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d refused rank %d's shared memory %s: %s (uid %u, %lld "
                "bytes; this job's: uid %u, %lld bytes)", (int)s->rank, (int)r, path, why, (unsigned)st.st_uid,
                (long long)st.st_size, (unsigned)geteuid(), (long long)expected);
}

static pycoll_status_t open_segments(boot_state_t *s)
{
    if (strcmp(s->transport, "tcp") == 0)
        return PYCOLL_OK;
    pycoll_status_t st = s->size == 1 ? create_segment(s)
                         : s->root_fd >= 0 ? client_exchange_names(s)
                                           : root_exchange_names(s);
    if (st != PYCOLL_OK)
        return st;
    struct stat own;
    if (fstat(s->seg_fd, &own) != 0)
        return fail(s, PYCOLL_ERR_SYSTEM, "cannot stat %s: %s", s->seg_path, strerror(errno));
    uint64_t my_ns = pid_namespace();
    for (int32_t r = 0; r < s->size; r++) {
        if (s->host_of[r] != s->host_of[s->rank])
            continue;
        s->pids[r] = s->table[r].pid_ns == my_ns ? s->table[r].pid : 0; /* a pid means something only here */
        if (r == s->rank) {
            s->seg_fds[r] = s->seg_fd;
            s->seg_fd = -1;
            continue;
        }
        st = open_peer_segment(s, r, &own, &s->seg_fds[r]);
        if (st != PYCOLL_OK)
            return st;
    }
    return PYCOLL_OK;
}

/* ---- step 5: everyone ready ---- */

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
        pycoll_status_t st = mine != PYCOLL_OK ? mine : hear_every_rank(s, NULL, NULL, &failed);
        broadcast_status(s, st, failed, mine != PYCOLL_OK ? told : st != PYCOLL_OK ? s->error : "");
        return st;
    }
    /* A rank: say how it went, hear how it went everywhere. */
    uint8_t msg[STATUS_BYTES];
    status_put(msg, mine, s->rank, told);
    pycoll_status_t st = boot_send_all(s->root_fd, msg, sizeof msg, s->deadline, "the bootstrap root", NULL, 0);
    if (mine != PYCOLL_OK)
        return mine;
    if (st == PYCOLL_OK)
        st = boot_recv_all(s->root_fd, msg, sizeof msg, s->deadline, "the bootstrap root", s->error,
                           BOOT_ERROR_LEN);
    if (st == PYCOLL_ERR_TIMEOUT)
        return fail(s, st, "rank %d: the other ranks did not finish connecting within %.3g s", (int)s->rank,
                    s->timeout_s);
    return st == PYCOLL_OK ? status_get(s, msg) : st;
}

/* ---- the communicator ---- */

static pycoll_p2p_t *make_transport(boot_state_t *s)
{
    char *error = s->error;
    int32_t n = s->size;
    pycoll_p2p_t *tcp = NULL, *shm = NULL;
    int want_tcp = strcmp(s->transport, "shm") != 0, want_shm = strcmp(s->transport, "tcp") != 0;
    if (want_shm) {
        shm = pycoll_shm_transport_create(s->rank, n, s->seg_fds, s->pids, s->cfg.shm_ring_bytes, error,
                                          BOOT_ERROR_LEN);
        if (!shm)
            return NULL;
    }
    if (want_tcp) {
        tcp = pycoll_tcp_transport_create(s->rank, n, s->peer_fds, error, BOOT_ERROR_LEN);
        if (!tcp) {
            if (shm)
                shm->ops->destroy(shm);
            return NULL;
        }
        for (int32_t r = 0; r < n; r++)
            s->peer_fds[r] = -1; /* the transport owns them now */
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

static pycoll_status_t build_comm(boot_state_t *s, pycoll_comm_t **comm)
{
    pycoll_p2p_t *p2p = make_transport(s);
    if (!p2p)
        return PYCOLL_ERR_SYSTEM;
    p2p->check_interrupt = s->cfg.check_interrupt;
    p2p->interrupt_ctx = s->cfg.interrupt_ctx;
    int32_t local = 0;
    for (int32_t r = 0; r < s->size; r++)
        local += s->host_of[r] == s->host_of[s->rank];
    pycoll_comm_options_t options;
    pycoll_comm_options_init(&options);
    options.timeout_s = s->timeout_s;
    options.segment_bytes = s->cfg.segment_bytes;
    options.spin_ns = s->cfg.spin_ns >= 0 ? s->cfg.spin_ns
                                          : local <= cores_here() ? SPIN_NS_OWN_CORE : SPIN_NS_SHARED_CORE;
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

/* ---- the entry points ---- */

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
        return fail(s, PYCOLL_ERR_INVALID, "comm, id and config must not be NULL");
    if (config->version != PYCOLL_INIT_CONFIG_VERSION)
        return fail(s, PYCOLL_ERR_INVALID, "config is of version %u, this library reads version %d",
                    config->version, PYCOLL_INIT_CONFIG_VERSION);
    if (s->size < 1 || s->size > PYCOLL_MAX_WORLD_SIZE)
        return fail(s, PYCOLL_ERR_INVALID, "world_size must be in [1, %d] (PYCOLL_MAX_WORLD_SIZE), got %d",
                    PYCOLL_MAX_WORLD_SIZE, (int)s->size);
    if (s->rank < 0 || s->rank >= s->size)
        return fail(s, PYCOLL_ERR_INVALID, "rank must be in [0, %d), got %d", (int)s->size, (int)s->rank);
    if (!(config->timeout_s > 0))
        return fail(s, PYCOLL_ERR_INVALID, "timeout_s must be positive, got %g", config->timeout_s);
    if (config->transport > PYCOLL_TRANSPORT_SHM)
        return fail(s, PYCOLL_ERR_INVALID, "transport must be AUTO, TCP or SHM, got %u", config->transport);
    int64_t ring = config->shm_ring_bytes;
    if (ring != 0 && (ring < 4096 || (ring & (ring - 1))))
        return fail(s, PYCOLL_ERR_INVALID, "shm_ring_bytes must be 0 or a power of two of at least 4096, got %lld",
                    (long long)ring);
    pycoll_status_t st = boot_id_decode(id, &s->id, s->error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK)
        return st;
    s->root_addr = s->id.root;
    boot_addr_text(&s->id.root, s->root_text, sizeof s->root_text);
    for (int i = 0; i < JOB_TAG_BYTES; i++)
        snprintf(s->job_tag + 2 * i, 3, "%02x", s->id.job[i]);
    memcpy(s->auth.job, s->id.job, BOOT_JOB_BYTES);
    memcpy(s->auth.secret, s->id.secret, BOOT_SECRET_BYTES);
    return PYCOLL_OK;
}

/* Every segment name of this host's ranks, removed (a missing one is no error): set-up succeeded, so every
 * rank has opened them, or it failed for the whole job -- and then a rank killed after creating its segment
 * leaves it to the survivors. A rank whose own failure nobody has answered yet keeps to its own name: the
 * others may still be opening theirs, and would report the missing file instead of the real failure. */
static void unlink_segments(boot_state_t *s)
{
    if (s->seg_path[0])
        unlink(s->seg_path);
    if (!s->shm_unlink_all || !s->transport || strcmp(s->transport, "tcp") == 0)
        return;
    for (int32_t r = 0; r < s->size; r++) {
        if (r == s->rank || s->host_of[r] != s->host_of[s->rank] || s->table[r].pid <= 0)
            continue;
        char name[SEGMENT_NAME_BYTES], path[SEGMENT_NAME_BYTES + 16];
        segment_name(s, r, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", SHM_DIR, name);
        unlink(path);
    }
}

/* Closes what set-up opened (the arrays hold -1 wherever it opened nothing) and frees the state. */
static void release(boot_state_t *s)
{
    for (int32_t r = 0; r < s->size; r++) {
        if (s->client_fds)
            close_fd(&s->client_fds[r]);
        if (s->peer_fds)
            close_fd(&s->peer_fds[r]);
        if (s->seg_fds)
            close_fd(&s->seg_fds[r]);
    }
    close_fd(&s->listen_fd);
    close_fd(&s->root_listen_fd);
    close_fd(&s->root_fd);
    close_fd(&s->seg_fd);
    unlink_segments(s);
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
    boot_state_t s = {.rank = rank, .size = world_size, .listen_fd = -1, .root_listen_fd = -1, .root_fd = -1,
                      .seg_fd = -1, .error = boot_error()};
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
    s.peer_fds = no_descriptors(n);
    s.seg_fds = no_descriptors(n);
    s.pids = calloc(n, sizeof(int32_t));
    s.table = calloc(n, sizeof(rank_record_t));
    s.host_of = calloc(n, sizeof(int32_t));
    s.names_seen = calloc(n, 1);
    if (!s.client_fds || !s.peer_fds || !s.seg_fds || !s.pids || !s.table || !s.host_of || !s.names_seen) {
        release(&s);
        return fail(&s, PYCOLL_ERR_NOMEM, "out of memory");
    }

    rank_record_t mine;
    st = prepare(&s, &mine);
    if (world_size == 1) {
        close_fd(&s.root_listen_fd);
        s.table[0] = mine;
    } else if (st == PYCOLL_OK && s.root_listen_fd >= 0) {
        st = root_register(&s, &mine);
    } else if (st == PYCOLL_OK) {
        st = client_register(&s, &mine);
    } else if (s.root_listen_fd >= 0) {
        /* The root itself could not prepare: the ranks that reach it hear why. */
        close_fd(&s.root_listen_fd);
    }
    if (st == PYCOLL_OK) {
        st = find_hosts_and_transport(&s);
        if (st == PYCOLL_OK)
            st = connect_mesh(&s);
        if (st == PYCOLL_OK)
            st = open_segments(&s);
        if (world_size > 1)
            st = agree_ready(&s, st);
        /* decided for the whole job: set-up worked, this rank is the root (its verdict went out), or the failure
         * is the root's verdict about another rank */
        s.shm_unlink_all = st == PYCOLL_OK || s.root_fd < 0 || s.relayed || root_gone(&s);
    }
    if (st == PYCOLL_OK)
        st = build_comm(&s, comm);
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
