/* The exact-mode loops of accuracy="reproducible" for the baseline instruction set (reproducible_loops.h). */
#define REPRO_LOOPS_TABLE pycoll_scalar_repro_kernels
#include "kernels/reproducible_loops.h"
