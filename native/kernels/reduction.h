/* What the reduction phase of an algorithm moves and combines: "partials". In FAST mode a partial is plain
 * values of the dtype; in COMPENSATED mode (float dtypes, sum/avg) a partial of n elements is one packed
 * message [sum n | comp n] in the accumulator dtype, so the error term travels with the sum and the value is
 * rounded once, when the partial is stored. Buffers of partials are laid out unit by unit: a unit of n
 * elements starting at element e occupies bytes [e * wsize, (e + n) * wsize), so a run of whole units is
 * contiguous and can be sent as one message. */
#ifndef PYCOLL_KERNELS_REDUCTION_H
#define PYCOLL_KERNELS_REDUCTION_H

#include "kernels/memory_kernels.h"

#include <stdbool.h>

typedef struct reduction {
    pycoll_p2p_t *p2p;   /* where kernel errors are recorded */
    const pycoll_memory_kernels_t *kernels;
    pycoll_dtype_t dtype;
    pycoll_op_t op;
    bool compensated;
    size_t dsize;        /* bytes of one plain element */
    size_t asize;        /* bytes of one accumulator element (compensated) */
    size_t wsize;        /* bytes of one element of a partial: dsize, or 2 * asize */
    int64_t divisor;     /* applied once when a partial is stored: the world size for avg, else 1 */
} reduction_t;

void reduction_init(reduction_t *red, pycoll_p2p_t *p2p, pycoll_dtype_t dtype, pycoll_op_t op,
                    pycoll_accuracy_t accuracy);

/* The partial form of plain values (to send): plain itself in FAST mode, else loaded into part. */
pycoll_status_t reduction_source(const reduction_t *red, void *part, const void *plain, int64_t n,
                                 const void **source);
/* part = op(part, other), both partials. */
pycoll_status_t reduction_combine(const reduction_t *red, void *part, const void *other, int64_t n);
/* part = op(plain, other): this rank's values combined with a received partial. In FAST mode part may alias
 * plain; in COMPENSATED mode it must not. */
pycoll_status_t reduction_add_plain(const reduction_t *red, void *part, const void *plain, const void *other,
                                    int64_t n);
/* part = op(a, b), both plain: what a rank builds from its own values and a peer's first, plain, message (a
 * compensated one would carry an all-zero comp half, twice the bytes for nothing). tmp: n * wsize bytes. */
pycoll_status_t reduction_add_plains(const reduction_t *red, void *part, const void *a, const void *b, void *tmp,
                                     int64_t n);
/* part = op(part, plain), with tmp (n * wsize bytes) for the compensated form of plain. */
pycoll_status_t reduction_combine_plain(const reduction_t *red, void *part, const void *plain, void *tmp,
                                        int64_t n);
/* plain = the final value of part: rounded once, divided once for avg. plain may alias part in FAST mode. */
pycoll_status_t reduction_store(const reduction_t *red, void *plain, const void *part, int64_t n);

#endif
