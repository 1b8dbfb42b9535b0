/* Internal: element types that may sit at any address. Callers hand in byte buffers at arbitrary offsets
 * (a slice of a receive buffer, a numpy view), and dereferencing a misaligned int64_t * is undefined in C;
 * these typedefs tell the compiler (and UBSan) the truth, at no cost on x86 or aarch64. */
#ifndef PYCOLL_UNALIGNED_H
#define PYCOLL_UNALIGNED_H

#include <stdint.h>

typedef int32_t unaligned_i32 __attribute__((aligned(1)));
typedef int64_t unaligned_i64 __attribute__((aligned(1)));
typedef uint16_t unaligned_u16 __attribute__((aligned(1)));
typedef float unaligned_f32 __attribute__((aligned(1)));
typedef double unaligned_f64 __attribute__((aligned(1)));

#endif
