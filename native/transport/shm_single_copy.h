/* Single copies for the shared-memory transport's native collectives (shm_single_copy.c): a rank reads another's
 * buffer straight out of that rank's address space with process_vm_readv (cross-memory attach), instead of the
 * owner copying it into its slot and the reader copying it out. Used only where every rank of the job can read
 * every other and wants to: decided once, alike on every rank, by a probe during the first two rounds. */
#ifndef PYCOLL_TRANSPORT_SHM_SINGLE_COPY_H
#define PYCOLL_TRANSPORT_SHM_SINGLE_COPY_H

#include <stdint.h>

#include "transport/shm_layout.h"
#include "transport/shm_transport.h"

/* The round before whose post a rank publishes its verdict: every peer posted round 1 after its probe, so
 * every probe is readable then; once this round is over, every verdict is. */
#define SHM_SINGLE_COPY_VERDICT_ROUND 2

typedef struct shm_single_copy shm_single_copy_t;

/* For rank `rank` of `size`, whose peers have pids[r] in this pid namespace (0, or pids NULL: unknown, and then
 * no single copies). Publishes this rank's probe into `own`, its control page: call it before the first round.
 * NULL: out of memory. */
shm_single_copy_t *shm_single_copy_create(int32_t rank, int32_t size, const int32_t *pids, shm_coll_ctrl_t *own);
void shm_single_copy_destroy(shm_single_copy_t *s);
/* Before posting SHM_SINGLE_COPY_VERDICT_ROUND: read every peer's probe (areas[r]: rank r's collective area,
 * which starts with its control page) and publish this rank's verdict into its own. */
void shm_single_copy_publish_verdict(shm_single_copy_t *s, void *const *areas);
/* Once SHM_SINGLE_COPY_VERDICT_ROUND is over: whether every rank said yes (read once, then remembered), so the
 * same on every rank. */
int shm_single_copy_agreed(shm_single_copy_t *s, void *const *areas);
/* Copy len bytes at `address` in rank r's address space (the address r published) into dst; a read the kernel
 * refuses or cuts short is PYCOLL_ERR_PEER_FAILURE naming r. len is what this rank expects, never r's word. */
pycoll_status_t shm_single_copy_read(shm_transport_t *t, const shm_single_copy_t *s, int32_t r, void *dst,
                                     uint64_t address, int64_t len);

#endif
