/* The communicator: one group of ranks over one transport. It numbers collectives, stamps what each one is on
 * the wire, sets its deadline, picks the algorithm, and after the first error refuses further collectives.
 * This is the C ABI that other frameworks call; pycoll's Python layer is a thin wrapper over it. */
#ifndef PYCOLL_COMM_H
#define PYCOLL_COMM_H

#include "pycoll/algorithms.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pycoll_comm pycoll_comm_t;

/* Takes ownership of p2p (destroyed with the communicator). timeout_s bounds every collective. */
PYCOLL_API pycoll_comm_t *pycoll_comm_create(pycoll_p2p_t *p2p, double timeout_s);
/* A checked close, before destroy: says goodbye to every peer and waits up to linger_s for theirs, to confirm
 * that every rank called the same collectives (a rooted collective whose ranks disagree on the root can
 * complete without an error on some ranks; this is where that is caught at the latest). Returns
 * PYCOLL_ERR_MISMATCH naming both sides, else PYCOLL_OK (peers that are gone or slower than linger_s are not
 * an error). No collective may follow. Optional: destroy alone closes without the check. */
PYCOLL_API pycoll_status_t pycoll_comm_finalize(pycoll_comm_t *comm, double linger_s);
PYCOLL_API void pycoll_comm_destroy(pycoll_comm_t *comm);

PYCOLL_API int32_t pycoll_comm_rank(const pycoll_comm_t *comm);
PYCOLL_API int32_t pycoll_comm_size(const pycoll_comm_t *comm);
PYCOLL_API void pycoll_comm_set_timeout(pycoll_comm_t *comm, double timeout_s);
PYCOLL_API void pycoll_comm_set_cost_model(pycoll_comm_t *comm, const pycoll_cost_model_t *model);
/* After a failed call: the message, and the rank it is about (or -1). */
PYCOLL_API const char *pycoll_comm_error(const pycoll_comm_t *comm);
PYCOLL_API int32_t pycoll_comm_failed_rank(const pycoll_comm_t *comm);
/* The algorithm the last collective ran (AUTO resolved). */
PYCOLL_API pycoll_algorithm_t pycoll_comm_last_algorithm(const pycoll_comm_t *comm);

/* sendbuf == recvbuf is in place. */
PYCOLL_API pycoll_status_t pycoll_comm_all_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                  pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_reduce_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                      int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                      pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_all_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t send_count, pycoll_dtype_t dtype);
PYCOLL_API pycoll_status_t pycoll_comm_broadcast(pycoll_comm_t *comm, void *buf, int64_t count,
                                                 pycoll_dtype_t dtype, int32_t root);
PYCOLL_API pycoll_status_t pycoll_comm_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                              pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_comm_barrier(pycoll_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
