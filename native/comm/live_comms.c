/* Which communicators exist. A caller that keeps a communicator as a number rather than a reference -- an XLA
 * program compiled with one (pycoll.jax), which may run after Python closed it -- acquires it by that number:
 * it gets it only while it exists, and destroy waits for it to be released. The number is an id that is never
 * reused, not the address, which a later communicator may get. An intrusive list: registering cannot fail. */
#include <pthread.h>
#include <stdio.h>

#include "comm/comm_internal.h"
#include "comm/flight_recorder.h"
#include "transport/group_view.h"
#include "common/p2p_share.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Whether this process holds communicators of several ranks (ranks run as threads of one process), under lock;
 * read without it by comm_several_ranks. */
static atomic_int several_ranks;
static pthread_cond_t released = PTHREAD_COND_INITIALIZER;
static pycoll_comm_t *head;
static uint64_t last_id;

/* "group [0, 2]": a split's members as the job numbers them (its view's members are the root's ranks); the
 * communicator made by init is every rank. */
void comm_live_members(const pycoll_comm_t *c, char *out, size_t len)
{
    const int32_t n = c->p2p->size;
    if (!c->view) {
        snprintf(out, len, "the communicator of all %d ranks", (int)n);
        return;
    }
    size_t used = (size_t)snprintf(out, len, "group [");
    for (int32_t i = 0; i < n && used < len; i++) {
        if (i == 8 && n > 9) {
            used += (size_t)snprintf(out + used, len - used, ", ... %d more", (int)(n - i));
            break;
        }
        used += (size_t)snprintf(out + used, len - used, i ? ", %d" : "%d", (int)c->view->members[i]);
    }
    if (used < len)
        snprintf(out + used, len - used, "]");
}

/* p2p_group_namer_t: the communicator of p2p's family whose collectives (or point-to-point messages, or
 * pycoll's own calls) carry `group`. */
static int name_group(const pycoll_p2p_t *p2p, uint32_t group, char *out, size_t len)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    const comm_family_t *family = NULL;
    for (const pycoll_comm_t *c = head; c && !family; c = c->live_next)
        if (c->p2p == p2p || c->family->transport == p2p)
            family = c->family;
    for (const pycoll_comm_t *c = head; c && family && !found; c = c->live_next) {
        if (c->family != family)
            continue;
        const char *what = c->group == group                         ? ""
                           : (c->group ^ P2P_GROUP_SALT) == group      ? "point-to-point messages of "
                           : (c->group ^ INTERNAL_GROUP_SALT) == group ? "pycoll's internal calls on "
                                                                       : NULL;
        if (!what)
            continue;
        char members[80];
        comm_live_members(c, members, sizeof members);
        snprintf(out, len, "%s%s", what, members);
        found = 1;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

static pthread_once_t namer_once = PTHREAD_ONCE_INIT;
static void install_namer(void) { p2p_set_group_namer(name_group); }

/* Recount several_ranks (lock held): made by pycoll_comm_create (not splits), of two different ranks. */
static void count_ranks(void)
{
    int32_t seen = -1;
    int several = 0;
    for (const pycoll_comm_t *c = head; c && !several; c = c->live_next) {
        if (c->view)
            continue;
        several = seen >= 0 && c->p2p->rank != seen;
        seen = c->p2p->rank;
    }
    atomic_store_explicit(&several_ranks, several, memory_order_relaxed);
}

int comm_several_ranks(void) { return atomic_load_explicit(&several_ranks, memory_order_relaxed); }

void comm_live_add(pycoll_comm_t *comm)
{
    pthread_once(&namer_once, install_namer);
    comm->recorder = flight_recorder_create();
    pthread_mutex_lock(&lock);
    comm->live_id = ++last_id;
    comm->live_prev = NULL;
    comm->live_next = head;
    if (head)
        head->live_prev = comm;
    head = comm;
    count_ranks();
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
    count_ranks();
    pthread_mutex_unlock(&lock);
    flight_recorder_close(comm); /* unlisted first: no dump of every communicator reads it any more */
}

void comm_live_each(void (*fn)(pycoll_comm_t *comm, void *arg), void *arg)
{
    pthread_mutex_lock(&lock);
    for (pycoll_comm_t *c = head; c; c = c->live_next)
        if (!c->live_closing)
            fn(c, arg);
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
