/* Partials in FAST or COMPENSATED form (reduction.h), on top of the kernels in kernels.h. */
#include "kernels/reduction.h"

/* Complex too: its sum is compensated part by part (kernels/compensated.c). */
static bool is_float(pycoll_dtype_t dtype)
{
    return (pycoll_dtype_table(NULL)[dtype].flags & PYCOLL_DTYPE_COMPENSATED) != 0;
}

void reduction_init(reduction_t *red, pycoll_p2p_t *p2p, pycoll_dtype_t dtype, pycoll_op_t op,
                    pycoll_accuracy_t accuracy)
{
    red->p2p = p2p;
    red->kernels = memory_kernels(p2p);
    red->dtype = dtype;
    red->op = op;
    red->compensated = accuracy == PYCOLL_ACCURACY_COMPENSATED && is_float(dtype) &&
                       (op == PYCOLL_SUM || op == PYCOLL_AVG);
    red->dsize = pycoll_dtype_size(dtype);
    red->asize = pycoll_dtype_size(pycoll_accumulator_dtype(dtype));
    red->wsize = red->compensated ? 2 * red->asize : red->dsize;
    red->divisor = op == PYCOLL_AVG ? p2p->size : 1;
}

static pycoll_status_t kernel_status(const reduction_t *red, pycoll_status_t status, const char *kernel)
{
    if (status == PYCOLL_OK)
        return status;
    return pycoll_p2p_fail(red->p2p, status, -1, "%s failed for %s %s on %s memory (status %d)%s", kernel,
                           pycoll_dtype_name(red->dtype), pycoll_op_name(red->op), red->kernels->memory,
                           (int)status, memory_error(red->kernels));
}

/* The comp half of a packed partial of n elements. */
static void *comp_of(const reduction_t *red, const void *part, int64_t n)
{
    return (char *)part + (size_t)n * red->asize;
}

pycoll_status_t reduction_source(const reduction_t *red, void *part, const void *plain, int64_t n,
                                 const void **source)
{
    if (!red->compensated) {
        *source = plain;
        return PYCOLL_OK;
    }
    *source = part;
    return kernel_status(red, red->kernels->compensated_load(part, comp_of(red, part, n), plain, n, red->dtype),
                         "compensated_load");
}

pycoll_status_t reduction_combine(const reduction_t *red, void *part, const void *other, int64_t n)
{
    if (!red->compensated)
        return kernel_status(red, red->kernels->reduce_into(part, other, n, red->dtype, red->op), "reduce_into");
    return kernel_status(red,
                         red->kernels->compensated_combine(part, comp_of(red, part, n), other,
                                                           comp_of(red, other, n), n, red->dtype),
                         "compensated_combine");
}

pycoll_status_t reduction_add_plain(const reduction_t *red, void *part, const void *plain, const void *other,
                                    int64_t n)
{
    if (!red->compensated)
        return kernel_status(red, red->kernels->reduce(part, plain, other, n, red->dtype, red->op), "reduce");
    const void *loaded;
    pycoll_status_t status = reduction_source(red, part, plain, n, &loaded);
    return status != PYCOLL_OK ? status : reduction_combine(red, part, other, n);
}

pycoll_status_t reduction_combine_plain(const reduction_t *red, void *part, const void *plain, void *tmp,
                                        int64_t n)
{
    if (!red->compensated)
        return kernel_status(red, red->kernels->reduce_into(part, plain, n, red->dtype, red->op), "reduce_into");
    const void *loaded;
    pycoll_status_t status = reduction_source(red, tmp, plain, n, &loaded);
    return status != PYCOLL_OK ? status : reduction_combine(red, part, loaded, n);
}

pycoll_status_t reduction_add_plains(const reduction_t *red, void *part, const void *a, const void *b, void *tmp,
                                     int64_t n)
{
    if (!red->compensated)
        return kernel_status(red, red->kernels->reduce(part, a, b, n, red->dtype, red->op), "reduce");
    const void *loaded;
    pycoll_status_t status = reduction_source(red, part, a, n, &loaded);
    return status != PYCOLL_OK ? status : reduction_combine_plain(red, part, b, tmp, n);
}

pycoll_status_t reduction_store(const reduction_t *red, void *plain, const void *part, int64_t n)
{
    if (red->compensated)
        return kernel_status(red,
                             red->kernels->compensated_store(plain, part, comp_of(red, part, n), n, red->dtype,
                                                             red->divisor),
                             "compensated_store");
    pycoll_status_t status = memory_copy(red->p2p, plain, part, n * (int64_t)red->dsize, "reduction store");
    if (status == PYCOLL_OK && red->divisor > 1)
        return kernel_status(red, red->kernels->scale_avg(plain, n, red->dtype, red->divisor), "scale_avg");
    return status;
}
