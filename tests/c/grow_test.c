/* Growing a job from C: three processes (forked) form a job by unique id (pycoll_comm_init_rank) and all-reduce;
 * rank 0 makes the grow's id and hands it to a fourth process through a pipe; the members refuse to "grow" to
 * their own size (every one alike, PYCOLL_ERR_INVALID), then grow to 4 (pycoll_comm_grow) while the new process
 * refuses rank 0 and a blank id, then joins as rank 3 (pycoll_comm_join); all four all-reduce on the grown
 * communicator, the members with their old ranks. Prints "rank R ok" and exits 0 on every rank, or prints what
 * failed and exits 1. Built and run by tests/communicator/test_c_fault_tolerance.py. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pycoll/pycoll.h>

#include "check.h"

#define MEMBERS 3
#define GROWN 4

/* pipes[r]: rank 0 writes the ids rank r reads (members: the job's, then nothing; the new process: the grow's). */
static int pipes[GROWN][2];

static int read_id(int rank, pycoll_unique_id_t *id)
{
    size_t got = 0;
    while (got < sizeof *id) {
        ssize_t n = read(pipes[rank][0], id->internal + got, sizeof *id - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

static void send_id(int rank, const pycoll_unique_id_t *id)
{
    CHECK(write(pipes[rank][1], id->internal, sizeof *id) == (ssize_t)sizeof *id, "rank 0: writing an id failed");
}

static double sum_ranks(pycoll_comm_t *comm)
{
    double sum = pycoll_comm_rank(comm) + 1.0;
    pycoll_status_t st = pycoll_comm_all_reduce(comm, &sum, &sum, 1, PYCOLL_FLOAT64, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                                                PYCOLL_ACCURACY_FAST);
    return st == PYCOLL_OK ? sum : -1.0;
}

static int member_main(int rank)
{
    pycoll_unique_id_t job, grow;
    memset(&grow, 0, sizeof grow);
    if (rank == 0) {
        CHECK(pycoll_unique_id_create(&job, NULL, "127.0.0.1") == PYCOLL_OK, "rank 0: id: %s",
              pycoll_bootstrap_error());
        for (int r = 1; r < MEMBERS; r++)
            send_id(r, &job);
    } else if (read_id(rank, &job) != 0) {
        printf("rank %d: no id\n", rank);
        return 1;
    }
    pycoll_comm_t *comm = NULL, *grown = NULL;
    pycoll_status_t st = pycoll_comm_init_rank(&comm, MEMBERS, job, rank, 20.0);
    if (st != PYCOLL_OK) {
        printf("rank %d: init_rank: %s\n", rank, pycoll_bootstrap_error());
        return 1;
    }
    CHECK(sum_ranks(comm) == 6.0, "rank %d: all_reduce before the grow", rank);
    st = pycoll_comm_grow(comm, MEMBERS, NULL, 5.0, &grown);
    CHECK(st == PYCOLL_ERR_INVALID && grown == NULL && strstr(pycoll_bootstrap_error(), "larger than"),
          "rank %d: grow to its own size: status %d (%s)", rank, (int)st, pycoll_bootstrap_error());
    if (rank == 0) {
        CHECK(pycoll_unique_id_create(&grow, NULL, "127.0.0.1") == PYCOLL_OK, "rank 0: grow id");
        send_id(MEMBERS, &grow);
    }
    st = pycoll_comm_grow(comm, GROWN, rank == 0 ? &grow : NULL, 20.0, &grown);
    CHECK(st == PYCOLL_OK, "rank %d: grow: status %d (%s)", rank, (int)st, pycoll_bootstrap_error());
    if (st == PYCOLL_OK) {
        CHECK(pycoll_comm_rank(grown) == rank && pycoll_comm_size(grown) == GROWN, "rank %d: grown as %d of %d",
              rank, (int)pycoll_comm_rank(grown), (int)pycoll_comm_size(grown));
        CHECK(sum_ranks(grown) == 10.0, "rank %d: all_reduce after the grow", rank);
        pycoll_comm_destroy(grown);
    }
    pycoll_comm_destroy(comm);
    return 0;
}

static int new_process_main(void)
{
    pycoll_unique_id_t id, blank;
    memset(&blank, 0, sizeof blank);
    pycoll_comm_t *comm = NULL;
    if (read_id(MEMBERS, &id) != 0) {
        printf("rank %d: no id\n", MEMBERS);
        return 1;
    }
    pycoll_status_t st = pycoll_comm_join(&comm, GROWN, &id, 0, 5.0);
    CHECK(st == PYCOLL_ERR_INVALID && strstr(pycoll_bootstrap_error(), "rank 0 is always a member"),
          "join as rank 0: status %d (%s)", (int)st, pycoll_bootstrap_error());
    st = pycoll_comm_join(&comm, GROWN, &blank, MEMBERS, 5.0);
    CHECK(st == PYCOLL_ERR_INVALID && comm == NULL, "join with a blank id: status %d (%s)", (int)st,
          pycoll_bootstrap_error());
    st = pycoll_comm_join(&comm, GROWN, &id, MEMBERS, 20.0);
    if (st != PYCOLL_OK) {
        printf("rank %d: join: %s\n", MEMBERS, pycoll_bootstrap_error());
        return 1;
    }
    CHECK(pycoll_comm_rank(comm) == MEMBERS, "joined as rank %d", (int)pycoll_comm_rank(comm));
    CHECK(sum_ranks(comm) == 10.0, "rank %d: all_reduce after joining", MEMBERS);
    pycoll_comm_destroy(comm);
    return 0;
}

int main(void)
{
    for (int r = 0; r < GROWN; r++)
        if (pipe(pipes[r]) != 0)
            return 1;
    pid_t pids[GROWN];
    for (int r = 0; r < GROWN; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int bad = r < MEMBERS ? member_main(r) : new_process_main();
            if (!bad && !failures)
                printf("rank %d ok\n", r);
            fflush(stdout);
            _exit(bad || failures ? 1 : 0);
        }
    }
    int failed = 0;
    for (int r = 0; r < GROWN; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}
