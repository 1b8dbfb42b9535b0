/* Which communicators exist. A caller that keeps a communicator as a number rather than a reference -- an XLA
 * program compiled with one (pycoll.jax), which may run after Python closed it -- acquires it by that number:
 * it gets it only while it exists, and destroy waits for it to be released. The number is an id that is never
 * reused, not the address, which a later communicator may get. An intrusive list: registering cannot fail. */
#include <pthread.h>

#include "comm/comm_internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t released = PTHREAD_COND_INITIALIZER;
static pycoll_comm_t *head;
static uint64_t last_id;

void comm_live_add(pycoll_comm_t *comm)
{
    pthread_mutex_lock(&lock);
    comm->live_id = ++last_id;
    comm->live_prev = NULL;
    comm->live_next = head;
    if (head)
        head->live_prev = comm;
    head = comm;
    pthread_mutex_unlock(&lock);
}

void comm_live_remove(pycoll_comm_t *comm)
{
    pthread_mutex_lock(&lock);
    comm->live_closing = 1; /* no new holder from here on */
    while (comm->live_holds > 0) /* each holder's collective has the communicator's deadline */
        pthread_cond_wait(&released, &lock);
    if (comm->live_prev)
        comm->live_prev->live_next = comm->live_next;
    else
        head = comm->live_next;
    if (comm->live_next)
        comm->live_next->live_prev = comm->live_prev;
    pthread_mutex_unlock(&lock);
}

uint64_t pycoll_comm_id(const pycoll_comm_t *comm) { return comm->live_id; }

pycoll_comm_t *pycoll_comm_acquire(uint64_t id)
{
    pthread_mutex_lock(&lock);
    pycoll_comm_t *comm = head;
    while (comm && comm->live_id != id)
        comm = comm->live_next;
    if (comm && comm->live_closing)
        comm = NULL;
    if (comm)
        comm->live_holds++;
    pthread_mutex_unlock(&lock);
    return comm;
}

void pycoll_comm_release(pycoll_comm_t *comm)
{
    pthread_mutex_lock(&lock);
    if (--comm->live_holds == 0)
        pthread_cond_broadcast(&released);
    pthread_mutex_unlock(&lock);
}
