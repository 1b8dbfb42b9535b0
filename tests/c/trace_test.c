/* The flight recorder from C: two processes (forked, joined by a socket pair) run three all-reduces, then each
 * dumps its record with pycoll_comm_dump_trace into the directory argv[1] and checks the file it names
 * (pycoll_comm_trace_path) holds the three calls, that pycoll_comm_trace_json gives the same record, and that a
 * dump with no path and no PYCOLL_TRACE_DIR is refused naming it. Prints "rank R ok" and exits 0, or prints what
 * failed and exits 1. Built and run by tests/communicator/test_c_trace.py. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pycoll/pycoll.h>

#include "check.h"
#include "two_ranks.h"

static char file_text[1 << 16];
static const char *dir; /* argv[1] */

static void read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(file_text, 1, sizeof file_text - 1, f) : 0;
    file_text[n] = 0;
    if (f)
        fclose(f);
}

static int rank_main(int rank, int fd)
{
    pycoll_comm_t *comm = two_ranks_comm(rank, fd);
    if (!comm)
        return 1;
    float x[4] = {1, 2, 3, 4}, y[4];
    for (int i = 0; i < 3; i++)
        CHECK(pycoll_comm_all_reduce(comm, x, y, 4, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                                     PYCOLL_ACCURACY_FAST) == PYCOLL_OK,
              "all_reduce: %s",
              pycoll_comm_error(comm));

    CHECK(pycoll_comm_dump_trace(comm, dir) == PYCOLL_OK, "dump_trace: %s", pycoll_comm_error(comm));
    char path[4096];
    CHECK(pycoll_comm_trace_path(comm, dir, path, sizeof path) == PYCOLL_OK, "trace_path");
    char name[64];
    snprintf(name, sizeof name, "-rank%d.json", rank);
    CHECK(strstr(path, "/pycoll-trace-") && strstr(path, name), "the file is named %s", path);
    read_file(path);
    CHECK(strstr(file_text, "\"format\": \"pycoll-trace\"") && strstr(file_text, "\"reason\": \"request\""),
          "the file holds a dump: %.200s", file_text);
    CHECK(strstr(file_text, "\"seq\": 3, \"collective\": \"all_reduce\"") && !strstr(file_text, "\"seq\": 4"),
          "the file holds the three calls: %s", file_text);

    const int64_t n = pycoll_comm_trace_json(comm, NULL, 0);
    char *json = n > 0 ? malloc((size_t)n + 1) : NULL;
    CHECK(json && pycoll_comm_trace_json(comm, json, n + 1) == n && strstr(json, "\"seq\": 3"),
          "trace_json: %lld bytes", (long long)n);
    free(json);

    unsetenv("PYCOLL_TRACE_DIR");
    CHECK(pycoll_comm_dump_trace(comm, NULL) == PYCOLL_ERR_INVALID &&
              strstr(pycoll_comm_error(comm), "PYCOLL_TRACE_DIR"),
          "a dump with nowhere to go: %s", pycoll_comm_error(comm));

    CHECK(pycoll_comm_finalize(comm, 5.0) == PYCOLL_OK, "finalize: %s", pycoll_comm_error(comm));
    pycoll_comm_destroy(comm);
    if (failures == 0)
        printf("rank %d ok\n", rank);
    return failures != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: trace_test DIR\n");
        return 1;
    }
    dir = argv[1];
    return run_two_ranks(rank_main);
}
