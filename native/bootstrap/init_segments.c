/* Step 4 of pycoll_comm_init_rank (init_rank.c): each rank's shared-memory segment, created under a name it
 * draws at random, the names exchanged through the root and checked, the host's segments opened; and their
 * removal once the job's outcome is decided. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/handshake.h"
#include "bootstrap/init_rank.h"
#include "pycoll/bootstrap.h"
#include "pycoll/transports.h"

#define SEGMENT_PREFIX "pycoll-" /* pycoll/launcher.py removes a dead rank's leftovers by this prefix and its pid */
/* Each segment's name ends in random bits of its own, drawn by the rank that creates it: another user of the
 * host, who sees the names in /dev/shm and knows every pid, can neither guess a name before it exists nor
 * learn one segment's name from another's, so she cannot take a job's names first. */
#define SEGMENT_RANDOM_BYTES 16
#define SEGMENT_ATTEMPTS 8 /* names drawn before giving up: a taken name is drawn again */

/* The test seam (pycoll_test_force_segment_draws): the next forced_draws names of this process end in
 * forced_suffix instead of fresh random bits. */
static char forced_suffix[2 * SEGMENT_RANDOM_BYTES + 1];
static _Atomic int32_t forced_draws;

void pycoll_test_force_segment_draws(const char *suffix, int32_t n)
{
    snprintf(forced_suffix, sizeof forced_suffix, "%s", suffix ? suffix : "");
    atomic_store(&forced_draws, strlen(forced_suffix) == 2 * SEGMENT_RANDOM_BYTES ? n : 0);
}

static int take_forced_draw(char *out)
{
    int32_t left = atomic_load(&forced_draws);
    while (left > 0)
        if (atomic_compare_exchange_weak(&forced_draws, &left, left - 1)) {
            memcpy(out, forced_suffix, sizeof forced_suffix);
            return 1;
        }
    return 0;
}

/* What every name of rank's segment starts with: the pid it registered and the rank ("pycoll-<pid>-<rank>-").
 * Returns its length. */
static size_t name_prefix(const boot_state_t *s, int32_t rank, char *out, size_t len)
{
    return (size_t)snprintf(out, len, SEGMENT_PREFIX "%d-%d-", (int)s->table[rank].pid, (int)rank);
}

/* Whether name is one that rank's segment may have: its prefix, then SEGMENT_RANDOM_BYTES in lowercase hex and
 * nothing more -- never a path (no '/', no ".."), whatever a peer sends. */
static int is_segment_name(const boot_state_t *s, int32_t rank, const char *name)
{
    char prefix[SEGMENT_NAME_BYTES];
    size_t n = name_prefix(s, rank, prefix, sizeof prefix);
    if (strncmp(name, prefix, n) != 0)
        return 0;
    for (const char *c = name + n; c < name + n + 2 * SEGMENT_RANDOM_BYTES; c++)
        if (!(*c >= '0' && *c <= '9') && !(*c >= 'a' && *c <= 'f')) /* stops at the end of a shorter name */
            return 0;
    return name[n + 2 * SEGMENT_RANDOM_BYTES] == 0;
}

/* A fresh name for this rank's segment: its prefix, then new random bits. */
static pycoll_status_t draw_segment_name(boot_state_t *s, char out[SEGMENT_NAME_BYTES])
{
    size_t n = name_prefix(s, s->rank, out, SEGMENT_NAME_BYTES);
    _Static_assert(sizeof SEGMENT_PREFIX - 1 + 2 * 12 + 2 * SEGMENT_RANDOM_BYTES < SEGMENT_NAME_BYTES,
                   "a segment name fits its field");
    if (take_forced_draw(out + n))
        return PYCOLL_OK;
    uint8_t bits[SEGMENT_RANDOM_BYTES];
    pycoll_status_t st = boot_random(bits, sizeof bits, s->error, BOOT_ERROR_LEN);
    for (size_t i = 0; st == PYCOLL_OK && i < sizeof bits; i++)
        snprintf(out + n + 2 * i, 3, "%02x", bits[i]);
    return st;
}

static void put_segment_of(const boot_state_t *s, int32_t rank, uint8_t *out)
{
    memcpy(out, s->table[rank].segment, SEGMENT_NAME_BYTES);
}

/* A segment name from a message (a status message's text, or an item of the root's table): accepted only
 * when it is a name rank's segment may have (is_segment_name), else the peer that sent it is refused. */
static pycoll_status_t take_segment_name(boot_state_t *s, int32_t rank, const uint8_t *name)
{
    char got[SEGMENT_NAME_BYTES], prefix[SEGMENT_NAME_BYTES];
    memcpy(got, name, SEGMENT_NAME_BYTES);
    got[SEGMENT_NAME_BYTES - 1] = 0;
    if (!is_segment_name(s, rank, got)) {
        for (char *c = got; *c; c++) /* a peer's bytes, printed: nothing that could pass for a control code */
            *c = *c >= 0x20 && *c < 0x7f ? *c : '?';
        name_prefix(s, rank, prefix, sizeof prefix);
        return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d sent the shared-memory segment name \"%s\", not one "
                         "of its own (%s and %d hex digits): refused", (int)rank, got, prefix,
                         2 * SEGMENT_RANDOM_BYTES);
    }
    memcpy(s->table[rank].segment, got, SEGMENT_NAME_BYTES);
    return PYCOLL_OK;
}

pycoll_status_t init_take_name_from_status(boot_state_t *s, int32_t rank, const uint8_t *msg)
{
    return take_segment_name(s, rank, msg + 8);
}

/* This rank's segment, under a name nobody had: a name already taken (by anyone, a file or a link) is never
 * used nor followed, and another is drawn. */
static pycoll_status_t create_segment(boot_state_t *s)
{
    rank_record_t *mine = &s->table[s->rank];
    for (int attempt = 1;; attempt++) {
        pycoll_status_t st = draw_segment_name(s, mine->segment);
        if (st != PYCOLL_OK)
            return st;
        snprintf(s->seg_path, sizeof s->seg_path, "%s/%s", SHM_DIR, mine->segment);
        s->seg_fd = open(s->seg_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (s->seg_fd >= 0)
            break;
        int err = errno;
        s->seg_path[0] = 0; /* someone else's, or nothing: never to be removed on the way out */
        if (err != EEXIST)
            return init_fail(s, PYCOLL_ERR_SYSTEM, "cannot create %s/%s: %s", SHM_DIR, mine->segment, strerror(err));
        if (attempt == SEGMENT_ATTEMPTS)
            return init_fail(s, PYCOLL_ERR_SYSTEM, "cannot create rank %d's shared-memory segment in %s: the %d "
                             "names drawn at random for it were all taken (the last: %s), so another process "
                             "is creating names there as fast as they are drawn", (int)s->rank, SHM_DIR,
                             SEGMENT_ATTEMPTS, mine->segment);
    }
    struct stat st;
    if (fstat(s->seg_fd, &st) != 0)
        return init_fail(s, PYCOLL_ERR_SYSTEM, "cannot stat %s: %s", s->seg_path, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
        return init_fail(s, PYCOLL_ERR_SYSTEM, "%s, just created, is not a regular file of this user (uid %u): "
                         "refused", s->seg_path, (unsigned)st.st_uid);
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

/* Opens rank r's segment by the name it sent (checked by take_segment_name), never following a link, and keeps
 * it only when it is what that rank created: a regular file of this user, of the size every segment of the job
 * has, on the file system of this rank's own (own). Anything else is refused before it is mapped. */
static pycoll_status_t open_peer_segment(boot_state_t *s, int32_t r, const struct stat *own, int *fd)
{
    char path[SEGMENT_NAME_BYTES + 16];
    if (!is_segment_name(s, r, s->table[r].segment))
        return init_fail(s, PYCOLL_ERR_PEER_FAILURE, "rank %d, on this host, sent no shared-memory segment name",
                         (int)r);
    snprintf(path, sizeof path, "%s/%s", SHM_DIR, s->table[r].segment);
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

/* Whether process pid (of this pid namespace) has ended or is ending: gone, a zombie its parent has not reaped
 * yet, or a process the kernel is tearing down (PF_EXITING in its flags). The last matters because a rank learns
 * of a peer's death from its sockets closing, which the kernel does while that peer is still exiting (state 'R'
 * or 'D'): checking for a zombie alone would, on a busy machine, leave that peer's segment behind. A process
 * with PF_EXITING set runs no more user code, so nothing of its own will remove the segment. */
static int process_ended(int32_t pid)
{
    enum { PF_EXITING_FLAG = 0x4 }; /* include/linux/sched.h; part of /proc/<pid>/stat's ABI */
    char path[32], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *end_of_name = strrchr(text, ')'); /* "pid (name) state ppid pgrp session tty tpgid flags ..." */
    if (!end_of_name || end_of_name[1] != ' ')
        return 0;
    char state = end_of_name[2];
    if (state == 'Z' || state == 'X')
        return 1;
    unsigned long long flags = 0;
    return sscanf(end_of_name + 3, " %*d %*d %*d %*d %*d %llu", &flags) == 1 && (flags & PF_EXITING_FLAG);
}

/* Rank r's segment when r died before anyone learnt its name: whatever of this user's regular files in /dev/shm
 * has a name r's segment may have. Only for a process of this pid namespace that has ended -- a live one
 * removes its own, and may be a rank of another job too. */
static void remove_segment_of_dead(const boot_state_t *s, int32_t r, uint64_t my_ns)
{
    if (s->table[r].pid <= 0 || s->table[r].pid_ns != my_ns || !process_ended(s->table[r].pid))
        return;
    char prefix[SEGMENT_NAME_BYTES];
    size_t n = name_prefix(s, r, prefix, sizeof prefix);
    DIR *dir = opendir(SHM_DIR);
    if (!dir)
        return;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(dir)) != NULL)
        if (strncmp(e->d_name, prefix, n) == 0 && is_segment_name(s, r, e->d_name) &&
            fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid())
            unlinkat(dirfd(dir), e->d_name, 0);
    closedir(dir);
}

/* Every segment name of this host's ranks, removed (a missing one is no error): set-up succeeded, so every
 * rank has opened them, or it failed for the whole job -- and then a rank killed after creating its segment
 * leaves it to the survivors (by its name, or where it died before sending it, by its pid and rank). A rank
 * whose own failure nobody has answered yet keeps to its own name: the others may still be opening theirs, and
 * would report the missing file instead of the real failure. */
void init_unlink_segments(boot_state_t *s)
{
    if (s->seg_path[0])
        unlink(s->seg_path);
    if (!s->shm_unlink_all || s->transport == INIT_TRANSPORT_UNDECIDED || s->transport == INIT_TRANSPORT_TCP)
        return;
    uint64_t my_ns = init_pid_namespace();
    for (int32_t r = 0; r < s->size; r++) {
        if (r == s->rank || s->host_of[r] != s->host_of[s->rank] || s->table[r].pid <= 0)
            continue;
        if (!is_segment_name(s, r, s->table[r].segment)) {
            remove_segment_of_dead(s, r, my_ns);
            continue;
        }
        char path[SEGMENT_NAME_BYTES + 16];
        snprintf(path, sizeof path, "%s/%s", SHM_DIR, s->table[r].segment);
        unlink(path);
    }
}
