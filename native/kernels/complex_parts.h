/* Internal: a complex element is two elements of its real type (real part, then imaginary part), so every
 * operation that works part by part -- sum, avg's division, compensated summation -- runs the real type's
 * kernels on twice the count. Only prod mixes the parts and has kernels of its own. */
#ifndef PYCOLL_COMPLEX_PARTS_H
#define PYCOLL_COMPLEX_PARTS_H

#include "pycoll/types.h"

#include <stdbool.h>

static inline bool dtype_is_complex(pycoll_dtype_t dtype)
{
    return dtype == PYCOLL_COMPLEX64 || dtype == PYCOLL_COMPLEX128;
}

/* The dtype of each part of a complex dtype; any other dtype is its own. */
static inline pycoll_dtype_t complex_part_dtype(pycoll_dtype_t dtype)
{
    return dtype == PYCOLL_COMPLEX64 ? PYCOLL_FLOAT32 : dtype == PYCOLL_COMPLEX128 ? PYCOLL_FLOAT64 : dtype;
}

/* Rewrite (count, dtype) of a complex call as the same bytes of its real parts; other dtypes are left as they
 * are. */
static inline void complex_as_parts(int64_t *count, pycoll_dtype_t *dtype)
{
    if (dtype_is_complex(*dtype)) {
        *count *= 2;
        *dtype = complex_part_dtype(*dtype);
    }
}

#endif
