/* A communicator family's fault-tolerance state (comm_internal.h's comm_family_t.ft): what agreements and
 * shrinks left (agree.c) and what makes the communicators they left behind refuse collectives (revoke.c).
 * Internal to native/comm. */
#ifndef PYCOLL_COMM_FT_STATE_H
#define PYCOLL_COMM_FT_STATE_H

#include "comm/comm_internal.h"

typedef struct comm_ft {
    uint32_t epoch;         /* agreements started on this family */
    uint32_t broken_before; /* communicators of an earlier generation are broken */
    pycoll_status_t broken_status;
    char broken_error[COMM_ERROR_LEN];
    int32_t size;           /* the family transport's ranks */
    uint8_t *failed;        /* [size]: ranks the agreements found lost */
    /* One agreement's requests and messages: kept until the next one starts (or the family goes), because a
     * peer lost meanwhile still holds its queued requests inside the transport. */
    pycoll_request_t *reqs;
    int32_t n_reqs, used_reqs;
    unsigned char *msgs;
} comm_ft_t;

/* The family's state, made at its first agreement (NULL: out of memory). */
comm_ft_t *comm_ft_of(comm_family_t *family);

/* For tests only: hook(coordinator) runs before each consensus round of every agreement of this process (agree.c),
 * so a test can stall or end a rank at a fixed point of the protocol; NULL (the default) runs none. */
PYCOLL_API void pycoll_test_agreement_hook(void (*hook)(int32_t coordinator));

#endif
