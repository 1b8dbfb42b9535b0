/* The opening of every bootstrap connection: each side proves it holds the unique id's secret (mutual
 * HMAC-SHA256 over both sides' fresh nonces), and says which job, rank and world size it belongs to.
 *
 *   client -> server  HELLO (64 bytes): "PYCB", version u16, kind u8, 0, rank i32, world size i32,
 *                     job (the id's 16 random bytes), nonce (32 random bytes)
 *   server -> client  its HELLO, then its proof HMAC(secret, "pycoll-server" || client HELLO || server HELLO)
 *   client -> server  its proof HMAC(secret, "pycoll-client" || client HELLO || server HELLO)
 *   server -> client  ACK (one byte): the connection is admitted as a rank of the job
 *   then, for BOOT_KIND_ROOT, the rank's registration with the root.
 *
 * Before the ACK a server that is flooded may drop the connection to make room, and the client connects
 * again; after it, a closed connection means the other side failed.
 *
 * Nonces on both sides stop a recorded proof from being replayed, the role label stops one side's proof from
 * being reflected as the other's, and the client checks the server before proving itself. Connections from
 * another job (another id), from a stranger, or that stay silent are dropped by the server, which goes on; one
 * of another job is first told so (a HELLO flagged BOOT_REFUSED_OTHER_JOB that carries nothing of this job),
 * so that a rank holding a stale id gives up after BOOT_OTHER_JOB_GRACE_S instead of at its deadline. The
 * refusal is not authenticated (the server cannot prove anything with the client's secret): a client only
 * gives up after every attempt over that grace was refused.
 *
 * The rendezvous store (BOOT_KIND_STORE, store_listener.c) opens its connections with the same handshake. Its job
 * is the store's instance: a client presents zeros on its first connection and learns the instance from the
 * reply, then presents it on every later one, so that a closing store (one that no longer takes zeros) still
 * admits its own clients and a store restarted at that address is noticed (as another job). The store may run
 * without a secret (an all-zero key, BOOT_FLAG_NO_SECRET in the HELLO): both sides must agree on that, and each
 * replies before checking, so that the other side can say which one lacks the secret. */
#ifndef PYCOLL_BOOTSTRAP_HANDSHAKE_H
#define PYCOLL_BOOTSTRAP_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/sha256.h"
#include "pycoll/types.h"

#define BOOT_HELLO_BYTES 64
#define BOOT_JOB_BYTES 16
#define BOOT_SECRET_BYTES 32
#define BOOT_KIND_ROOT 1 /* a rank registering with the root */
#define BOOT_KIND_PEER 2 /* one rank connecting to another for the TCP mesh */
#define BOOT_KIND_STORE 3 /* a client of the rendezvous store */
#define BOOT_ACK 0x06
#define BOOT_REFUSED_OTHER_JOB 1 /* HELLO flag byte: "this listener serves another job" */
#define BOOT_FLAG_NO_SECRET 2    /* HELLO flag byte: "this side has no secret" (the store only) */
#define BOOT_OTHER_JOB_GRACE_S 2.0 /* how long a client keeps trying a listener that says so */
#define BOOT_HANDSHAKE_S 5.0 /* a connection that does not finish its handshake this soon is dropped */
#define BOOT_MAX_EXTRA 512   /* the largest message that follows a handshake on the server side */

/* What one side knows of the job. */
typedef struct boot_auth {
    uint8_t secret[BOOT_SECRET_BYTES];
    uint8_t job[BOOT_JOB_BYTES];
    int32_t rank;       /* this side's rank (-1: none) */
    int32_t world_size;
    int no_secret;          /* the store only: no secret (the key is all zeros) */
    const int *open_to_new; /* a store server: nonzero while it admits clients presenting no instance */
} boot_auth_t;

/* Why a connection was dropped, for a server that reports it (the store logs and records these). */
#define BOOT_DROP_JUNK 0   /* it broke the protocol, or a limit */
#define BOOT_DROP_QUIET 1  /* no misbehaviour: it closed, stayed silent, or was turned away by design */
#define BOOT_DROP_AUTH 2   /* it failed authentication */

/* One connection being admitted by a server, driven by boot_server_step as its bytes arrive. */
typedef struct boot_conn {
    int fd;
    int state;
    double deadline;    /* BOOT_HANDSHAKE_S after it was accepted */
    size_t have;
    uint8_t buf[BOOT_MAX_EXTRA];
    uint8_t client_hello[BOOT_HELLO_BYTES], server_hello[BOOT_HELLO_BYTES];
    int32_t rank, world_size; /* the client's claim, authenticated once done */
    int kind;
    int drop;           /* BOOT_DROP_*: set with the reason when boot_server_step returns -1 */
} boot_conn_t;

void boot_conn_start(boot_conn_t *c, int fd, double now);
/* Whether c proved it holds the secret (and was sent the ACK). */
int boot_conn_authenticated(const boot_conn_t *c);
/* Whether c has sent nothing yet (a flooded server drops these first). */
int boot_conn_silent(const boot_conn_t *c);
/* Reads what arrived: 1 when the handshake and `extra` more bytes (then in c->buf) are in, 0 when more is to
 * come, -1 when the connection must be dropped (why says why; the caller closes it). */
int boot_server_step(boot_conn_t *c, const boot_auth_t *auth, int kind, size_t extra, char *why, size_t why_len);

/* How a server turned a client away (boot_client_handshake's *refused). */
#define BOOT_REFUSED_CLOSED 2 /* it closed the connection before the ACK: full, or closing; worth a retry */

/* The client side up to the ACK, blocking until the deadline: PYCOLL_ERR_AUTH when the server does not hold
 * the secret, PYCOLL_ERR_PEER_FAILURE when it closes (or drops us while flooded: *refused is then
 * BOOT_REFUSED_CLOSED, or BOOT_REFUSED_OTHER_JOB when it said it serves another job), PYCOLL_ERR_TIMEOUT.
 * server_rank: the rank expected at the other end (-1: any). server_job (may be NULL) gets the server's job: a
 * store client presenting zeros learns the instance there. */
pycoll_status_t boot_client_handshake(int fd, const boot_auth_t *auth, int kind, int32_t server_rank,
                                      double deadline, const char *what, int *refused,
                                      uint8_t server_job[BOOT_JOB_BYTES], char *error, size_t error_len);

/* Fresh random bytes (getrandom). */
pycoll_status_t boot_random(void *buf, size_t n, char *error, size_t error_len);

#endif
