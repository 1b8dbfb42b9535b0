/* Single copies between the ranks of one host: process_vm_readv (cross-memory attach), as Open MPI and MPICH
 * move large messages within a host, so that each byte of a large all-gather, broadcast or all-to-all is copied
 * once, from the owner's buffer into the reader's result, instead of into a slot and out of it.
 *
 * Whether the kernel lets a rank read another depends on things no rank can see alone (Yama's ptrace_scope, a
 * seccomp filter, user or pid namespaces, a process made undumpable), and every rank must take the same path in
 * every collective. So it is probed and agreed once, inside the first rounds every job runs anyway:
 *   - at attach, each rank publishes a random token and the address of its private copy of it;
 *   - before posting round 2 (every peer posted round 1 after publishing its probe), each rank reads every
 *     peer's token through process_vm_readv and publishes its verdict: yes only if every read returned the
 *     token (the right process, readable) and PYCOLL_SHM_SINGLE_COPY is not "off" here;
 *   - after round 2 every verdict is published; single copies are used by every rank or none: by all only if
 *     every verdict says yes.
 *
 * A published address is input from another process: it is handed to the kernel, never dereferenced here, and
 * the length read is always the reader's own (from its descriptor). An address the owner does not map, or a
 * read cut short, is a PeerFailure naming the owner. */
#include "transport/shm_single_copy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/settings.h"

/* At most this much per system call: the kernel caps one call's total (MAX_RW_COUNT, just under 2 GiB). */
#define MAX_READ_BYTES (1LL << 30)

enum agreement { UNDECIDED, AGREED, REFUSED };

struct shm_single_copy {
    int32_t rank, size;
    int32_t *pids;          /* per rank, in this pid namespace; 0: unknown */
    int wanted;             /* PYCOLL_SHM_SINGLE_COPY is not "off" here, and every peer's pid is known */
    int verdict;            /* wanted, and every peer's probe read back (published before round 2) */
    enum agreement agreement;
    uint64_t token;         /* the probe the peers read, at the address published */
};

static shm_coll_ctrl_t *ctrl_of(void *const *areas, int32_t r) { return (shm_coll_ctrl_t *)areas[r]; }

static uint64_t random_token(const void *salt)
{
    uint64_t token;
    if (getrandom(&token, sizeof token, GRND_NONBLOCK) == (ssize_t)sizeof token)
        return token;
    /* Only to tell processes apart, not a secret: the clock and an address do. */
    return (uint64_t)pycoll_now_ns() * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)salt ^ (uint64_t)getpid();
}

shm_single_copy_t *shm_single_copy_create(int32_t rank, int32_t size, const int32_t *pids, shm_coll_ctrl_t *own)
{
    shm_single_copy_t *s = calloc(1, sizeof *s);
    if (s)
        s->pids = calloc((size_t)size, sizeof *s->pids);
    if (!s || !s->pids) {
        free(s);
        return NULL;
    }
    s->rank = rank;
    s->size = size;
    const char *mode = setting_text(SETTING_SHM_SINGLE_COPY);
    s->wanted = !(mode && strcmp(mode, "off") == 0);
    for (int32_t r = 0; r < size; r++) {
        s->pids[r] = pids ? pids[r] : 0;
        if (r != rank && s->pids[r] <= 0)
            s->wanted = 0;
    }
    s->token = random_token(s);
    own->single_copy.probe_address = (uint64_t)(uintptr_t)&s->token;
    own->single_copy.probe_token = s->token;
    return s;
}

void shm_single_copy_destroy(shm_single_copy_t *s)
{
    if (!s)
        return;
    free(s->pids);
    free(s);
}

/* One system call's worth: bytes read, or -1 with errno. */
static ssize_t read_once(pid_t pid, void *dst, uint64_t address, size_t len)
{
    struct iovec local = {dst, len}, remote = {(void *)(uintptr_t)address, len};
    ssize_t n;
    do
        n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    while (n < 0 && errno == EINTR);
    return n;
}

/* Whether rank r's process can be read and is the one that published r's probe. */
static int probe_reads(const shm_single_copy_t *s, const shm_coll_ctrl_t *theirs, int32_t r)
{
    const uint64_t address = theirs->single_copy.probe_address, token = theirs->single_copy.probe_token;
    uint64_t seen = ~token;
    return read_once((pid_t)s->pids[r], &seen, address, sizeof seen) == (ssize_t)sizeof seen && seen == token;
}

void shm_single_copy_publish_verdict(shm_single_copy_t *s, void *const *areas)
{
    s->verdict = s->wanted;
    for (int32_t r = 0; r < s->size && s->verdict; r++)
        if (r != s->rank)
            s->verdict = probe_reads(s, ctrl_of(areas, r), r);
    ctrl_of(areas, s->rank)->single_copy.verdict = (uint32_t)s->verdict; /* the round's posted flag publishes it */
}

int shm_single_copy_agreed(shm_single_copy_t *s, void *const *areas)
{
    if (s->agreement == UNDECIDED) {
        /* This rank's own verdict is the one it computed, not what its page says now (never read back). */
        int yes = s->verdict;
        for (int32_t r = 0; r < s->size && yes; r++)
            if (r != s->rank)
                yes = ctrl_of(areas, r)->single_copy.verdict == 1;
        s->agreement = yes ? AGREED : REFUSED;
    }
    return s->agreement == AGREED;
}

pycoll_status_t shm_single_copy_read(shm_transport_t *t, const shm_single_copy_t *s, int32_t r, void *dst,
                                     uint64_t address, int64_t len)
{
    for (int64_t at = 0; at < len;) {
        const int64_t want = len - at < MAX_READ_BYTES ? len - at : MAX_READ_BYTES;
        const ssize_t n = read_once((pid_t)s->pids[r], (char *)dst + at, address + (uint64_t)at, (size_t)want);
        if (n <= 0) {
            const int why = n < 0 ? errno : 0;
            /* A rank that failed first may have let go of its buffer since: its abort, already in its rings
             * (it aborts before it returns), is the reason, not what this read met. */
            const pycoll_status_t first = shm_poll_peers(t);
            if (first != PYCOLL_OK)
                return first;
            if (why == ESRCH)
                return shm_peer_needed(t, r); /* its process is gone */
            char what[160];
            snprintf(what, sizeof what, "published the address of a buffer it does not have (read %lld of %lld "
                     "bytes at %#llx: %s)", (long long)at, (long long)len, (unsigned long long)address,
                     why ? strerror(why) : "nothing read");
            return shm_peer_corrupt(t, r, what);
        }
        at += n;
    }
    /* The same after a read that worked: an owner that failed after it published its buffer may have let go
     * of it during the read, and one that has not aborted by now had not let go of it then. */
    return shm_poll_peers(t);
}
