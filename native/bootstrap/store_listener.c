/* The rendezvous store's listener and its clients' handshake; see store_listener.h. */
#include "bootstrap/store_listener.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/init_rank.h"
#include "common/error_format.h"

void pycoll_store_listener_set(int *flag, int value) { __atomic_store_n(flag, value, __ATOMIC_RELAXED); }

static void store_auth(boot_auth_t *auth, const uint8_t *secret, size_t secret_len, int has_secret,
                       const uint8_t instance[PYCOLL_STORE_INSTANCE_BYTES], int32_t rank)
{
    memset(auth, 0, sizeof *auth);
    if (has_secret) {
        sha256_t h;
        sha256_init(&h);
        sha256_update(&h, secret, secret_len);
        sha256_final(&h, auth->secret);
    }
    auth->no_secret = !has_secret;
    memcpy(auth->job, instance, BOOT_JOB_BYTES);
    auth->rank = rank;
}

static int stop_requested(void *ctx)
{
    return __atomic_load_n(&((pycoll_store_listener_t *)ctx)->stop, __ATOMIC_RELAXED);
}

static int never_done(const boot_state_t *s) { return (void)s, 0; }

static pycoll_status_t admit_client(boot_state_t *s, boot_conn_t *c, int *taken)
{
    pycoll_store_listener_t *l = s->drop_ctx;
    *taken = l->admitted(l->ctx, c->fd, c->rank);
    return PYCOLL_OK;
}

static void report_drop(void *ctx, const boot_conn_t *c, const char *why)
{
    pycoll_store_listener_t *l = ctx;
    l->dropped(l->ctx, c ? c->rank : -1, c ? c->drop : BOOT_DROP_JUNK, why);
}

pycoll_status_t pycoll_store_listener_serve(pycoll_store_listener_t *l, int listen_fd, const uint8_t *secret,
                                            size_t secret_len, int has_secret,
                                            const uint8_t instance[PYCOLL_STORE_INSTANCE_BYTES],
                                            int32_t max_pending, double handshake_s, char *error, size_t error_len)
{
    boot_state_t *s = calloc(1, sizeof *s);
    char *message = malloc(BOOT_ERROR_LEN);
    if (!s || !message) {
        free(s);
        free(message);
        return pycoll_format_error(error, error_len, PYCOLL_ERR_NOMEM, "out of memory");
    }
    store_auth(&s->auth, secret, secret_len, has_secret, instance, -1);
    s->auth.open_to_new = &l->open_to_new;
    s->error = message;
    s->deadline = HUGE_VAL; /* serves until stopped */
    s->max_pending = max_pending;
    s->handshake_s = handshake_s;
    s->on_drop = report_drop;
    s->drop_ctx = l;
    boot_set_stop_check(stop_requested, l);
    pycoll_status_t st = init_serve(s, &listen_fd, 1, BOOT_KIND_STORE, 0, admit_client, never_done, NULL, 0, NULL, "");
    boot_set_stop_check(NULL, NULL);
    if (st == PYCOLL_ERR_INTERRUPTED)
        st = PYCOLL_OK;
    else
        pycoll_format_error(error, error_len, st, "%s", message);
    free(message);
    free(s);
    return st;
}

pycoll_status_t pycoll_store_client_handshake(int fd, const uint8_t *secret, size_t secret_len, int has_secret,
                                              int32_t rank, uint8_t instance[PYCOLL_STORE_INSTANCE_BYTES],
                                              double deadline, const char *what, int *refused, char *error,
                                              size_t error_len)
{
    boot_auth_t auth;
    store_auth(&auth, secret, secret_len, has_secret, instance, rank);
    /* The thread may be inside a bootstrap whose stop check reads this store: that wait is not this one's. */
    int (*outer)(void *ctx);
    void *outer_ctx;
    boot_get_stop_check(&outer, &outer_ctx);
    boot_set_stop_check(NULL, NULL);
    pycoll_status_t st = boot_client_handshake(fd, &auth, BOOT_KIND_STORE, -1, deadline, what, refused, instance,
                                               error, error_len);
    boot_set_stop_check(outer, outer_ctx);
    return st;
}
