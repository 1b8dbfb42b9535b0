/* The test programs' two ranks: rank_main(rank, fd) runs as two processes joined by a socket pair (fd, this
 * rank's end), rank 1 in a forked child. The program's exit status: 0 when both ranks returned 0.
 * two_ranks_comm: this rank's communicator over the TCP transport on that pair (NULL: it printed why).
 * two_ranks_finish: the wait for a call started with a work; two_ranks_close: the checked close. Include check.h
 * first. */
#ifndef PYCOLL_TEST_TWO_RANKS_H
#define PYCOLL_TEST_TWO_RANKS_H

#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pycoll/pycoll.h>

static pycoll_comm_t *two_ranks_comm(int rank, int fd)
{
    int fds[2] = {-1, -1};
    fds[1 - rank] = fd;
    char error[PYCOLL_ERROR_LEN];
    pycoll_p2p_t *p2p = pycoll_tcp_transport_create(rank, 2, fds, error, sizeof error);
    pycoll_comm_t *comm = NULL;
    if (!p2p || pycoll_comm_create(&comm, p2p, NULL, error, sizeof error) != PYCOLL_OK) {
        printf("rank %d: %s\n", rank, error);
        return NULL;
    }
    return comm;
}

/* A call started with status st and work: checked started, waited for (within the communicator's own deadline,
 * which fails the work sooner), checked finished without error, freed. */
static inline void two_ranks_finish(pycoll_comm_t *comm, pycoll_status_t st, pycoll_work_t *work, const char *what)
{
    CHECK(st == PYCOLL_OK && work, "start %s: %s", what, pycoll_comm_error(comm));
    if (!work)
        return;
    CHECK(pycoll_work_wait(work, 60.0), "%s: not complete after 60 s", what);
    CHECK(pycoll_work_status(work) == PYCOLL_OK, "%s: %s", what, pycoll_work_error(work));
    pycoll_work_free(work);
}

/* The end of rank_main: a checked close (finalize), the communicator destroyed, "rank R ok" printed where every
 * check passed; returns rank_main's exit code. */
static inline int two_ranks_close(pycoll_comm_t *comm, int rank)
{
    const pycoll_status_t st = pycoll_comm_finalize(comm, 5.0);
    CHECK(st == PYCOLL_OK, "finalize: %s", pycoll_comm_error(comm));
    pycoll_comm_destroy(comm);
    if (failures == 0)
        printf("rank %d ok\n", rank);
    return failures != 0;
}

static int run_two_ranks(int (*rank_main)(int rank, int fd))
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) {
        perror("socketpair");
        return 1;
    }
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        close(pair[0]);
        const int code = rank_main(1, pair[1]);
        fflush(stdout); /* _exit does not flush */
        _exit(code);
    }
    close(pair[1]);
    int code = rank_main(0, pair[0]);
    fflush(stdout);
    int status = 0;
    waitpid(child, &status, 0);
    return code || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

#endif
