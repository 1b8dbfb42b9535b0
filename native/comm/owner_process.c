/* Which process a communicator belongs to. After fork() the child holds a copy of the parent's communicators:
 * their connections and shared-memory rings are the parent's own, and the progress thread was not copied, so a
 * child that used one would interleave its messages with the parent's (peers combine the wrong data) or tear
 * down what the parent still uses. Each communicator records its process when made; every entry point that
 * touches the transport compares, and refuses with PYCOLL_ERR_FORKED naming the owner. The process id is
 * cached and refreshed in the child by a pthread_atfork handler: the compare costs a load, not a system call. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "comm/comm_internal.h"

static atomic_int current_pid;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void refresh(void) { atomic_store_explicit(&current_pid, (int)getpid(), memory_order_relaxed); }

static void install(void)
{
    refresh();
    pthread_atfork(NULL, NULL, refresh);
}

int comm_process_id(void)
{
    pthread_once(&once, install);
    return atomic_load_explicit(&current_pid, memory_order_relaxed);
}

int comm_foreign(const pycoll_comm_t *comm) { return comm->pid != comm_process_id(); }

pycoll_status_t comm_foreign_error(const pycoll_comm_t *comm, char *error, size_t error_len)
{
    snprintf(error, error_len,
             "this communicator belongs to process %d, not to this process (%d): it was made before a fork(); "
             "its connections and shared memory are that process's, so this process cannot use or close it. "
             "Create a new communicator here (pycoll.init) if this process is to be a rank",
             comm->pid, comm_process_id());
    return PYCOLL_ERR_FORKED;
}
