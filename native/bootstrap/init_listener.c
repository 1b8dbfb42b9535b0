/* pycoll_comm_init_rank's connections: the loop that accepts and authenticates connections on a listener
 * while watching established ones (registration and the mesh both wait in it), and the connecting side. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/init_rank.h"

#define ACCEPT_PAUSE_S 0.25 /* how long a listener rests when accept() fails with nothing to make room */

static void note_drop(boot_state_t *s, const boot_conn_t *c, const char *why)
{
    s->dropped++;
    snprintf(s->dropped_why, sizeof s->dropped_why, "%.120s", why);
    if (s->on_drop)
        s->on_drop(s->drop_ctx, c, why);
}

void init_note_dropped(boot_state_t *s, const char *why) { note_drop(s, NULL, why); }

void init_dropped_clause(const boot_state_t *s, char *out, size_t len)
{
    if (s->dropped)
        snprintf(out, len, "; %d connection%s dropped (last: %s)", s->dropped, s->dropped == 1 ? "" : "s",
                 s->dropped_why);
    else
        out[0] = 0;
}

/* Closes a dropped connection after reading what it sent: closing with unread bytes would reset it, and the
 * other side would see a reset instead of the close. */
static void drain_and_close(int fd)
{
    uint8_t sink[4096];
    for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
        ;
    close(fd);
}

/* The connection to drop to make room: the oldest that has sent nothing, else the oldest still in its
 * handshake; -1 when every one is a rank of the job (never dropped). */
static int evictee(const boot_conn_t *pending, int n)
{
    int oldest = -1, oldest_silent = -1;
    for (int i = 0; i < n; i++) {
        if (boot_conn_authenticated(&pending[i]))
            continue;
        if (oldest < 0 || pending[i].deadline < pending[oldest].deadline)
            oldest = i;
        if (boot_conn_silent(&pending[i]) &&
            (oldest_silent < 0 || pending[i].deadline < pending[oldest_silent].deadline))
            oldest_silent = i;
    }
    return oldest_silent >= 0 ? oldest_silent : oldest;
}

static void evict(boot_state_t *s, boot_conn_t *pending, int *n, int i, const char *why)
{
    pending[i].drop = BOOT_DROP_JUNK;
    note_drop(s, &pending[i], why);
    drain_and_close(pending[i].fd);
    pending[i] = pending[--*n];
}

/* Accepts what waits on listen_fd into the pending handshakes. A flood of silent connections must not keep a rank
 * out: at the bound the oldest silent handshake makes room (a rank it evicts connects again; a rank's own handshake
 * takes milliseconds). Out of descriptors, the oldest handshake makes room too, or with none the listener rests
 * (*resume_at) instead of spinning. */
static void accept_pending(boot_state_t *s, int listen_fd, boot_conn_t *pending, int *n, int cap, double now,
                           double handshake_s, double *resume_at)
{
    for (int accepted = 0; accepted < cap;) {
        int fd = boot_accept(listen_fd);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            char why[160];
            int victim = evictee(pending, *n);
            if (victim < 0) {
                snprintf(why, sizeof why, "accept failed: %s; not accepting for %g s", strerror(errno),
                         ACCEPT_PAUSE_S);
                note_drop(s, NULL, why);
                *resume_at = now + ACCEPT_PAUSE_S;
                return;
            }
            snprintf(why, sizeof why, "dropped to free a file descriptor (%s)", strerror(errno));
            evict(s, pending, n, victim, why);
            continue;
        }
        if (fd < 0)
            return;
        accepted++;
        if (*n == cap) {
            int victim = evictee(pending, *n);
            if (victim < 0) { /* every one of them is a rank of the job: never dropped */
                close(fd);
                return;
            }
            char why[160];
            snprintf(why, sizeof why, "dropped: %d connections are already in the handshake (the oldest silent "
                     "one goes first)", *n);
            evict(s, pending, n, victim, why);
        }
        boot_conn_start(&pending[*n], fd, now);
        pending[(*n)++].deadline = now + handshake_s;
    }
}

pycoll_status_t init_serve(boot_state_t *s, const int *listen_fds, int n_listen, int kind, size_t extra,
                           admit_fn admit, done_fn done, const int *watch, int32_t n_watch, watch_fn on_watch,
                           const char *timeout_what)
{
    const int cap = s->max_pending > 0 ? s->max_pending : MAX_PENDING;
    const double handshake_s = s->handshake_s > 0 ? s->handshake_s : BOOT_HANDSHAKE_S;
    boot_conn_t *pending = calloc((size_t)cap, sizeof *pending);
    struct pollfd *fds = calloc((size_t)(n_listen + cap + n_watch), sizeof *fds);
    int *watching = malloc((size_t)(n_watch > 0 ? n_watch : 1) * sizeof *watching);
    pycoll_status_t st = PYCOLL_OK;
    int n = 0;
    double resume_at = 0.0; /* a listener resting after accept() failed is not polled before then */
    if (!pending || !fds || !watching)
        st = init_fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; watching && i < n_watch; i++)
        watching[i] = watch[i];
    while (st == PYCOLL_OK && !done(s)) {
        double now = boot_now(), wake = s->deadline;
        if (now >= s->deadline) {
            st = init_fail(s, PYCOLL_ERR_TIMEOUT, "%s", timeout_what);
            break;
        }
        if (boot_should_stop()) {
            st = init_fail(s, PYCOLL_ERR_INTERRUPTED, "set-up interrupted by the caller");
            break;
        }
        for (int i = 0; i < n; i++)
            wake = pending[i].deadline < wake ? pending[i].deadline : wake;
        int nfds = 0;
        for (int l = 0; l < n_listen; l++)
            fds[nfds++] = (struct pollfd){.fd = now >= resume_at ? listen_fds[l] : -1, .events = POLLIN};
        for (int i = 0; i < n; i++)
            fds[nfds++] = (struct pollfd){.fd = pending[i].fd, .events = POLLIN};
        for (int32_t i = 0; i < n_watch; i++)
            fds[nfds++] = (struct pollfd){.fd = watching[i], .events = POLLIN};
        if (wake - now > BOOT_CHECK_S)
            wake = now + BOOT_CHECK_S;
        int k = poll(fds, (nfds_t)nfds, (int)((wake - now) * 1000) + 1);
        if (k < 0 && errno != EINTR) {
            st = init_fail(s, PYCOLL_ERR_SYSTEM, "poll: %s", strerror(errno));
            break;
        }
        for (int32_t i = 0; i < n_watch && st == PYCOLL_OK; i++)
            if (watching[i] >= 0 && fds[n_listen + n + i].revents) {
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
            if (now > pending[i].deadline) {
                pending[i].drop = BOOT_DROP_QUIET;
                snprintf(why, sizeof why, "did not finish the handshake within %g s", handshake_s);
            }
            if (r == 0) {
                i++;
                continue;
            }
            int taken = 0;
            if (r > 0)
                st = admit(s, &pending[i], &taken);
            else
                note_drop(s, &pending[i], why);
            if (!taken)
                drain_and_close(pending[i].fd);
            pending[i] = pending[--n];
        }
        for (int l = 0; st == PYCOLL_OK && l < n_listen; l++)
            if (fds[l].fd >= 0 && (fds[l].revents & POLLIN))
                accept_pending(s, listen_fds[l], pending, &n, cap, now, handshake_s, &resume_at);
    }
    for (int i = 0; i < n; i++)
        close(pending[i].fd);
    free(pending);
    free(fds);
    free(watching);
    return st;
}

/* Connects to `to` and completes the handshake (up to the ACK). A listener drops handshakes while flooded:
 * a connection closed before the ACK is worth another try, until the deadline. One that keeps saying it serves
 * another job for BOOT_OTHER_JOB_GRACE_S is given up on: the unique id is not that listener's. */
pycoll_status_t init_connect_authenticated(boot_state_t *s, const boot_addr_t *from, const boot_addr_t *to, int kind,
                                           int32_t server_rank, const char *what, int *fd)
{
    const struct timespec pause = {0, 20 * 1000 * 1000};
    double other_job_since = -1.0;
    for (;;) {
        int refused = 0;
        pycoll_status_t st = boot_connect(from, to, s->deadline, what, fd, s->error, BOOT_ERROR_LEN);
        if (st == PYCOLL_OK)
            st = boot_client_handshake(*fd, &s->auth, kind, server_rank, s->deadline, what, &refused, NULL,
                                       s->error, BOOT_ERROR_LEN);
        int other_job = refused == BOOT_REFUSED_OTHER_JOB;
        if (st == PYCOLL_ERR_PEER_FAILURE && boot_should_stop())
            return init_fail(s, PYCOLL_ERR_INTERRUPTED, "set-up interrupted by the caller");
        double now = boot_now();
        if (!other_job)
            other_job_since = -1.0;
        else if (other_job_since < 0)
            other_job_since = now;
        else if (now - other_job_since >= BOOT_OTHER_JOB_GRACE_S) {
            init_close_fd(fd);
            char job[2 * 8 + 1];
            for (int i = 0; i < 8; i++)
                snprintf(job + 2 * i, 3, "%02x", s->auth.job[i]);
            return init_fail(s, PYCOLL_ERR_AUTH, "%s answers for another job: for %.0f s it refused rank %d, whose "
                             "unique id names job %s..., as a connection of another job. The id is stale (its job "
                             "ended and another job now listens at that address) or was made for another job: "
                             "every rank needs the id that the process at that address made for this job "
                             "(pycoll.get_unique_id / pycoll_unique_id_create, once per job)",
                             what, BOOT_OTHER_JOB_GRACE_S, (int)s->rank, job);
        }
        if (st != PYCOLL_ERR_PEER_FAILURE || boot_now() >= s->deadline)
            return st;
        init_close_fd(fd);
        nanosleep(&pause, NULL);
    }
}
