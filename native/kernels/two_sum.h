/* Internal: error-free transformations for compensated summation. They rely on IEEE arithmetic with no
 * reassociation and no FMA contraction (CMake passes -fno-fast-math -ffp-contract=off), and the files that
 * use them are compiled with -fno-trapping-math, so that the selects below stay branch-free and the loops
 * around them vectorised (no kernel reads the floating-point exception flags). */
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

/* Special values and overflow, as fast mode has them. Where a sum s is not finite (an infinity, a NaN, or a
 * finite sum that overflowed), TwoSum's error is inf - inf = NaN, and adding it back would turn every
 * infinity into NaN: so the error of a sum that is not finite counts as 0, and the sum stays what fast mode's
 * plain addition gives. finite_or_zero(s, e) is that rule; s - s is 0 exactly when s is finite.
 *
 * A compensation that is zero is added as -0, so that s + c is s for every s: -0 + +0 is +0, and a sum of
 * -0.0s, which is -0.0 in fast mode, would lose its sign. -0 - (0 - c) is c for every nonzero c (and NaN). */
#define PYCOLL_DEFINE_SPECIALS(suffix, T)                                                                    \
    static inline T pycoll_finite_or_zero_##suffix(T s, T e) { return s - s == (T)0 ? e : (T)0; }           \
    static inline T pycoll_signed_zero_##suffix(T c) { return (T)-0.0 - ((T)0 - c); }

PYCOLL_DEFINE_SPECIALS(f32, float)
PYCOLL_DEFINE_SPECIALS(f64, double)

#endif
