/* Internal: the stages of accuracy="reproducible" that its host path (reproducible.c) and its path on a device's
 * memory table (reproducible_device.c) share. */
#ifndef PYCOLL_COMM_REPRODUCIBLE_STAGES_H
#define PYCOLL_COMM_REPRODUCIBLE_STAGES_H

#include "comm/comm_internal.h"

/* What this rank encodes and decodes: the `in` elements it contributes; the `out` it receives, from element
 * `first` of the whole (reduce_scatter: its block; reduce: none off the root). */
typedef struct repro_extent {
    int64_t in, out, first;
} repro_extent_t;
repro_extent_t repro_extent(const pycoll_comm_t *comm, const comm_call_t *call);

/* An all_reduce max of n int32 in place, as one of pycoll's internal calls numbered apart from the caller's.
 * values is memory of the transport's table, as any collective's data. */
pycoll_status_t repro_internal_max(pycoll_comm_t *comm, const comm_call_t *call, int32_t *values, int64_t n,
                                   char *error, size_t error_len);

/* The caller's collective, under the caller's descriptor, on `limbs` int64 limbs per element with op sum, from
 * send_limbs into recv_limbs (all_reduce passes the same block: summed where they were made). */
pycoll_status_t repro_sum_limbs(pycoll_comm_t *comm, const comm_call_t *call, int64_t limbs, int64_t *send_limbs,
                                int64_t *recv_limbs, int64_t out, char *error, size_t error_len,
                                pycoll_algorithm_t *ran);

/* reproducible_device.c: the call whose buffers are the memory of a device's table (p2p->kernels). */
pycoll_status_t repro_run_on_device(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                                    pycoll_algorithm_t *ran);

#endif
