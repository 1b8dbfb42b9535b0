/* The flight recorder's clock: read twice per call, so it must cost little. Where the kernel itself keeps time
 * by the x86 time-stamp counter (clocksource "tsc": constant rate, synchronised across cores), the counter is
 * read directly, a few nanoseconds against a system clock read's tens; elsewhere pycoll_now_ns. A dump converts
 * ticks to CLOCK_MONOTONIC nanoseconds, anchored at the dump (recent calls, the ones that matter, convert most
 * exactly). */
#ifndef PYCOLL_COMM_FLIGHT_CLOCK_H
#define PYCOLL_COMM_FLIGHT_CLOCK_H

#include <stdint.h>

#include "pycoll/p2p.h"

extern int flight_clock_tsc __attribute__((visibility("hidden"))); /* 1: ticks are the time-stamp counter */

static inline int64_t flight_clock_ticks(void)
{
#if defined(__x86_64__)
    if (flight_clock_tsc)
        return (int64_t)__builtin_ia32_rdtsc();
#endif
    return pycoll_now_ns();
}

/* Once per process, before the first ticks are taken. */
void flight_clock_init(void);

/* Ticks to nanoseconds of CLOCK_MONOTONIC, as the dump taken now sees them. */
typedef struct flight_clock_map {
    int64_t ticks, ns;
    double ns_per_tick;
} flight_clock_map_t;
void flight_clock_map(flight_clock_map_t *map);
static inline int64_t flight_clock_ns(const flight_clock_map_t *map, int64_t ticks)
{
    return map->ns - (int64_t)((double)(map->ticks - ticks) * map->ns_per_tick);
}

#endif
