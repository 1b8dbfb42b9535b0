/* Surviving a lost rank inside a vendor's communicator (pycoll/vendor.h: pycoll_vendor_comm_shrink): the
 * survivors make a communicator of themselves from the old one through the vendor's shrink, with no new unique
 * id and so no rendezvous. The old one must first have no work in flight: a revoke (taken here if it is still
 * only requested) stops it, and the vendor's revoke is complete once the communicator has left "in progress";
 * one that was never stopped is shrunk with the vendor's abort of work in flight. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <time.h>

#include "common/error_format.h"
#include "vendor_common.h"

/* exclude: ascending ranks of c, none of them this rank's. */
static pycoll_status_t check_exclude(const pycoll_vendor_comm_t *c, const int32_t *exclude, int32_t n, char *error,
                                     size_t error_len)
{
    if (n < 0 || n >= c->state.size || (n && !exclude))
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: shrink: %d ranks to leave out of %d",
                                   c->v->name, (int)n, (int)c->state.size);
    for (int32_t i = 0; i < n; i++) {
        if (exclude[i] < 0 || exclude[i] >= c->state.size || (i && exclude[i] <= exclude[i - 1]))
            return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: shrink: the ranks to leave out "
                                       "must be ascending ranks of the %d, got %d at %d", c->v->name,
                                       (int)c->state.size, (int)exclude[i], (int)i);
        if (exclude[i] == c->state.rank)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s: shrink: rank %d leaves itself out "
                                       "(only the ranks that remain call it)", c->v->name, (int)c->state.rank);
    }
    return PYCOLL_OK;
}

/* Until a revoked communicator has stopped its work (left "in progress"), within the deadline. */
static pycoll_status_t wait_revoked(pycoll_vendor_comm_t *c, int64_t deadline, char *error, size_t error_len)
{
    const pycoll_vendor_t *v = c->v;
    struct timespec pause = {0, 100000};
    for (;;) {
        int state = 0;
        if (v->async_error(c->comm, &state) != 0 || v->in_progress < 0 || state != v->in_progress)
            return PYCOLL_OK; /* stopped (an error it recorded before the revoke is the old communicator's) */
        if (pycoll_now_ns() >= deadline)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_TIMEOUT, "%s: the revoked communicator did not "
                                       "stop its work within %.3f s, so it cannot be shrunk", v->name,
                                       (double)c->timeout_ns / 1e9);
        nanosleep(&pause, NULL);
    }
}

pycoll_vendor_comm_t *pycoll_vendor_comm_shrink(pycoll_vendor_comm_t *c, const int32_t *exclude, int32_t n,
                                                pycoll_status_t *status, char *error, size_t error_len)
{
    const pycoll_vendor_t *v = c->v;
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
    vendor_comm_lock(c);
    vendor_take_abort_request(c, "the call"); /* a revoke still only requested stops the work in flight now */
    pycoll_status_t st = check_exclude(c, exclude, n, error, error_len);
    if (st == PYCOLL_OK && !vendor_has(v, PYCOLL_VENDOR_HAS_SHRINK))
        st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s: the loaded library has no shrink",
                                 v->name);
    else if (st == PYCOLL_OK && !c->comm)
        st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s: the communicator was aborted, so "
                                 "it cannot be shrunk", v->name);
    if (st == PYCOLL_OK && c->revoked)
        st = wait_revoked(c, deadline, error, error_len);
    int32_t below = 0; /* the survivors' numbering: this rank less the ranks left out below it */
    for (int32_t i = 0; st == PYCOLL_OK && i < n; i++)
        below += exclude[i] < c->state.rank;
    pycoll_vendor_comm_t *child = NULL;
    if (st == PYCOLL_OK && !(child = vendor_comm_alloc(v, c->state.rank - below, c->state.size - n, c->timeout_ns)))
        st = pycoll_format_error(error, error_len, PYCOLL_ERR_NOMEM, "%s: out of memory", v->name);
    if (st != PYCOLL_OK) {
        vendor_comm_unlock(c);
        *status = st;
        return NULL;
    }
    int r = v->shrink(c->comm, exclude, n, !c->revoked, &child->comm);
    vendor_comm_unlock(c);
    return vendor_comm_started(child, vendor_call_name(v, PYCOLL_VENDOR_CALL_SHRINK), r, deadline, status, error,
                               error_len);
}
