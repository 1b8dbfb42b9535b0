/* A test double for a device memory table (native/kernels/memory_kernels.h): the host kernels, each call counted,
 * and guarded allocations. Built by the tests into a shared library of its own (tests/fakes/guarded_memory.py),
 * never into libpycoll. The vendor transport uses it for "device" memory once a test installs it
 * (guarded_memory.install_named, through the bindings' test-only setter) -- against the fake libnccl and libhccl,
 * whose device memory is host memory -- and the simulator when given its address (pycoll.tools.simulate(..., memory_table=)), so a test
 * without a GPU can show that every data copy and every data scratch buffer of the C schedules goes through the
 * transport's table, as a real device table needs:
 * - a block from alloc is poisoned (all bits set: NaN in every float dtype), so a schedule that read scratch it
 *   had not written through the table would change the result's bits;
 * - each block carries a header and canaries on both sides; free checks them and that the block is one of its
 *   own (a malloc'ed block freed here, or an overrun, counts as "corrupt");
 * - every range a kernel or copy is given that starts inside a live block must end inside it ("corrupt"
 *   otherwise);
 * - "live" counts blocks not yet freed: 0 once the communicator is destroyed.
 * Its reproducible entries run the host's exact-mode loops (native/kernels/reproducible_loops.h, compiled into this
 * library for the baseline instruction set) on their arguments, as a device's kernels would on its memory.
 * pycoll_guarded_memory_count reads the counters. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "kernels/memory_kernels.h"

/* The exact-mode loops, as this library's own copy (libpycoll does not export them). */
#define REPRO_LOOPS_TABLE guarded_repro_loops
#include "kernels/reproducible_loops.h"

enum {
    G_REDUCE_INTO, G_REDUCE, G_SCALE_AVG, G_LOAD, G_COMBINE, G_STORE, G_COPY, G_ALLOC, G_FREE, G_LIVE, G_CORRUPT,
    G_REPRO_SUMMARY, G_REPRO_ENCODE, G_REPRO_DECODE, G_COPY_TO_HOST, G_NUM
};
static const char *const entry_names[G_NUM] = {"reduce_into", "reduce", "scale_avg", "compensated_load",
                                               "compensated_combine", "compensated_store", "copy", "alloc",
                                               "free", "live", "corrupt", "repro_summary", "repro_encode",
                                               "repro_decode", "copy_to_host"};
static _Atomic int64_t counts[G_NUM];

enum { CANARY_BYTES = 64, CANARY = 0xC5, POISON = 0xFF, FREED = 0xDD };
static const uint64_t MAGIC = 0x70636f6c6c677264ull; /* "pcollgrd" */

typedef struct block {
    uint64_t magic;
    int64_t nbytes;
    struct block *next; /* the live blocks, to bound-check ranges and to know our own at free */
    unsigned char front[CANARY_BYTES];
} block_t; /* the data follows, then CANARY_BYTES of back canary */

static mtx_t lock;
static once_flag lock_once = ONCE_FLAG_INIT;
static block_t *live;

static void init_lock(void)
{
    mtx_init(&lock, mtx_plain);
}

static unsigned char *data_of(block_t *b)
{
    return (unsigned char *)(b + 1);
}

static int canaries_intact(block_t *b)
{
    const unsigned char *back = data_of(b) + b->nbytes;
    for (int i = 0; i < CANARY_BYTES; i++)
        if (b->front[i] != CANARY || back[i] != CANARY)
            return 0;
    return 1;
}

/* A range that starts inside a live block must end inside it. */
static void check_range(const void *p, int64_t nbytes)
{
    const unsigned char *q = p;
    call_once(&lock_once, init_lock);
    mtx_lock(&lock);
    for (block_t *b = live; b; b = b->next) {
        unsigned char *d = data_of(b);
        if (q >= d && q <= d + b->nbytes) {
            if (nbytes < 0 || q + nbytes > d + b->nbytes)
                counts[G_CORRUPT]++;
            break;
        }
    }
    mtx_unlock(&lock);
}

static int64_t bytes_of(int64_t count, pycoll_dtype_t dtype)
{
    return count * (int64_t)pycoll_dtype_size(dtype);
}

static int64_t acc_bytes(int64_t count, pycoll_dtype_t dtype)
{
    return bytes_of(count, pycoll_accumulator_dtype(dtype));
}

/* Counts a call to entry and checks its n (pointer, bytes) ranges. */
static void guard(int entry, int n, ...)
{
    counts[entry]++;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const void *p = va_arg(ap, const void *);
        check_range(p, va_arg(ap, int64_t));
    }
    va_end(ap);
}

static pycoll_status_t g_reduce_into(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op)
{
    guard(G_REDUCE_INTO, 2, dst, bytes_of(count, dtype), src, bytes_of(count, dtype));
    return pycoll_reduce_into(dst, src, count, dtype, op);
}

static pycoll_status_t g_reduce(void *out, const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                                pycoll_op_t op)
{
    int64_t n = bytes_of(count, dtype);
    guard(G_REDUCE, 3, out, n, a, n, b, n);
    return pycoll_reduce(out, a, b, count, dtype, op);
}

static pycoll_status_t g_scale_avg(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor)
{
    guard(G_SCALE_AVG, 1, buf, bytes_of(count, dtype));
    return pycoll_scale_avg(buf, count, dtype, divisor);
}

static pycoll_status_t g_load(void *sum, void *comp, const void *src, int64_t count, pycoll_dtype_t dtype)
{
    int64_t a = acc_bytes(count, dtype);
    guard(G_LOAD, 3, sum, a, comp, a, src, bytes_of(count, dtype));
    return pycoll_compensated_load(sum, comp, src, count, dtype);
}

static pycoll_status_t g_combine(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                 int64_t count, pycoll_dtype_t dtype)
{
    int64_t a = acc_bytes(count, dtype);
    guard(G_COMBINE, 4, dst_sum, a, dst_comp, a, src_sum, a, src_comp, a);
    return pycoll_compensated_combine(dst_sum, dst_comp, src_sum, src_comp, count, dtype);
}

static pycoll_status_t g_store(void *dst, const void *sum, const void *comp, int64_t count, pycoll_dtype_t dtype,
                               int64_t divisor)
{
    int64_t a = acc_bytes(count, dtype);
    guard(G_STORE, 3, dst, bytes_of(count, dtype), sum, a, comp, a);
    return pycoll_compensated_store(dst, sum, comp, count, dtype, divisor);
}

static pycoll_status_t g_copy(void *dst, const void *src, int64_t nbytes)
{
    guard(G_COPY, 2, dst, nbytes, src, nbytes);
    memmove(dst, src, (size_t)nbytes);
    return PYCOLL_OK;
}

static void *g_alloc(int64_t nbytes)
{
    if (nbytes < 0)
        return NULL;
    block_t *b = malloc(sizeof *b + (size_t)nbytes + CANARY_BYTES);
    if (!b)
        return NULL;
    b->magic = MAGIC;
    b->nbytes = nbytes;
    memset(b->front, CANARY, CANARY_BYTES);
    memset(data_of(b), POISON, (size_t)nbytes);
    memset(data_of(b) + nbytes, CANARY, CANARY_BYTES);
    call_once(&lock_once, init_lock);
    mtx_lock(&lock);
    b->next = live;
    live = b;
    mtx_unlock(&lock);
    counts[G_ALLOC]++;
    counts[G_LIVE]++;
    return data_of(b);
}

static void g_free(void *p)
{
    if (!p)
        return;
    counts[G_FREE]++;
    block_t *b = (block_t *)p - 1;
    call_once(&lock_once, init_lock);
    mtx_lock(&lock);
    /* free walks the list anyway, to know the block for one of its own: a singly linked list unlinks as it goes */
    block_t **at = &live;
    while (*at && *at != b)
        at = &(*at)->next;
    block_t *found = *at;
    if (found)
        *at = b->next;
    mtx_unlock(&lock);
    if (!found || b->magic != MAGIC || !canaries_intact(b)) {
        counts[G_CORRUPT]++; /* not one of ours, or overrun: leak it rather than free what we do not own */
        return;
    }
    counts[G_LIVE]--;
    b->magic = 0;
    memset(data_of(b), FREED, (size_t)b->nbytes);
    free(b);
}

static pycoll_kernel_table_t loops;
static once_flag loops_once = ONCE_FLAG_INIT;

static void init_loops(void)
{
    guarded_repro_loops(&loops);
}

/* dtype's exact-mode loops, NULL for a dtype reproducible does not take. */
static const pycoll_repro_kernels_t *repro_row(pycoll_dtype_t dtype)
{
    call_once(&loops_once, init_loops);
    return (unsigned)dtype < PYCOLL_NUM_DTYPES && loops.repro[dtype].summary ? &loops.repro[dtype] : NULL;
}

static pycoll_status_t g_repro_summary(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *summary)
{
    guard(G_REPRO_SUMMARY, 2, x, bytes_of(n, dtype), summary, (int64_t)(REPRO_SUMMARY_LEN * sizeof(int32_t)));
    const pycoll_repro_kernels_t *row = repro_row(dtype);
    if (!row)
        return PYCOLL_ERR_UNSUPPORTED;
    row->summary(x, n, summary);
    return PYCOLL_OK;
}

/* The loops take one or two limbs. */
static const pycoll_repro_kernels_t *repro_row_limbs(pycoll_dtype_t dtype, int32_t limbs)
{
    return limbs == 1 || limbs == 2 ? repro_row(dtype) : NULL;
}

static pycoll_status_t g_repro_encode(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t limbs, int32_t bits,
                                      int32_t base, int64_t *out)
{
    guard(G_REPRO_ENCODE, 2, x, bytes_of(n, dtype), out, n * limbs * (int64_t)sizeof(int64_t));
    const pycoll_repro_kernels_t *row = repro_row_limbs(dtype, limbs);
    if (!row)
        return PYCOLL_ERR_UNSUPPORTED;
    row->encode[limbs - 1](x, n, base, bits, out);
    return PYCOLL_OK;
}

static pycoll_status_t g_repro_decode(const int64_t *sums, int64_t n, pycoll_dtype_t dtype, int32_t limbs,
                                      int32_t bits, int32_t base, void *out)
{
    guard(G_REPRO_DECODE, 2, sums, n * limbs * (int64_t)sizeof(int64_t), out, bytes_of(n, dtype));
    const pycoll_repro_kernels_t *row = repro_row_limbs(dtype, limbs);
    if (!row)
        return PYCOLL_ERR_UNSUPPORTED;
    row->decode[limbs - 1](sums, n, base, bits, out);
    return PYCOLL_OK;
}

static pycoll_status_t g_copy_to_host(void *dst, const void *src, int64_t nbytes)
{
    guard(G_COPY_TO_HOST, 1, src, nbytes);
    memmove(dst, src, (size_t)nbytes);
    return PYCOLL_OK;
}

static const pycoll_memory_kernels_t guarded_kernels = {
    .memory = "guarded test", .reduce_into = g_reduce_into, .reduce = g_reduce, .scale_avg = g_scale_avg,
    .compensated_load = g_load, .compensated_combine = g_combine, .compensated_store = g_store, .copy = g_copy,
    .alloc = g_alloc, .free = g_free, .version = PYCOLL_MEMORY_KERNELS_VERSION, .repro_summary = g_repro_summary,
    .repro_encode = g_repro_encode, .repro_decode = g_repro_decode, .copy_to_host = g_copy_to_host};

/* The table, for the tests to install (guarded_memory.py). */
const pycoll_memory_kernels_t *pycoll_test_memory_table(void)
{
    return &guarded_kernels;
}

/* The same table stamped version 1, a table from before reproducible's entries: they are left in place, so a
 * reader that honoured them without checking the version would run them. */
static pycoll_memory_kernels_t guarded_kernels_v1;
static once_flag v1_once = ONCE_FLAG_INIT;

static void init_v1(void)
{
    guarded_kernels_v1 = guarded_kernels;
    guarded_kernels_v1.version = 1;
}

const pycoll_memory_kernels_t *pycoll_guarded_memory_table_v1(void)
{
    call_once(&v1_once, init_v1);
    return &guarded_kernels_v1;
}

/* The calls this process made so far to one entry of the table: "copy", "alloc", "free", "compensated_load",
 * ..., "live" (blocks not yet freed), "corrupt" (guard violations); -1 for an unknown name. */
int64_t pycoll_guarded_memory_count(const char *entry)
{
    for (int i = 0; i < G_NUM; i++)
        if (strcmp(entry, entry_names[i]) == 0)
            return counts[i];
    return -1;
}
