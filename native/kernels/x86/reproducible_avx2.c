/* The exact-mode loops of accuracy="reproducible" (reproducible_loops.h) compiled with -mavx2 -mno-fma (see
 * CMakeLists.txt; called only after dispatch.c saw AVX2): the variable 64-bit shifts vectorise. */
#define REPRO_LOOPS_TABLE pycoll_avx2_repro_kernels
#include "kernels/reproducible_loops.h"
