/* The guarded test table (guarded_memory.c) made stream-ordered, as a device table is (stream_ordered = 1): each
 * data entry is queued on one stream of the fake CUDA runtime (its fake_stream_submit, fake_collectives.c, whose
 * address the test passes) and runs there, off the caller's thread, in order with the fake NCCL's sends and
 * receives on that stream, each after a delay: so a step that the transport issued before the work it depends on
 * had been queued on the same stream would read stale data, and the result would be wrong. alloc runs at once
 * (a new block is nobody's yet); free is queued (the block may still be read by queued work); copy_to_host is
 * queued and waited for (the host reads its bytes next). Built into the guarded library (guarded_memory.py).
 * pycoll_streamed_memory_failures counts entries that failed on the stream (the caller was told PYCOLL_OK). */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/memory_kernels.h"

const pycoll_memory_kernels_t *pycoll_test_memory_table(void); /* guarded_memory.c */

typedef long long (*submit_fn)(void *stream, void (*fn)(void *), void *arg, void *after_stream, long long after_mark);

static submit_fn submit;
static void *stream;
static long delay_us;
static const pycoll_memory_kernels_t *base;
static _Atomic int64_t failures;

enum { REDUCE_INTO, REDUCE, SCALE_AVG, LOAD, COMBINE, STORE, COPY, FREE, SUMMARY, ENCODE, DECODE, TO_HOST };

typedef struct call {
    int entry;
    void *p[4];
    int64_t n, divisor;
    pycoll_dtype_t dtype;
    pycoll_op_t op;
    int32_t limbs, bits, base_exp;
    _Atomic int *done; /* copy_to_host's: set once it ran */
} call_t;

static void run(void *arg)
{
    call_t *c = arg;
    struct timespec pause = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    nanosleep(&pause, NULL);
    pycoll_status_t st = PYCOLL_OK;
    switch (c->entry) {
    case REDUCE_INTO: st = base->reduce_into(c->p[0], c->p[1], c->n, c->dtype, c->op); break;
    case REDUCE: st = base->reduce(c->p[0], c->p[1], c->p[2], c->n, c->dtype, c->op); break;
    case SCALE_AVG: st = base->scale_avg(c->p[0], c->n, c->dtype, c->divisor); break;
    case LOAD: st = base->compensated_load(c->p[0], c->p[1], c->p[2], c->n, c->dtype); break;
    case COMBINE: st = base->compensated_combine(c->p[0], c->p[1], c->p[2], c->p[3], c->n, c->dtype); break;
    case STORE: st = base->compensated_store(c->p[0], c->p[1], c->p[2], c->n, c->dtype, c->divisor); break;
    case COPY: st = base->copy(c->p[0], c->p[1], c->n); break;
    case FREE: base->free(c->p[0]); break;
    case SUMMARY: st = base->repro_summary(c->p[0], c->n, c->dtype, c->p[1]); break;
    case ENCODE: st = base->repro_encode(c->p[0], c->n, c->dtype, c->limbs, c->bits, c->base_exp, c->p[1]); break;
    case DECODE: st = base->repro_decode(c->p[0], c->n, c->dtype, c->limbs, c->bits, c->base_exp, c->p[1]); break;
    case TO_HOST: st = base->copy_to_host(c->p[0], c->p[1], c->n); break;
    }
    if (st != PYCOLL_OK)
        failures++;
    if (c->done)
        *c->done = 1;
    free(c);
}

static pycoll_status_t queue(call_t c)
{
    call_t *q = malloc(sizeof *q);
    if (!q)
        return PYCOLL_ERR_NOMEM;
    *q = c;
    if (submit(stream, run, q, NULL, 0) < 0) {
        free(q);
        return PYCOLL_ERR_SYSTEM;
    }
    return PYCOLL_OK;
}

static pycoll_status_t s_reduce_into(void *dst, const void *src, int64_t n, pycoll_dtype_t dtype, pycoll_op_t op)
{
    return queue((call_t){.entry = REDUCE_INTO, .p = {dst, (void *)src}, .n = n, .dtype = dtype, .op = op});
}

static pycoll_status_t s_reduce(void *out, const void *a, const void *b, int64_t n, pycoll_dtype_t dtype,
                                pycoll_op_t op)
{
    return queue((call_t){.entry = REDUCE, .p = {out, (void *)a, (void *)b}, .n = n, .dtype = dtype, .op = op});
}

static pycoll_status_t s_scale_avg(void *buf, int64_t n, pycoll_dtype_t dtype, int64_t divisor)
{
    return queue((call_t){.entry = SCALE_AVG, .p = {buf}, .n = n, .dtype = dtype, .divisor = divisor});
}

static pycoll_status_t s_load(void *sum, void *comp, const void *src, int64_t n, pycoll_dtype_t dtype)
{
    return queue((call_t){.entry = LOAD, .p = {sum, comp, (void *)src}, .n = n, .dtype = dtype});
}

static pycoll_status_t s_combine(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                 int64_t n, pycoll_dtype_t dtype)
{
    return queue((call_t){.entry = COMBINE, .p = {dst_sum, dst_comp, (void *)src_sum, (void *)src_comp}, .n = n,
                          .dtype = dtype});
}

static pycoll_status_t s_store(void *dst, const void *sum, const void *comp, int64_t n, pycoll_dtype_t dtype,
                               int64_t divisor)
{
    return queue((call_t){.entry = STORE, .p = {dst, (void *)sum, (void *)comp}, .n = n, .dtype = dtype,
                          .divisor = divisor});
}

static pycoll_status_t s_copy(void *dst, const void *src, int64_t nbytes)
{
    return queue((call_t){.entry = COPY, .p = {dst, (void *)src}, .n = nbytes});
}

static void *s_alloc(int64_t nbytes)
{
    return base->alloc(nbytes);
}

static void s_free(void *p)
{
    if (p && queue((call_t){.entry = FREE, .p = {p}}) != PYCOLL_OK)
        failures++;
}

static pycoll_status_t s_summary(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *summary)
{
    return queue((call_t){.entry = SUMMARY, .p = {(void *)x, summary}, .n = n, .dtype = dtype});
}

static pycoll_status_t s_encode(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t limbs, int32_t bits,
                                int32_t base_exp, int64_t *out)
{
    return queue((call_t){.entry = ENCODE, .p = {(void *)x, out}, .n = n, .dtype = dtype, .limbs = limbs,
                          .bits = bits, .base_exp = base_exp});
}

static pycoll_status_t s_decode(const int64_t *sums, int64_t n, pycoll_dtype_t dtype, int32_t limbs, int32_t bits,
                                int32_t base_exp, void *out)
{
    return queue((call_t){.entry = DECODE, .p = {(void *)sums, out}, .n = n, .dtype = dtype, .limbs = limbs,
                          .bits = bits, .base_exp = base_exp});
}

static pycoll_status_t s_copy_to_host(void *dst, const void *src, int64_t nbytes)
{
    _Atomic int done = 0;
    pycoll_status_t st = queue((call_t){.entry = TO_HOST, .p = {dst, (void *)src}, .n = nbytes, .done = &done});
    struct timespec pause = {0, 100000};
    while (st == PYCOLL_OK && !done)
        nanosleep(&pause, NULL);
    return st;
}

static pycoll_memory_kernels_t streamed;

/* The table, queueing on `on` through `submit_to` (the fake runtime's fake_stream_submit), each entry delayed by
 * `delay` microseconds. */
const pycoll_memory_kernels_t *pycoll_streamed_memory_table(void *on, submit_fn submit_to, long delay)
{
    base = pycoll_test_memory_table();
    stream = on;
    submit = submit_to;
    delay_us = delay;
    streamed = (pycoll_memory_kernels_t){
        .memory = "streamed test", .reduce_into = s_reduce_into, .reduce = s_reduce, .scale_avg = s_scale_avg,
        .compensated_load = s_load, .compensated_combine = s_combine, .compensated_store = s_store,
        .copy = s_copy, .alloc = s_alloc, .free = s_free, .version = PYCOLL_MEMORY_KERNELS_VERSION,
        .repro_summary = s_summary, .repro_encode = s_encode, .repro_decode = s_decode,
        .copy_to_host = s_copy_to_host, .stream_ordered = 1};
    return &streamed;
}

int64_t pycoll_streamed_memory_failures(void)
{
    return failures;
}
