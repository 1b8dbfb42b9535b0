/* A C program using pycoll without Python: rank 0 makes the job's unique id and writes it to a file, the
 * other ranks read it, every rank joins and all-reduces.
 *
 *     cc -O2 examples/c_allreduce.c -o c_allreduce $(pycoll config --cflags --libs)
 *     ./c_allreduce 0 3 /tmp/job.id & ./c_allreduce 1 3 /tmp/job.id & ./c_allreduce 2 3 /tmp/job.id; wait
 *
 * Arguments: RANK WORLD_SIZE ID_FILE [BYTES ITERATIONS]. With BYTES and ITERATIONS it also times ITERATIONS
 * all-reduces of BYTES of float32 and prints the median (bench/c_embedding.py compares it with Python's).
 * TIMEOUT_S in the environment bounds every wait (default 30 s). The file is only this example's way to pass
 * the id: MPI, a job scheduler or a socket would do as well. The id is the job's key (whoever reads it can join
 * as a rank), so the file is created mode 0600 and read only when it is this user's and closed to others. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, O_NOFOLLOW */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pycoll/pycoll.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Rank 0: write the id to a new file only this user can read (O_EXCL: never into a file someone else
 * prepared), under a temporary name, then rename it, so that no rank reads half an id. */
static int publish(const char *path, const pycoll_unique_id_t *id)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (unlink(tmp) != 0 && errno != ENOENT) /* a leftover of ours; another user's in a sticky /tmp fails */
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, id, sizeof *id) == (ssize_t)sizeof *id;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved ? saved : EIO;
        return -1;
    }
    return 0;
}

/* 0: the id; 1: not there yet; -1: the file is not this user's private file (another user may have planted
 * it to make the ranks join a job of theirs), with the reason printed. */
static int try_read_id(const char *path, pycoll_unique_id_t *id)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 1 : (perror(path), -1);
    struct stat st;
    int result = 1;
    if (fstat(fd, &st) != 0) {
        perror(path);
        result = -1;
    } else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        fprintf(stderr, "%s: not a private file of this user (owner uid %ld, mode %03o): not reading the id\n",
                path, (long)st.st_uid, (unsigned)(st.st_mode & 0777));
        result = -1;
    } else if (read(fd, id, sizeof *id) == (ssize_t)sizeof *id) {
        result = 0;
    }
    close(fd);
    return result;
}

/* try_read_id's results; 1 also when the file did not appear within timeout_s. */
static int read_id(const char *path, pycoll_unique_id_t *id, double timeout_s)
{
    const struct timespec nap = {0, 10 * 1000 * 1000};
    for (double deadline = now() + timeout_s; now() < deadline; nanosleep(&nap, NULL)) {
        int st = try_read_id(path, id);
        if (st <= 0)
            return st;
    }
    return 1;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 6) {
        fprintf(stderr, "usage: %s RANK WORLD_SIZE ID_FILE [BYTES ITERATIONS]\n", argv[0]);
        return 2;
    }
    int32_t rank = atoi(argv[1]), world = atoi(argv[2]);
    const char *id_path = argv[3];
    double timeout_s = getenv("TIMEOUT_S") ? atof(getenv("TIMEOUT_S")) : 30.0;
    pycoll_unique_id_t id;
    if (rank == 0) {
        if (pycoll_get_unique_id(&id) != PYCOLL_OK) {
            fprintf(stderr, "rank 0: pycoll_get_unique_id: %s\n", pycoll_bootstrap_error());
            return 1;
        }
        if (publish(id_path, &id) != 0) {
            perror(id_path);
            return 1;
        }
    } else {
        int got = read_id(id_path, &id, timeout_s);
        if (got > 0)
            fprintf(stderr, "rank %d: no id in %s after %g s\n", rank, id_path, timeout_s);
        if (got != 0)
            return 1;
    }

    pycoll_comm_t *comm;
    pycoll_status_t st = pycoll_comm_init_rank(&comm, world, id, rank, timeout_s);
    if (st != PYCOLL_OK) {
        fprintf(stderr, "rank %d: pycoll_comm_init_rank: %s\n", rank, pycoll_bootstrap_error());
        return 1;
    }

    /* Every rank contributes rank + 1: the sum is world * (world + 1) / 2 everywhere. */
    enum { COUNT = 1 << 20 };
    float *x = malloc(COUNT * sizeof *x);
    for (int64_t i = 0; i < COUNT; i++)
        x[i] = (float)(rank + 1);
    st = pycoll_comm_all_reduce(comm, x, x, COUNT, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                                PYCOLL_ACCURACY_FAST);
    float want = (float)world * (world + 1) / 2;
    int wrong = st != PYCOLL_OK || x[0] != want || x[COUNT - 1] != want;
    if (st != PYCOLL_OK)
        fprintf(stderr, "rank %d: all_reduce: %s\n", rank, pycoll_comm_error(comm));
    printf("rank %d/%d over %s: all_reduce of %d float32 = %g, %s\n", rank, world, pycoll_comm_transport(comm),
           COUNT, x[0], wrong ? "WRONG" : "as expected");
    free(x);

    if (argc == 6 && !wrong) {
        int64_t bytes = atoll(argv[4]), iterations = atoll(argv[5]), count = bytes / 4 > 0 ? bytes / 4 : 1;
        float *y = calloc((size_t)count, sizeof *y);
        double *times = malloc((size_t)iterations * sizeof *times);
        for (int64_t i = 0; i < iterations && st == PYCOLL_OK; i++) {
            double t0 = now();
            st = pycoll_comm_all_reduce(comm, y, y, count, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                                        PYCOLL_ACCURACY_FAST);
            times[i] = now() - t0;
        }
        qsort(times, (size_t)iterations, sizeof *times, compare_doubles);
        if (st == PYCOLL_OK && rank == 0)
            printf("bytes %lld median_us %.2f\n", (long long)(count * 4), times[iterations / 2] * 1e6);
        wrong |= st != PYCOLL_OK;
        free(y);
        free(times);
    }
    /* Checked close: every rank called the same collectives (pycoll_comm_finalize), then free everything. */
    st = pycoll_comm_finalize(comm, 5.0);
    pycoll_comm_destroy(comm);
    return wrong || st != PYCOLL_OK;
}
