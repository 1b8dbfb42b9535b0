/* The flight recorder's clock (flight_clock.h). */
#include "comm/flight_clock.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "transport/idle_wait.h"

int flight_clock_tsc;
static int64_t first_ticks, first_ns; /* the pair the rate is measured from */

#define RATE_INTERVAL_NS 20000000LL /* the least time the rate is measured over: 20 ms, a few ppm */

static void init_once(void)
{
#if defined(__x86_64__)
    char source[32] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f) {
        if (!fgets(source, sizeof source, f))
            source[0] = 0;
        fclose(f);
    }
    flight_clock_tsc = strcmp(source, "tsc\n") == 0;
#endif
    first_ns = pycoll_now_ns();
    first_ticks = flight_clock_ticks();
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

void flight_clock_init(void) { pthread_once(&once, init_once); }

void flight_clock_map(flight_clock_map_t *map)
{
    flight_clock_init();
    if (!flight_clock_tsc) {
        *map = (flight_clock_map_t){.ticks = 0, .ns = 0, .ns_per_tick = 1.0};
        return;
    }
    const int64_t waited = pycoll_now_ns() - first_ns;
    if (waited < RATE_INTERVAL_NS) /* a dump this soon after the first communicator: wait for a fair measure */
        idle_nap(RATE_INTERVAL_NS - waited);
    map->ns = pycoll_now_ns();
    map->ticks = flight_clock_ticks();
    map->ns_per_tick = (double)(map->ns - first_ns) / (double)(map->ticks - first_ticks);
}
