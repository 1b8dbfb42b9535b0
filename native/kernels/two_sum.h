/* Internal: error-free transformations for compensated summation. They rely on IEEE arithmetic with no
 * reassociation and no FMA contraction (CMake passes -fno-fast-math -ffp-contract=off). */
#ifndef PYCOLL_TWO_SUM_H
#define PYCOLL_TWO_SUM_H

/* Knuth's branch-free TwoSum: s = fl(a + b) and err with s + err == a + b exactly, for any ordering of a, b. */
#define PYCOLL_DEFINE_TWO_SUM(name, T)                                                                        \
    static inline T name(T a, T b, T *err)                                                                    \
    {                                                                                                         \
        T s = a + b;                                                                                          \
        T bb = s - a;                                                                                         \
        *err = (a - (s - bb)) + (b - bb);                                                                     \
        return s;                                                                                             \
    }

PYCOLL_DEFINE_TWO_SUM(pycoll_two_sum_f32, float)
PYCOLL_DEFINE_TWO_SUM(pycoll_two_sum_f64, double)

#endif
