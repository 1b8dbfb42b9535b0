/* What the bootstrap's files share: the unique id's decoded form, the listeners of the ids this process made,
 * and the thread's error message (pycoll_bootstrap_error). Internal to native/bootstrap. */
#ifndef PYCOLL_BOOTSTRAP_INTERNAL_H
#define PYCOLL_BOOTSTRAP_INTERNAL_H

#include "bootstrap/handshake.h"
#include "bootstrap/sockets.h"
#include "pycoll/bootstrap.h"

#define BOOT_ERROR_LEN 1024

typedef struct boot_id {
    boot_addr_t root;                  /* where the rank that serves registrations listens */
    uint8_t job[BOOT_JOB_BYTES];       /* names the job in every handshake */
    uint8_t secret[BOOT_SECRET_BYTES]; /* proves membership */
} boot_id_t;

pycoll_status_t boot_id_decode(const pycoll_unique_id_t *id, boot_id_t *out, char *error, size_t error_len);
/* The listening socket of this id (job and secret), made by this process and not claimed yet: the caller now
 * owns it. -1 when this process did not make the id (or already used it). */
int boot_claim_listener(const boot_id_t *id);

/* This thread's error buffer (BOOT_ERROR_LEN bytes). */
char *boot_error(void);

#endif
