/* The stream a vendor's collectives run on, as torch's ProcessGroupNCCL runs them: one stream per communicator,
 * ordered after the caller's stream by an event recorded there (cudaEventRecord, cudaStreamWaitEvent), so the
 * collective reads its inputs only after the caller's earlier work has written them, and the caller's later
 * work is ordered after the collective by the collective's end event -- by the host waiting for it (a blocking
 * call) or by the caller's stream waiting for it (an asynchronous one's Work, vendor_async.c). The host never
 * waits for a whole stream, which may hold work queued after the call: every host wait of the family (each
 * send/recv group, each step of pycoll's own schedules, too) looks at an event recorded behind the call. */
#include <stddef.h>

#include "vendor_common.h"

static int has_stream_order(const pycoll_vendor_t *v)
{
    return v->comm_stream_create && v->comm_stream_destroy && v->stream_wait_event && v->event_create &&
           v->event_record && v->event_query && v->event_destroy;
}

/* The stream and events, made at the first collective (on the caller's thread, so on its device); where any
 * fails, the communicator keeps its collectives on the caller's stream, as before. */
static int stream_order_ready(pycoll_vendor_comm_t *c)
{
    const pycoll_vendor_t *v = c->v;
    if (c->coll_stream)
        return 1;
    if (c->stream_order_off || !has_stream_order(v))
        return 0;
    void *stream = NULL, *order = NULL, *end = NULL;
    if (v->comm_stream_create(&stream) != 0)
        stream = NULL;
    if (stream && v->event_create(&order) != 0)
        order = NULL;
    if (order && v->event_create(&end) != 0)
        end = NULL;
    if (!end) {
        if (order)
            v->event_destroy(order);
        if (stream)
            v->comm_stream_destroy(stream);
        c->stream_order_off = 1;
        return 0;
    }
    c->coll_stream = stream, c->order_event = order, c->end_event = end;
    return 1;
}

void *vendor_collective_stream(pycoll_vendor_comm_t *c, void *caller)
{
    const pycoll_vendor_t *v = c->v;
    if (!stream_order_ready(c))
        return caller;
    /* One event serves every call: a stream wait takes the event's latest record when it is made. */
    if (v->event_record(c->order_event, caller) != 0 || v->stream_wait_event(c->coll_stream, c->order_event) != 0)
        return caller; /* the runtime refused: this call runs on the caller's stream, ordered by it */
    return c->coll_stream;
}

/* An event behind the work rather than a query of the stream: cudaStreamQuery reports the stream's latest work,
 * so the host would also wait for whatever other threads queue there meanwhile. */
pycoll_status_t vendor_wait_collective(pycoll_vendor_comm_t *c, const char *what, void *run_on, int64_t deadline)
{
    if (stream_order_ready(c) && c->v->event_record(c->end_event, run_on) == 0)
        return vendor_wait_done(c, what, NULL, c->end_event, deadline);
    return vendor_wait_done(c, what, run_on, NULL, deadline);
}

void vendor_join_collectives(pycoll_vendor_comm_t *c, void *stream)
{
    const pycoll_vendor_t *v = c->v;
    vendor_comm_lock(c);
    if (c->coll_stream && stream != c->coll_stream && v->event_record(c->order_event, c->coll_stream) == 0)
        v->stream_wait_event(stream, c->order_event);
    vendor_comm_unlock(c);
}

void vendor_streams_free(pycoll_vendor_comm_t *c)
{
    const pycoll_vendor_t *v = c->v;
    if (c->end_event)
        v->event_destroy(c->end_event);
    if (c->order_event)
        v->event_destroy(c->order_event);
    if (c->coll_stream)
        v->comm_stream_destroy(c->coll_stream);
    c->coll_stream = c->order_event = c->end_event = NULL;
}
