/* The bootstrap handshake; see handshake.h. */
#include "bootstrap/handshake.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "bootstrap/sockets.h"
#include "common/error_format.h"

#define BOOT_VERSION 1
#define STATE_HELLO 0 /* waiting for the client's HELLO */
#define STATE_PROOF 1 /* sent ours, waiting for the client's proof */
#define STATE_EXTRA 2 /* authenticated, waiting for what follows */
#define STATE_DONE 3

static const char MAGIC[4] = {'P', 'Y', 'C', 'B'};
static const char ROLE_CLIENT[] = "pycoll-client";
static const char ROLE_SERVER[] = "pycoll-server";

pycoll_status_t boot_random(void *buf, size_t n, char *error, size_t error_len)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "getrandom: %s", strerror(errno));
        p += k, n -= (size_t)k;
    }
    return PYCOLL_OK;
}

static pycoll_status_t new_hello(uint8_t out[BOOT_HELLO_BYTES], const boot_auth_t *auth, int kind, char *error,
                                 size_t error_len)
{
    memcpy(out, MAGIC, 4);
    put_u16(out + 4, BOOT_VERSION);
    out[6] = (uint8_t)kind;
    out[7] = auth->no_secret ? BOOT_FLAG_NO_SECRET : 0;
    put_u32(out + 8, (uint32_t)auth->rank);
    put_u32(out + 12, (uint32_t)auth->world_size);
    memcpy(out + 16, auth->job, BOOT_JOB_BYTES);
    return boot_random(out + 32, 32, error, error_len);
}

static const char OTHER_JOB[] = "a connection of another job (another unique id)";

static const char STORE_CLOSING[] = "the store is closing: it takes no new clients";
static const uint8_t NO_JOB[BOOT_JOB_BYTES];

static int store_open(const boot_auth_t *auth)
{
    return auth->open_to_new && __atomic_load_n(auth->open_to_new, __ATOMIC_RELAXED);
}

/* Why a HELLO is not one of this job's, or NULL. A store client presenting no instance is one of its job while
 * the store takes new clients. */
static const char *foreign(const uint8_t hello[BOOT_HELLO_BYTES], const boot_auth_t *auth, int kind)
{
    if (memcmp(hello, MAGIC, 4) != 0)
        return "not a pycoll bootstrap connection (bad magic)";
    if (get_u16(hello + 4) != BOOT_VERSION)
        return "another version of the pycoll bootstrap protocol";
    if (hello[6] != kind)
        return "a connection of another kind";
    if (kind == BOOT_KIND_STORE && memcmp(hello + 16, NO_JOB, BOOT_JOB_BYTES) == 0)
        return store_open(auth) ? NULL : STORE_CLOSING;
    if (memcmp(hello + 16, auth->job, BOOT_JOB_BYTES) != 0)
        return OTHER_JOB;
    return NULL;
}

/* Why two sides cannot authenticate because one has no secret, or NULL (`other`: the other side's name). */
static const char *secret_mismatch(const uint8_t hello[BOOT_HELLO_BYTES], const boot_auth_t *auth, int server)
{
    int theirs = (hello[7] & BOOT_FLAG_NO_SECRET) != 0;
    if (theirs == auth->no_secret)
        return NULL;
    if (server)
        return theirs ? "authentication failed: the client does not use a secret"
                      : "authentication failed: the client uses a secret and this server has none";
    return theirs ? "authentication failed: the server does not use a secret"
                  : "authentication failed: the server uses a secret and this side has none (set PYCOLL_SECRET)";
}

/* The reply to a HELLO of another job: a HELLO of this kind flagged BOOT_REFUSED_OTHER_JOB, every other byte
 * zero (no job, no nonce, no proof: a stranger learns nothing of this job), then the connection closes. */
static void refuse_other_job(int fd, int kind)
{
    uint8_t reply[BOOT_HELLO_BYTES + SHA256_BYTES] = {0};
    memcpy(reply, MAGIC, 4);
    put_u16(reply + 4, BOOT_VERSION);
    reply[6] = (uint8_t)kind;
    reply[7] = BOOT_REFUSED_OTHER_JOB;
    put_u32(reply + 8, (uint32_t)-1);
    /* 96 bytes into a fresh connection's empty send buffer; best effort, the connection is dropped anyway. */
    (void)!send(fd, reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void proof(const boot_auth_t *auth, const char *role, const uint8_t *client_hello,
                  const uint8_t *server_hello, uint8_t out[SHA256_BYTES])
{
    const void *parts[3] = {role, client_hello, server_hello};
    const size_t lens[3] = {strlen(role), BOOT_HELLO_BYTES, BOOT_HELLO_BYTES};
    pycoll_hmac_sha256(auth->secret, BOOT_SECRET_BYTES, 3, parts, lens, out);
}

void boot_conn_start(boot_conn_t *c, int fd, double now)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->state = STATE_HELLO;
    c->deadline = now + BOOT_HANDSHAKE_S;
    c->rank = -1;
}

int boot_conn_authenticated(const boot_conn_t *c) { return c->state >= STATE_EXTRA; }

int boot_conn_silent(const boot_conn_t *c) { return c->state == STATE_HELLO && c->have == 0; }

static int drop(boot_conn_t *c, int why_kind, char *why, size_t why_len, const char *text)
{
    c->drop = why_kind;
    snprintf(why, why_len, "%s", text);
    return -1;
}

int boot_server_step(boot_conn_t *c, const boot_auth_t *auth, int kind, size_t extra, char *why, size_t why_len)
{
    for (;;) {
        size_t need = c->state == STATE_HELLO ? BOOT_HELLO_BYTES : c->state == STATE_PROOF ? SHA256_BYTES : extra;
        if (c->state == STATE_DONE || (c->state == STATE_EXTRA && extra == 0)) {
            c->state = STATE_DONE;
            return 1;
        }
        int r = boot_recv_some(c->fd, c->buf, &c->have, need);
        if (r < 0 && c->state == STATE_PROOF)
            /* A client leaves after our proof only when it found the proof wrong: different secrets. */
            return drop(c, BOOT_DROP_AUTH, why, why_len, "authentication failed: the client closed the connection "
                        "on seeing the server's proof (different secrets?)");
        if (r < 0)
            return drop(c, BOOT_DROP_QUIET, why, why_len, "closed the connection before finishing the handshake");
        if (r == 0)
            return 0;
        c->have = 0;
        if (c->state == STATE_HELLO) {
            const char *bad = foreign(c->buf, auth, kind);
            if (bad) {
                if (bad == OTHER_JOB)
                    refuse_other_job(c->fd, kind);
                return drop(c, bad == STORE_CLOSING ? BOOT_DROP_QUIET : BOOT_DROP_JUNK, why, why_len, bad);
            }
            memcpy(c->client_hello, c->buf, BOOT_HELLO_BYTES);
            c->rank = (int32_t)get_u32(c->buf + 8);
            c->world_size = (int32_t)get_u32(c->buf + 12);
            uint8_t reply[BOOT_HELLO_BYTES + SHA256_BYTES];
            if (new_hello(c->server_hello, auth, kind, why, why_len) != PYCOLL_OK)
                return -1;
            memcpy(reply, c->server_hello, BOOT_HELLO_BYTES);
            proof(auth, ROLE_SERVER, c->client_hello, c->server_hello, reply + BOOT_HELLO_BYTES);
            /* 96 bytes into a fresh connection's empty send buffer: never partial. */
            if (send(c->fd, reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof reply) {
                snprintf(why, why_len, "could not send the reply: %s", strerror(errno));
                return -1;
            }
            /* Checked after replying, so that the client too can say which side lacks the secret. */
            const char *mismatch = secret_mismatch(c->client_hello, auth, 1);
            if (mismatch)
                return drop(c, BOOT_DROP_AUTH, why, why_len, mismatch);
            c->state = STATE_PROOF;
        } else if (c->state == STATE_PROOF) {
            uint8_t expected[SHA256_BYTES];
            proof(auth, ROLE_CLIENT, c->client_hello, c->server_hello, expected);
            if (!equal_in_constant_time(expected, c->buf, SHA256_BYTES))
                return drop(c, BOOT_DROP_AUTH, why, why_len,
                            "authentication failed: the client's proof is wrong (it does not hold this job's secret)");
            /* The store may have begun closing while this client authenticated. */
            const char *bad = foreign(c->client_hello, auth, kind);
            if (bad)
                return drop(c, BOOT_DROP_QUIET, why, why_len, bad);
            /* One byte on a connection that has sent us everything so far: never partial. From here on this
             * connection is a rank of the job: the server no longer evicts it, and it no longer reconnects. */
            const uint8_t ack = BOOT_ACK;
            if (send(c->fd, &ack, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
                snprintf(why, why_len, "could not send the acknowledgement: %s", strerror(errno));
                return -1;
            }
            c->state = STATE_EXTRA;
        } else {
            c->state = STATE_DONE;
        }
    }
}

/* The server closed before admitting us: flooded, or (the store) closing. */
static pycoll_status_t closed_early(pycoll_status_t st, int *refused)
{
    if (st == PYCOLL_ERR_PEER_FAILURE)
        *refused = BOOT_REFUSED_CLOSED;
    return st;
}

pycoll_status_t boot_client_handshake(int fd, const boot_auth_t *auth, int kind, int32_t server_rank,
                                      double deadline, const char *what, int *refused,
                                      uint8_t server_job[BOOT_JOB_BYTES], char *error, size_t error_len)
{
    *refused = 0;
    uint8_t hello[BOOT_HELLO_BYTES], reply[BOOT_HELLO_BYTES + SHA256_BYTES], expected[SHA256_BYTES];
    pycoll_status_t st = new_hello(hello, auth, kind, error, error_len);
    if (st == PYCOLL_OK) /* a reset here is a server that closed while we were in its queue */
        st = closed_early(boot_send_all(fd, hello, sizeof hello, deadline, what, error, error_len), refused);
    if (st == PYCOLL_OK)
        st = closed_early(boot_recv_all(fd, reply, BOOT_HELLO_BYTES, deadline, what, error, error_len), refused);
    if (st != PYCOLL_OK)
        return st;
    if (memcmp(reply, MAGIC, 4) == 0 && get_u16(reply + 4) == BOOT_VERSION && reply[6] == kind &&
        (reply[7] & BOOT_REFUSED_OTHER_JOB)) {
        *refused = BOOT_REFUSED_OTHER_JOB;
        return pycoll_format_error(error, error_len, PYCOLL_ERR_PEER_FAILURE, "%s refused the connection: it "
                                   "serves another job (another unique id)", what);
    }
    boot_auth_t expect = *auth;
    if (kind == BOOT_KIND_STORE && memcmp(auth->job, NO_JOB, BOOT_JOB_BYTES) == 0)
        memcpy(expect.job, reply + 16, BOOT_JOB_BYTES); /* a first connection learns the store's instance */
    const char *bad = foreign(reply, &expect, kind);
    if (bad)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_PEER_FAILURE, "%s answered as %s", what, bad);
    bad = secret_mismatch(reply, auth, 0);
    if (bad)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_AUTH, "%s", bad);
    st = closed_early(boot_recv_all(fd, reply + BOOT_HELLO_BYTES, SHA256_BYTES, deadline, what, error, error_len),
                      refused);
    if (st != PYCOLL_OK)
        return st;
    proof(auth, ROLE_SERVER, hello, reply, expected);
    if (!equal_in_constant_time(expected, reply + BOOT_HELLO_BYTES, SHA256_BYTES))
        return pycoll_format_error(error, error_len, PYCOLL_ERR_AUTH, "authentication failed: %s's proof is wrong "
                                   "(it does not hold this job's secret)", what);
    int32_t their_rank = (int32_t)get_u32(reply + 8);
    if (server_rank >= 0 && their_rank != server_rank)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_PEER_FAILURE, "%s answered as rank %d", what,
                                   (int)their_rank);
    proof(auth, ROLE_CLIENT, hello, reply, expected);
    uint8_t ack = 0;
    st = closed_early(boot_send_all(fd, expected, sizeof expected, deadline, what, error, error_len), refused);
    if (st == PYCOLL_OK)
        st = closed_early(boot_recv_all(fd, &ack, 1, deadline, what, error, error_len), refused);
    if (st == PYCOLL_OK && ack != BOOT_ACK)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_PEER_FAILURE, "%s answered the handshake with %u",
                                   what, ack);
    if (st == PYCOLL_OK && server_job)
        memcpy(server_job, reply + 16, BOOT_JOB_BYTES);
    return st;
}
