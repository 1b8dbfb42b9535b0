/* The flight recorder: each communicator keeps its last PYCOLL_TRACE_BUFFER calls in a bounded ring of fixed-size
 * entries, written on the call path without a lock, a system call or an allocation, and read by a dump from any
 * thread (a per-entry sequence lock gives it a consistent copy of each). Dumps are JSON files in the format of
 * docs/api.md's "Seeing what a job did": on request, on a pycoll error, on a signal (a thread woken through a
 * self-pipe writes them, so that a rank stuck in a wait still dumps) and at close when asked. */
#ifndef PYCOLL_COMM_FLIGHT_RECORDER_H
#define PYCOLL_COMM_FLIGHT_RECORDER_H

#include <stdint.h>

#include "pycoll/ids.h"

struct pycoll_comm;
struct comm_call;
typedef struct flight_recorder flight_recorder_t;

/* With the communicator (live_comms.c): NULL when the setting turns recording off or memory is short (recording
 * is then off for it; never an error). flight_recorder_close dumps first where PYCOLL_TRACE_ON_CLOSE asks. */
flight_recorder_t *flight_recorder_create(void);
void flight_recorder_close(struct pycoll_comm *comm);

/* A checked call enters (its record's id, 0 when nothing is recorded) and ends with its status, the algorithm
 * that ran (ignored for sends and receives) and, on failure, the error text. The first failure of a
 * communicator dumps every communicator of the process into PYCOLL_TRACE_DIR when it is set. */
uint64_t flight_recorder_begin(struct pycoll_comm *comm, const struct comm_call *call, int is_async);
/* A queued call starts on the progress thread: its waits count to it from here on (a blocking call's count from
 * flight_recorder_begin on the caller's thread). */
void flight_recorder_runs(struct pycoll_comm *comm, uint64_t id);
pycoll_status_t flight_recorder_end(struct pycoll_comm *comm, uint64_t id, pycoll_status_t st,
                                    pycoll_algorithm_t algorithm, const char *error);

#endif
