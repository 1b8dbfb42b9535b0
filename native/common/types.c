/* The dtype table and the names of pycoll's enums. */
#include "pycoll/p2p.h"
#include <stdio.h>

#define ALL_OPS ((1u << PYCOLL_NUM_OPS) - 1)
#define UNORDERED_OPS ((1u << PYCOLL_SUM) | (1u << PYCOLL_PROD) | (1u << PYCOLL_AVG))
#define INT (PYCOLL_DTYPE_INTEGER | PYCOLL_DTYPE_SIGNED)
#define FLOAT (PYCOLL_DTYPE_FLOAT | PYCOLL_DTYPE_SIGNED | PYCOLL_DTYPE_COMPENSATED)
#define COMPLEX (PYCOLL_DTYPE_COMPLEX | PYCOLL_DTYPE_SIGNED | PYCOLL_DTYPE_COMPENSATED)

static const pycoll_dtype_info_t dtypes[PYCOLL_NUM_DTYPES] = {
    /* id, name, size, flags, ops, accumulator (half floats sum in float32), precision */
    {PYCOLL_INT8, "int8", 1, INT, ALL_OPS, PYCOLL_INT8, 0},
    {PYCOLL_UINT8, "uint8", 1, PYCOLL_DTYPE_INTEGER, ALL_OPS, PYCOLL_UINT8, 0},
    {PYCOLL_INT32, "int32", 4, INT, ALL_OPS, PYCOLL_INT32, 0},
    {PYCOLL_INT64, "int64", 8, INT, ALL_OPS, PYCOLL_INT64, 0},
    {PYCOLL_FLOAT16, "float16", 2, FLOAT, ALL_OPS, PYCOLL_FLOAT32, 11},
    {PYCOLL_BFLOAT16, "bfloat16", 2, FLOAT, ALL_OPS, PYCOLL_FLOAT32, 8},
    {PYCOLL_FLOAT32, "float32", 4, FLOAT, ALL_OPS, PYCOLL_FLOAT32, 24},
    {PYCOLL_FLOAT64, "float64", 8, FLOAT, ALL_OPS, PYCOLL_FLOAT64, 53},
    {PYCOLL_COMPLEX64, "complex64", 8, COMPLEX, UNORDERED_OPS, PYCOLL_COMPLEX64, 0},
    {PYCOLL_COMPLEX128, "complex128", 16, COMPLEX, UNORDERED_OPS, PYCOLL_COMPLEX128, 0},
};

const pycoll_dtype_info_t *pycoll_dtype_table(int32_t *count)
{
    if (count)
        *count = PYCOLL_NUM_DTYPES;
    return dtypes;
}

size_t pycoll_dtype_size(pycoll_dtype_t dtype)
{
    return (unsigned)dtype < PYCOLL_NUM_DTYPES ? (size_t)dtypes[dtype].size : 0;
}

const char *pycoll_dtype_name(pycoll_dtype_t dtype)
{
    return (unsigned)dtype < PYCOLL_NUM_DTYPES ? dtypes[dtype].name : "?";
}

const char *pycoll_op_name(pycoll_op_t op)
{
    static const char *const names[PYCOLL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < PYCOLL_NUM_OPS ? names[op] : "?";
}

const char *pycoll_coll_name(pycoll_coll_t coll)
{
#define COLL_NAME(ID, value, field, name, kind) [value] = name,
    static const char *const names[PYCOLL_NUM_COLLS] = {PYCOLL_COLLECTIVES(COLL_NAME)};
#undef COLL_NAME
    return (unsigned)coll < PYCOLL_NUM_COLLS ? names[coll] : "?";
}

const char *pycoll_accuracy_name(pycoll_accuracy_t accuracy)
{
    static const char *const names[PYCOLL_NUM_ACCURACIES] = {"fast", "compensated", "reproducible"};
    return (unsigned)accuracy < PYCOLL_NUM_ACCURACIES ? names[accuracy] : "?";
}

static void describe_call(const pycoll_coll_desc_t *d, char *out, size_t len);

void pycoll_describe_coll(const pycoll_coll_desc_t *d, char *out, size_t len)
{
    if (pycoll_desc_thread(d) != PYCOLL_THREAD_INTERNAL || d->seq == 0) {
        describe_call(d, out, len);
        return;
    }
    /* Numbered apart from the caller's collectives: not the caller's "#1 broadcast". */
    char call[160];
    describe_call(d, call, sizeof call);
    snprintf(out, len, "pycoll's internal %s (made by init on every rank)", call);
}

static void describe_call(const pycoll_coll_desc_t *d, char *out, size_t len)
{
    const char *acc = pycoll_accuracy_name((pycoll_accuracy_t)d->accuracy);
    char root[24] = "";
    if (d->root >= 0)
        snprintf(root, sizeof root, ", root=%d", (int)d->root);
    switch (d->coll) {
    case PYCOLL_COLL_SEND_RECV:
        snprintf(out, len, "send/recv");
        return;
    case PYCOLL_COLL_BARRIER:
        snprintf(out, len, "#%llu barrier()", (unsigned long long)d->seq);
        break;
    case PYCOLL_COLL_ALL_GATHER_V:
        /* count is the fingerprint of the counts (p2p.h): only comparable, so not shown as a length */
        snprintf(out, len, "#%llu all_gather_v(%s, counts #%08llx)", (unsigned long long)d->seq,
                 pycoll_dtype_name((pycoll_dtype_t)d->dtype), (unsigned long long)(d->count & 0xffffffffLL));
        break;
    case PYCOLL_COLL_REDUCE_SCATTER_V:
        snprintf(out, len, "#%llu reduce_scatter_v(%s, counts #%08llx, %s, %s)", (unsigned long long)d->seq,
                 pycoll_dtype_name((pycoll_dtype_t)d->dtype), (unsigned long long)(d->count & 0xffffffffLL),
                 pycoll_op_name((pycoll_op_t)d->op), acc);
        break;
    case PYCOLL_COLL_ALL_TO_ALL:
    case PYCOLL_COLL_GATHER:
    case PYCOLL_COLL_SCATTER:
    case PYCOLL_COLL_ALL_GATHER:
    case PYCOLL_COLL_BROADCAST:
        snprintf(out, len, "#%llu %s(%s x %lld%s)", (unsigned long long)d->seq,
                 pycoll_coll_name((pycoll_coll_t)d->coll), pycoll_dtype_name((pycoll_dtype_t)d->dtype),
                 (long long)d->count, root);
        break;
    default:
        snprintf(out, len, "#%llu %s(%s x %lld, %s, %s, %s%s)", (unsigned long long)d->seq,
                 pycoll_coll_name((pycoll_coll_t)d->coll), pycoll_dtype_name((pycoll_dtype_t)d->dtype),
                 (long long)d->count, pycoll_op_name((pycoll_op_t)d->op),
                 pycoll_algorithm_name((pycoll_algorithm_t)d->algorithm), acc, root);
    }
    if (d->seq == 0)
        snprintf(out, len, "no collective yet");
}
