/* The rendezvous store's listener and its clients' handshake (pycoll.rendezvous.store_server, tcp_store): the
 * store's connections open with the bootstrap's handshake (kind BOOT_KIND_STORE, handshake.h) and the store's
 * server accepts them in the bootstrap's listener loop (init_serve: bounded handshakes, deadlines, floods),
 * then hands each admitted socket to the store, which serves its requests. One implementation of the
 * authentication and of the flood-proofing for both. Exported for pycoll's Python binding only (not in the
 * public headers): the store's secret is any bytes (its SHA-256 is the key), or none. */
#ifndef PYCOLL_BOOTSTRAP_STORE_LISTENER_H
#define PYCOLL_BOOTSTRAP_STORE_LISTENER_H

#include <stddef.h>
#include <stdint.h>

#include "pycoll/types.h"

#define PYCOLL_STORE_INSTANCE_BYTES 16

typedef struct pycoll_store_listener {
    int stop;        /* set (pycoll_store_listener_set) to end pycoll_store_listener_serve within 0.1 s */
    int open_to_new; /* cleared when the store starts closing: clients presenting no instance are turned away */
    void *ctx;
    /* An admitted client, whose descriptor is now the callee's; returns 0 to refuse it (then closed here). */
    int (*admitted)(void *ctx, int fd, int32_t rank);
    /* A dropped connection: the rank it claimed (-1: none), its BOOT_DROP_* kind, why. */
    void (*dropped)(void *ctx, int32_t rank, int kind, const char *why);
} pycoll_store_listener_t;

PYCOLL_API void pycoll_store_listener_set(int *flag, int value);

/* Accepts and authenticates on listen_fd until l->stop is set; PYCOLL_OK then, else why it could not serve. */
PYCOLL_API pycoll_status_t pycoll_store_listener_serve(pycoll_store_listener_t *l, int listen_fd,
                                                       const uint8_t *secret, size_t secret_len, int has_secret,
                                                       const uint8_t instance[PYCOLL_STORE_INSTANCE_BYTES],
                                                       int32_t max_pending, double handshake_s, char *error,
                                                       size_t error_len);

/* A store client's handshake on a connected non-blocking socket, until deadline (CLOCK_MONOTONIC seconds).
 * instance: in, the one presented (zeros on a first connection); out, the store's. *refused as
 * boot_client_handshake's. */
PYCOLL_API pycoll_status_t pycoll_store_client_handshake(int fd, const uint8_t *secret, size_t secret_len,
                                                         int has_secret, int32_t rank,
                                                         uint8_t instance[PYCOLL_STORE_INSTANCE_BYTES],
                                                         double deadline, const char *what, int *refused,
                                                         char *error, size_t error_len);

#endif
