/* Step 4 of pycoll_comm_init_rank (init_rank.c): each rank's shared-memory segment, created under the name
 * the job gives it, the names exchanged through the root and checked, the host's segments opened; and their
 * removal once the job's outcome is decided. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/init_rank.h"
#include "pycoll/transports.h"

#define SEGMENT_PREFIX "pycoll-" /* pycoll/launcher.py removes a dead rank's leftovers by this prefix and its pid */

/* The name of rank's segment: made from what every rank agrees on (the job's tag, the rank, the pid it
 * registered), so no rank ever needs to trust a name a peer sends. Never a path: no '/', no "..". */
static void segment_name(const boot_state_t *s, int32_t rank, char *out, size_t len)
{
    snprintf(out, len, SEGMENT_PREFIX "%d-%s-%d", (int)s->table[rank].pid, s->job_tag, (int)rank);
}

static void put_segment_of(const boot_state_t *s, int32_t rank, uint8_t *out)
{
    memcpy(out, s->table[rank].segment, SEGMENT_NAME_BYTES);
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
        return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d sent the shared-memory segment name \"%s\", not the "
                         "one this job gives it (%s): refused", (int)rank, got, expected);
    }
    memcpy(s->table[rank].segment, expected, SEGMENT_NAME_BYTES);
    return PYCOLL_OK;
}

pycoll_status_t init_take_name_from_status(boot_state_t *s, int32_t rank, const uint8_t *msg)
{
    return take_segment_name(s, rank, msg + 8);
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
        return init_fail(s, PYCOLL_ERR_SYSTEM, "cannot create %s/%s: %s", SHM_DIR, mine->segment, strerror(errno));
    }
    if (ftruncate(s->seg_fd, pycoll_shm_segment_bytes(s->size, s->cfg.shm_ring_bytes)) != 0)
        return init_fail(s, PYCOLL_ERR_SYSTEM, "cannot size %s: %s", s->seg_path, strerror(errno));
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
    init_status_put(msg, PYCOLL_OK, s->rank, s->table[s->rank].segment);
    uint8_t *names = NULL;
    st = boot_send_all(s->root_fd, msg, sizeof msg, s->deadline, "the bootstrap root", s->error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = init_hear_root_table(s, "the bootstrap root", SEGMENT_NAME_BYTES, &names);
    for (int32_t r = 0; st == PYCOLL_OK && r < s->size; r++)
        if (s->table[r].segment[0]) /* only the ranks that use shared memory send a name */
            st = take_segment_name(s, r, names + (size_t)r * SEGMENT_NAME_BYTES);
    free(names);
    if (st == PYCOLL_ERR_TIMEOUT)
        init_fail(s, st, "rank %d: the other ranks did not finish connecting within %.3g s", (int)s->rank,
                  s->timeout_s);
    return st;
}

/* Step 4 on the root: every rank's name (some arrived during the mesh), then all of them to every rank. */
static pycoll_status_t root_exchange_names(boot_state_t *s)
{
    int32_t failed;
    pycoll_status_t st = create_segment(s);
    if (st == PYCOLL_OK)
        st = init_hear_every_rank(s, s->names_seen, init_take_name_from_status, &failed);
    /* On a failure step 5 tells every rank. */
    return st == PYCOLL_OK ? init_send_root_table(s, SEGMENT_NAME_BYTES, put_segment_of) : st;
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
    pycoll_status_t verdict = init_status_get(s, msg);
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
        pycoll_status_t st = init_fail(s, errno == ELOOP ? PYCOLL_ERR_PEER_FAILURE : PYCOLL_ERR_SYSTEM,
                                       "rank %d cannot open rank %d's shared memory %s: %s", (int)s->rank, (int)r,
                                       path, errno == ELOOP ? "it is a symbolic link, refused" : strerror(errno));
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
    init_close_fd(fd);
    return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d refused rank %d's shared memory %s: %s (uid %u, %lld "
                     "bytes; this job's: uid %u, %lld bytes)", (int)s->rank, (int)r, path, why, (unsigned)st.st_uid,
                     (long long)st.st_size, (unsigned)geteuid(), (long long)expected);
}

pycoll_status_t init_open_segments(boot_state_t *s)
{
    if (s->transport == INIT_TRANSPORT_TCP)
        return PYCOLL_OK;
    pycoll_status_t st = s->size == 1 ? create_segment(s)
                         : s->root_fd >= 0 ? client_exchange_names(s)
                                           : root_exchange_names(s);
    if (st != PYCOLL_OK)
        return st;
    struct stat own;
    if (fstat(s->seg_fd, &own) != 0)
        return init_fail(s, PYCOLL_ERR_SYSTEM, "cannot stat %s: %s", s->seg_path, strerror(errno));
    uint64_t my_ns = init_pid_namespace();
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

/* Every segment name of this host's ranks, removed (a missing one is no error): set-up succeeded, so every
 * rank has opened them, or it failed for the whole job -- and then a rank killed after creating its segment
 * leaves it to the survivors. A rank whose own failure nobody has answered yet keeps to its own name: the
 * others may still be opening theirs, and would report the missing file instead of the real failure. */
void init_unlink_segments(boot_state_t *s)
{
    if (s->seg_path[0])
        unlink(s->seg_path);
    if (!s->shm_unlink_all || s->transport == INIT_TRANSPORT_UNDECIDED || s->transport == INIT_TRANSPORT_TCP)
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
