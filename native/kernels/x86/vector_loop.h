/* Internal: the loop shared by the SIMD variants. A variant writes one `step` that combines LANES elements
 * with unaligned loads and stores; the loop runs it over full vectors, and over the last partial vector
 * through zero-padded stack copies, so no kernel needs a separate scalar tail. */
#ifndef PYCOLL_VECTOR_LOOP_H
#define PYCOLL_VECTOR_LOOP_H

#include <stdint.h>
#include <string.h>

#define PYCOLL_BINARY_VECTOR_KERNEL(name, T, LANES, step)                                                     \
    static void name(void *out, const void *a, const void *b, int64_t n)                                      \
    {                                                                                                         \
        const T *x = a, *y = b;                                                                               \
        T *o = out;                                                                                           \
        int64_t i = 0;                                                                                        \
        for (; i + 2 * (LANES) <= n; i += 2 * (LANES)) {                                                      \
            step(o + i, x + i, y + i);                                                                        \
            step(o + i + (LANES), x + i + (LANES), y + i + (LANES));                                          \
        }                                                                                                     \
        for (; i + (LANES) <= n; i += (LANES))                                                                \
            step(o + i, x + i, y + i);                                                                        \
        if (i < n) {                                                                                          \
            T ta[LANES] = {0}, tb[LANES] = {0}, to[LANES];                                                    \
            size_t rest = (size_t)(n - i) * sizeof(T);                                                        \
            memcpy(ta, x + i, rest);                                                                          \
            memcpy(tb, y + i, rest);                                                                          \
            step(to, ta, tb);                                                                                 \
            memcpy(o + i, to, rest);                                                                          \
        }                                                                                                     \
    }

#define PYCOLL_COMBINE_VECTOR_KERNEL(name, T, LANES, step)                                                    \
    static void name(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp, int64_t n)     \
    {                                                                                                         \
        T *ds = dst_sum, *dc = dst_comp;                                                                      \
        const T *ss = src_sum, *sc = src_comp;                                                                \
        int64_t i = 0;                                                                                        \
        for (; i + (LANES) <= n; i += (LANES))                                                                \
            step(ds + i, dc + i, ss + i, sc + i);                                                             \
        if (i < n) {                                                                                          \
            T tds[LANES] = {0}, tdc[LANES] = {0}, tss[LANES] = {0}, tsc[LANES] = {0};                         \
            size_t rest = (size_t)(n - i) * sizeof(T);                                                        \
            memcpy(tds, ds + i, rest);                                                                        \
            memcpy(tdc, dc + i, rest);                                                                        \
            memcpy(tss, ss + i, rest);                                                                        \
            memcpy(tsc, sc + i, rest);                                                                        \
            step(tds, tdc, tss, tsc);                                                                         \
            memcpy(ds + i, tds, rest);                                                                        \
            memcpy(dc + i, tdc, rest);                                                                        \
        }                                                                                                     \
    }

#endif
