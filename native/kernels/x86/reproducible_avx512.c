/* The exact-mode loops of accuracy="reproducible" (reproducible_loops.h) compiled with -mavx512f -mavx512dq
 * -mavx512cd -mavx512vl -mavx512bw -mno-fma (see CMakeLists.txt; called only after dispatch.c saw those features): the
 * int64 <-> double conversions and leading-zero counts of decoding vectorise as well. */
#define REPRO_LOOPS_TABLE pycoll_avx512_repro_kernels
#include "kernels/reproducible_loops.h"
