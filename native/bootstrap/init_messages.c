/* pycoll_comm_init_rank's status messages (a status, the rank it concerns, a text) and the exchanges between
 * the root and every rank built on them: a verdict to all, one message heard from each, a table to all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/init_rank.h"

void init_status_put(uint8_t *p, pycoll_status_t status, int32_t about, const char *message)
{
    memset(p, 0, STATUS_BYTES);
    put_u32(p, (uint32_t)status);
    put_u32(p + 4, (uint32_t)about);
    snprintf((char *)p + 8, MESSAGE_BYTES, "%s", message);
}

pycoll_status_t init_status_get(boot_state_t *s, const uint8_t *p)
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
    return init_fail(s, kept ? status : PYCOLL_ERR_PEER_FAILURE, "%s", message);
}

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

void init_broadcast_status(boot_state_t *s, pycoll_status_t status, int32_t about, const char *message)
{
    uint8_t msg[STATUS_BYTES];
    init_status_put(msg, status, about, message);
    send_to_every_rank(s, msg, sizeof msg, 1);
}

pycoll_status_t init_hear_every_rank(boot_state_t *s, const uint8_t *skip,
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
            st = init_status_get(s, msg);
        if (st == PYCOLL_OK && on_ok)
            st = on_ok(s, r, msg);
        if (st != PYCOLL_OK)
            *failed = r;
    }
    if (st == PYCOLL_ERR_TIMEOUT)
        init_fail(s, st, "rank %d did not finish connecting within %.3g s", (int)*failed, s->timeout_s);
    return st;
}

pycoll_status_t init_hear_root_table(boot_state_t *s, const char *what, size_t item_bytes, uint8_t **items)
{
    uint8_t status[STATUS_BYTES];
    size_t bytes = (size_t)s->size * item_bytes;
    *items = NULL;
    pycoll_status_t st = boot_recv_all(s->root_fd, status, sizeof status, s->deadline, what, s->error,
                                       BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = init_status_get(s, status);
    if (st == PYCOLL_OK && !(*items = malloc(bytes)))
        st = init_fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    if (st == PYCOLL_OK)
        st = boot_recv_all(s->root_fd, *items, bytes, s->deadline, what, s->error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK) {
        free(*items);
        *items = NULL;
    }
    return st;
}

pycoll_status_t init_send_root_table(boot_state_t *s, size_t item_bytes,
                                            void (*item)(const boot_state_t *s, int32_t rank, uint8_t *out))
{
    size_t bytes = STATUS_BYTES + (size_t)s->size * item_bytes;
    uint8_t *msg = calloc(1, bytes);
    if (!msg)
        return init_fail(s, PYCOLL_ERR_NOMEM, "out of memory");
    init_status_put(msg, PYCOLL_OK, s->rank, "");
    for (int32_t r = 0; r < s->size; r++)
        item(s, r, msg + STATUS_BYTES + (size_t)r * item_bytes);
    pycoll_status_t st = send_to_every_rank(s, msg, bytes, 0);
    free(msg);
    return st;
}
