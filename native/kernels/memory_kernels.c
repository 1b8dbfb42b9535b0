/* The host's memory table and the helpers every user of a table shares (memory_kernels.h). */
#include "kernels/memory_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* memmove, not memcpy: the table's copy allows overlap. glibc's memcpy and memmove are one routine for
 * non-overlapping ranges, so the host path costs what it did. */
static pycoll_status_t host_copy(void *dst, const void *src, int64_t nbytes)
{
    memmove(dst, src, (size_t)nbytes);
    return PYCOLL_OK;
}

static void *host_alloc(int64_t nbytes)
{
    return malloc(nbytes > 0 ? (size_t)nbytes : 1);
}

/* No reproducible entries: on host memory comm/reproducible.c calls the host kernels itself. */
static const pycoll_memory_kernels_t host_kernels = {
    .memory = "host", .reduce_into = pycoll_reduce_into, .reduce = pycoll_reduce, .scale_avg = pycoll_scale_avg,
    .compensated_load = pycoll_compensated_load, .compensated_combine = pycoll_compensated_combine,
    .compensated_store = pycoll_compensated_store, .copy = host_copy, .alloc = host_alloc, .free = free};

const pycoll_memory_kernels_t *memory_kernels(const pycoll_p2p_t *p2p)
{
    return p2p->kernels ? p2p->kernels : &host_kernels;
}

int memory_stream_ordered(const pycoll_memory_kernels_t *k)
{
    return k && k->version >= PYCOLL_MEMORY_KERNELS_STREAM_VERSION && k->stream_ordered;
}

const char *memory_error(const pycoll_memory_kernels_t *k)
{
    static _Thread_local char detail[PYCOLL_ERROR_LEN];
    const char *e = k->last_error ? k->last_error() : NULL;
    if (!e || !e[0])
        return "";
    snprintf(detail, sizeof detail, "; %s", e);
    return detail;
}

pycoll_status_t memory_copy(pycoll_p2p_t *p2p, void *dst, const void *src, int64_t nbytes, const char *what)
{
    if (nbytes <= 0 || dst == src)
        return PYCOLL_OK;
    const pycoll_memory_kernels_t *k = memory_kernels(p2p);
    pycoll_status_t status = k->copy(dst, src, nbytes);
    if (status == PYCOLL_OK)
        return status;
    return pycoll_p2p_fail(p2p, status, -1, "%s: copy of %lld bytes failed on %s memory (status %d)%s", what,
                           (long long)nbytes, k->memory, (int)status, memory_error(k));
}
