/* See fake_collectives.h. Test scaffolding: simple and slow on purpose, correct across processes. */
#define _GNU_SOURCE
#include "fake_collectives.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct fake_job {
    int kind, dtype, op, root, async_error;
    const void *send;
    void *recv;
    size_t count;
    void *stream;
    struct fake_ticket *ticket; /* its place on its stream (NULL: a group, which waits on its first operation's) */
    struct fake_comm *comm;
    struct fake_job *next;
    /* FAKE_GROUP: its point-to-point jobs, progressed together. A send or receive in a group: its message
     * number on its channel, the channel's byte count after it (a send), and whether it has completed. */
    struct fake_job *children;
    long msg;
    unsigned long long end;
    int done;
} fake_job_t;

struct fake_comm {
    char id[160];
    int rank, nranks;
    long seq;
    long *sent, *received; /* point-to-point messages per peer so far */
    unsigned long long *sent_bytes, *received_bytes; /* and their bytes */
    int mismatch_error; /* the vendor's code for a receive whose count differs from its send's */
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    fake_job_t *head, *tail;
    int ready, stop, drain, async_error;
    int cancelled; /* fake_comm_cancel: the worker is gone, its jobs freed */
};

/* Streams, as a GPU runs them: the work queued on a stream runs in order, off the caller's thread -- a
 * collective on its communicator's worker, any other work (fake_stream_submit: a copy, a "kernel", an event's
 * wait) on the stream's own thread -- and each piece starts only once the one queued before it on its stream
 * has completed and the marks it depends on (fake_ticket_t) are reached. With legacy_default set (the CUDA
 * runtime), the NULL stream (and cudaStreamLegacy, 0x1) is CUDA's legacy default stream: work queued on it
 * waits for all work queued before on every blocking stream, and work queued on a blocking stream waits for
 * the legacy stream's; a stream flagged FAKE_STREAM_NON_BLOCKING takes part in neither. Per stream, never
 * recycled: how much work was ever queued on it and how much has completed (an event compares them). */
#define MAX_STREAMS 256
#define MAX_DEPS 32
int fake_legacy_default_stream;

typedef struct fake_ticket {
    void *stream;
    long long index; /* its place on stream: runs once index - 1 pieces have completed there */
    int ndeps;
    void *dep_stream[MAX_DEPS];
    long long dep_mark[MAX_DEPS];
} fake_ticket_t;

typedef struct stream_op {
    fake_ticket_t ticket;
    void (*fn)(void *);
    void *arg;
    struct stream_op *next;
} stream_op_t;

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t streams_cond = PTHREAD_COND_INITIALIZER; /* broadcast at every completion */
static struct stream_slot {
    void *stream;
    int used, flags, has_thread;
    long long queued, completed;
    long long idle_ns; /* when its last work completed (0: not since it was last looked at) */
    stream_op_t *head, *tail; /* fake_stream_submit's work not started yet */
} streams[MAX_STREAMS];

static int is_legacy(void *stream)
{
    return stream == NULL || stream == (void *)1;
}

/* Under streams_lock: stream's slot (made on first use), NULL when the table is full. */
static struct stream_slot *slot_of(void *stream)
{
    if (stream == (void *)1)
        stream = NULL;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i].used && streams[i].stream == stream)
            return &streams[i];
    for (int i = 0; i < MAX_STREAMS; i++)
        if (!streams[i].used) {
            streams[i] = (struct stream_slot){.stream = stream, .used = 1};
            return &streams[i];
        }
    fprintf(stderr, "fake collectives: more than %d streams\n", MAX_STREAMS);
    return NULL;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void add_dep(fake_ticket_t *t, struct stream_slot *s)
{
    if (s->queued > s->completed && t->ndeps < MAX_DEPS) {
        t->dep_stream[t->ndeps] = s->stream;
        t->dep_mark[t->ndeps++] = s->queued;
    }
}

/* Under streams_lock: a new piece of work on stream, its ticket in *t. */
static void enter_locked(void *stream, fake_ticket_t *t)
{
    struct stream_slot *s = slot_of(stream);
    *t = (fake_ticket_t){.stream = s ? s->stream : stream};
    if (!s)
        return;
    if (fake_legacy_default_stream && is_legacy(stream)) {
        for (int i = 0; i < MAX_STREAMS; i++)
            if (streams[i].used && !is_legacy(streams[i].stream) && !(streams[i].flags & FAKE_STREAM_NON_BLOCKING))
                add_dep(t, &streams[i]);
    } else if (fake_legacy_default_stream && !(s->flags & FAKE_STREAM_NON_BLOCKING)) {
        struct stream_slot *legacy = slot_of(NULL);
        if (legacy)
            add_dep(t, legacy);
    }
    t->index = ++s->queued;
    s->idle_ns = 0;
}

static int ticket_ready_locked(const fake_ticket_t *t);

static void complete_locked(struct stream_slot *s)
{
    s->completed++;
    if (s->completed >= s->queued)
        s->idle_ns = now_ns();
    pthread_cond_broadcast(&streams_cond);
}

/* Markers (work that does nothing: an event's record, a wait on an event) complete once their turn has come:
 * as soon as anyone looks, without a thread of their own. */
static _Thread_local int pumping;

static void pump_locked(struct stream_slot *s)
{
    if (pumping > 8) /* markers waiting on markers: looked at again on the next look */
        return;
    pumping++;
    while (s->head && !s->head->fn && ticket_ready_locked(&s->head->ticket)) {
        stream_op_t *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        complete_locked(s);
        free(op);
    }
    pumping--;
}

static int reached_locked(void *stream, long long mark)
{
    struct stream_slot *s = slot_of(stream);
    if (s && s->completed < mark)
        pump_locked(s);
    return !s || s->completed >= mark;
}

static int ticket_ready_locked(const fake_ticket_t *t)
{
    struct stream_slot *s = slot_of(t->stream);
    if (s && s->completed < t->index - 1)
        return 0; /* its turn has not come (pump_locked looks at the work before it first) */
    for (int i = 0; i < t->ndeps; i++)
        if (!reached_locked(t->dep_stream[i], t->dep_mark[i]))
            return 0;
    return 1;
}

static int ticket_ready(const fake_ticket_t *t)
{
    pthread_mutex_lock(&streams_lock);
    int ready = reached_locked(t->stream, t->index - 1) && ticket_ready_locked(t);
    pthread_mutex_unlock(&streams_lock);
    return ready;
}

/* A piece of work on stream completed (or was abandoned by an abort: its kernel ended). */
static void leave(void *stream)
{
    pthread_mutex_lock(&streams_lock);
    struct stream_slot *s = slot_of(stream);
    if (s) {
        complete_locked(s);
        pump_locked(s);
    }
    pthread_mutex_unlock(&streams_lock);
}

static void *stream_thread(void *arg)
{
    struct stream_slot *s = arg;
    pthread_mutex_lock(&streams_lock);
    for (;;) {
        for (;;) {
            pump_locked(s);
            if (s->head && s->head->fn && ticket_ready_locked(&s->head->ticket))
                break;
            pthread_cond_wait(&streams_cond, &streams_lock);
        }
        stream_op_t *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&streams_lock);
        op->fn(op->arg);
        pthread_mutex_lock(&streams_lock);
        complete_locked(s);
        pump_locked(s);
        free(op);
    }
    return NULL;
}

long long fake_stream_submit(void *stream, void (*fn)(void *), void *arg, void *after_stream, long long after_mark)
{
    stream_op_t *op = calloc(1, sizeof *op);
    if (!op)
        return -1;
    op->fn = fn;
    op->arg = arg;
    pthread_mutex_lock(&streams_lock);
    struct stream_slot *s = slot_of(stream);
    if (!s) {
        pthread_mutex_unlock(&streams_lock);
        free(op);
        return -1;
    }
    enter_locked(stream, &op->ticket);
    if (after_mark > 0 && op->ticket.ndeps < MAX_DEPS) {
        op->ticket.dep_stream[op->ticket.ndeps] = after_stream == (void *)1 ? NULL : after_stream;
        op->ticket.dep_mark[op->ticket.ndeps++] = after_mark;
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    long long index = op->ticket.index;
    pump_locked(s);
    if (fn && !s->has_thread) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        s->has_thread = pthread_create(&thread, &attr, stream_thread, s) == 0;
        pthread_attr_destroy(&attr);
    }
    pthread_cond_broadcast(&streams_cond);
    pthread_mutex_unlock(&streams_lock);
    return index;
}

void fake_stream_set_flags(void *stream, int flags)
{
    pthread_mutex_lock(&streams_lock);
    struct stream_slot *s = slot_of(stream);
    if (s)
        s->flags = flags;
    pthread_mutex_unlock(&streams_lock);
}

int fake_stream_busy(void *stream)
{
    pthread_mutex_lock(&streams_lock);
    struct stream_slot *s = slot_of(stream);
    if (s)
        pump_locked(s);
    int busy = s && s->queued > s->completed;
    pthread_mutex_unlock(&streams_lock);
    return busy;
}

long long fake_stream_idle_for_ns(void *stream)
{
    long long idle = 0;
    pthread_mutex_lock(&streams_lock);
    struct stream_slot *s = slot_of(stream);
    if (s)
        pump_locked(s);
    if (s && s->queued <= s->completed && s->idle_ns) {
        idle = now_ns() - s->idle_ns;
        s->idle_ns = 0;
    }
    pthread_mutex_unlock(&streams_lock);
    return idle;
}

long long fake_stream_mark(void *stream)
{
    pthread_mutex_lock(&streams_lock);
    struct stream_slot *s = slot_of(stream);
    long long queued = s ? s->queued : 0;
    pthread_mutex_unlock(&streams_lock);
    return queued;
}

int fake_stream_reached(void *stream, long long mark)
{
    pthread_mutex_lock(&streams_lock);
    int reached = reached_locked(stream, mark);
    pthread_mutex_unlock(&streams_lock);
    return reached;
}

int fake_any_stream_busy(void)
{
    int busy = 0;
    pthread_mutex_lock(&streams_lock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (streams[i].used)
            pump_locked(&streams[i]);
        busy |= streams[i].used && streams[i].queued > streams[i].completed;
    }
    pthread_mutex_unlock(&streams_lock);
    return busy;
}

size_t fake_dtype_size(int dtype)
{
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return (unsigned)dtype < sizeof sizes / sizeof sizes[0] ? sizes[dtype] : 0;
}

void fake_log(const char *fmt, ...)
{
    const char *path = getenv("FAKE_COLL_LOG");
    if (!path)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0)
            perror("fake_log");
        close(fd);
    }
}

int fake_injected(const char *call)
{
    const char *spec = getenv("FAKE_COLL_FAIL");
    size_t len = strlen(call);
    for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, call, len) == 0 && p[len] == '=')
            return atoi(p + len + 1);
    return 0;
}

void fake_new_id(char *out, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, len, "fake-%d-%lld-%ld", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec);
}

static void path_of(const fake_comm_t *c, long seq, int rank, char *out, size_t len)
{
    const char *dir = getenv("FAKE_COLL_DIR");
    snprintf(out, len, "%s/%s.%ld.%d", dir ? dir : "/tmp", c->id, seq, rank);
}

static int write_file(const char *path, const void *data, size_t nbytes)
{
    char tmp[520];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    size_t wrote = nbytes ? fwrite(data, 1, nbytes, f) : 0;
    fclose(f);
    return wrote == nbytes ? rename(tmp, path) : -1;
}

static int publish(const fake_comm_t *c, long seq, const void *data, size_t nbytes)
{
    char path[512];
    path_of(c, seq, c->rank, path, sizeof path);
    return write_file(path, data, nbytes);
}

/* The file of the n-th message from rank `from` to rank `to`. */
static void channel_path(const fake_comm_t *c, int from, int to, long n, char *out, size_t len)
{
    const char *dir = getenv("FAKE_COLL_DIR");
    snprintf(out, len, "%s/%s.p2p.%d.%d.%ld", dir ? dir : "/tmp", c->id, from, to, n);
}

static int stopping(fake_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    int stop = c->stop;
    pthread_mutex_unlock(&c->lock);
    return stop;
}

/* Until path exists (1, its size in *size), or the communicator is aborted (0). */
static int wait_for_file(fake_comm_t *c, const char *path, size_t *size)
{
    struct stat st;
    while (stat(path, &st) != 0) {
        if (stopping(c))
            return 0;
        usleep(200);
    }
    *size = (size_t)st.st_size;
    return 1;
}

static void read_file(const char *path, void *out, size_t nbytes)
{
    FILE *f = fopen(path, "rb");
    if (!f || fread(out, 1, nbytes, f) != nbytes)
        fprintf(stderr, "fake collectives: cannot read %s\n", path);
    if (f)
        fclose(f);
}

/* Every rank's bytes of sequence number seq (malloc'd, in rank order), or NULL when aborted first. */
static char **gather_files(fake_comm_t *c, long seq)
{
    char **data = calloc((size_t)c->nranks, sizeof *data);
    for (int r = 0; r < c->nranks; r++) {
        char path[512];
        size_t size = 0;
        path_of(c, seq, r, path, sizeof path);
        if (!wait_for_file(c, path, &size)) {
            for (int i = 0; i < r; i++)
                free(data[i]);
            free(data);
            return NULL;
        }
        data[r] = malloc(size + 1);
        read_file(path, data[r], size);
    }
    return data;
}

/* Point-to-point, as NCCL runs it (nccl.h; "Point-to-point communication" in NCCL's user guide):
 * - Sends and receives of one group (ncclGroupStart/End) progress together: NCCL fuses them into one launch, so
 *   two ranks that send to each other in one group never wait on each other. Groups run one after another on a
 *   communicator (here: one job, FAKE_GROUP, progressed by polling each of its operations in turn).
 * - A send completes once the peer has received all but the connection's buffer of what was sent before it
 *   and by it: NCCL stages a send through a per-peer FIFO of NCCL_BUFFSIZE bytes (4 MiB by default), and the
 *   sender waits for the receiver to free slots. FAKE_P2P_BUFFER_BYTES sets the bound here (default 4 MiB), so
 *   tests can make it small; a group whose send exceeds it waits for the peer's matching receive, which a peer
 *   that posts it only in a later group never makes: both ranks block, as on a GPU.
 * - "Rank peer needs to call ncclRecv with the same datatype and the same count from this rank" (nccl.h): a
 *   receive whose byte count differs from its send's is an error (the vendor's code, set by
 *   fake_comm_set_mismatch_error), reported asynchronously; the group never completes, as a kernel left
 *   waiting for bytes that never come. HCCL's HcclSend/HcclRecv have the same rule (hccl.h).
 * A send leaves its bytes in a file at once; the receiver takes the file, deletes it and publishes how many
 * bytes of the channel it has consumed (the ".consumed" file), which is what the sender's completion waits on. */
static unsigned long long buffer_bytes(void)
{
    const char *b = getenv("FAKE_P2P_BUFFER_BYTES");
    return b && atoll(b) > 0 ? (unsigned long long)atoll(b) : 4ULL << 20;
}

static void consumed_path(const fake_comm_t *c, int from, int to, char *out, size_t len)
{
    const char *dir = getenv("FAKE_COLL_DIR");
    snprintf(out, len, "%s/%s.p2p.%d.%d.consumed", dir ? dir : "/tmp", c->id, from, to);
}

static unsigned long long read_consumed(const fake_comm_t *c, int to)
{
    char path[512];
    unsigned long long consumed = 0;
    consumed_path(c, c->rank, to, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%llu", &consumed) != 1)
            consumed = 0;
        fclose(f);
    }
    return consumed;
}

static void publish_consumed(const fake_comm_t *c, int from)
{
    char path[512], text[32];
    consumed_path(c, from, c->rank, path, sizeof path);
    int n = snprintf(text, sizeof text, "%llu", c->received_bytes[from]);
    write_file(path, text, (size_t)n);
}

/* One step of a receive: done (1) once its message has arrived and been taken; -1 on a count mismatch. */
static int try_receive(fake_comm_t *c, fake_job_t *j)
{
    char path[512];
    struct stat st;
    size_t nbytes = j->count * fake_dtype_size(j->dtype);
    channel_path(c, j->root, c->rank, j->msg, path, sizeof path);
    if (stat(path, &st) != 0)
        return 0;
    size_t size = (size_t)st.st_size;
    if (size != nbytes) {
        fake_log("p2p count mismatch rank=%d peer=%d: the send has %zu bytes, the receive expects %zu", c->rank,
                 j->root, size, nbytes);
        return -1;
    }
    read_file(path, j->recv, nbytes);
    unlink(path);
    c->received_bytes[j->root] += nbytes;
    publish_consumed(c, j->root);
    return 1;
}

/* Runs a group's sends and receives together until all have completed (0), the communicator is aborted (0:
 * the job stays queued), or a receive's count differs from its send's (the mismatch code). */
static int run_group(fake_comm_t *c, fake_job_t *g)
{
    const unsigned long long bound = buffer_bytes();
    for (fake_job_t *j = g->children; j; j = j->next) {
        if (j->kind == FAKE_SEND) {
            char path[512];
            size_t nbytes = j->count * fake_dtype_size(j->dtype);
            j->msg = ++c->sent[j->root];
            j->end = c->sent_bytes[j->root] += nbytes;
            channel_path(c, c->rank, j->root, j->msg, path, sizeof path);
            if (write_file(path, j->send, nbytes) != 0)
                fprintf(stderr, "fake collectives: cannot write %s\n", path);
        } else {
            j->msg = ++c->received[j->root];
        }
    }
    for (;;) {
        int pending = 0;
        for (fake_job_t *j = g->children; j; j = j->next) {
            if (j->done)
                continue;
            if (j->kind == FAKE_SEND) {
                j->done = j->end <= bound || read_consumed(c, j->root) >= j->end - bound;
            } else {
                int r = try_receive(c, j);
                if (r < 0)
                    return c->mismatch_error;
                j->done = r;
            }
            pending += !j->done;
        }
        if (!pending || stopping(c))
            return 0;
        usleep(200);
    }
}

static float half_to_float(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v = exp == 0 ? ldexpf((float)mant, -24)
              : exp == 31 ? (mant ? NAN : INFINITY)
                          : ldexpf((float)(mant | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t float_to_half(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    float a = fabsf(f);
    if (isnan(f))
        return 0x7e00;
    if (a >= 65520.0f)
        return sign | 0x7c00;
    if (a < ldexpf(1.0f, -14)) /* subnormal: a multiple of 2^-24, rounded to nearest even by rintf */
        return sign | (uint16_t)rintf(ldexpf(a, 24));
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    uint32_t mant = (uint32_t)rintf(ldexpf(a, 11 - e)); /* 11 significant bits */
    if (mant == 2048) {
        mant = 1024;
        e++;
    }
    return sign | (uint16_t)(((e + 14) << 10) | (mant & 0x3ff));
}

static float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f))
        return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static double load(const void *p, size_t i, int dtype)
{
    switch (dtype) {
    case FAKE_F16: return half_to_float(((const uint16_t *)p)[i]);
    case FAKE_BF16: return bf16_to_float(((const uint16_t *)p)[i]);
    case FAKE_F32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void store(void *p, size_t i, int dtype, double v)
{
    switch (dtype) {
    case FAKE_F16: ((uint16_t *)p)[i] = float_to_half((float)v); break;
    case FAKE_BF16: ((uint16_t *)p)[i] = float_to_bf16((float)v); break;
    case FAKE_F32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v;
    }
}

static int64_t load_int(const void *p, size_t i, int dtype)
{
    switch (dtype) {
    case FAKE_I8: return ((const int8_t *)p)[i];
    case FAKE_U8: return ((const uint8_t *)p)[i];
    case FAKE_I32: return ((const int32_t *)p)[i];
    case FAKE_U32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static void store_int(void *p, size_t i, int dtype, int64_t v)
{
    switch (dtype) {
    case FAKE_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case FAKE_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case FAKE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case FAKE_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v;
    }
}

static int is_float(int dtype)
{
    return dtype == FAKE_F16 || dtype == FAKE_BF16 || dtype == FAKE_F32 || dtype == FAKE_F64;
}

/* out[i] = op over ranks (in rank order) of in[r][offset + i]; floats combined in the element's precision
 * (float16/bfloat16 in float32, rounded once). */
static void fold(char **in, int nranks, size_t offset, void *out, size_t count, int dtype, int op)
{
    for (size_t i = 0; i < count; i++) {
        if (is_float(dtype)) {
            double acc = load(in[0], offset + i, dtype);
            for (int r = 1; r < nranks; r++) {
                double v = load(in[r], offset + i, dtype);
                acc = op == FAKE_PROD ? acc * v : op == FAKE_MIN ? fmin(acc, v) : op == FAKE_MAX ? fmax(acc, v) : acc + v;
                if (dtype == FAKE_F32 || dtype == FAKE_F16 || dtype == FAKE_BF16)
                    acc = (float)acc;
            }
            store(out, i, dtype, op == FAKE_AVG ? acc / nranks : acc);
        } else {
            uint64_t acc = (uint64_t)load_int(in[0], offset + i, dtype);
            for (int r = 1; r < nranks; r++) {
                int64_t v = load_int(in[r], offset + i, dtype);
                acc = op == FAKE_PROD  ? acc * (uint64_t)v
                      : op == FAKE_MIN ? (uint64_t)((int64_t)acc < v ? (int64_t)acc : v)
                      : op == FAKE_MAX ? (uint64_t)((int64_t)acc > v ? (int64_t)acc : v)
                                       : acc + (uint64_t)v;
            }
            store_int(out, i, dtype, op == FAKE_AVG ? (int64_t)acc / nranks : (int64_t)acc);
        }
    }
}

static void run_job(fake_comm_t *c, const fake_job_t *j)
{
    if (j->kind == FAKE_BARRIER) { /* its own name (seq -1), so a collective a peer still waits in never takes it */
        char none[1] = {0};
        publish(c, -1, none, 0);
        char **arrived = gather_files(c, -1);
        for (int r = 0; arrived && r < c->nranks; r++)
            free(arrived[r]);
        free(arrived);
        return;
    }
    size_t isz = fake_dtype_size(j->dtype);
    size_t send_bytes = j->kind == FAKE_REDUCE_SCATTER ? j->count * isz * (size_t)c->nranks
                        : j->kind == FAKE_BROADCAST && c->rank != j->root ? 0
                                                                           : j->count * isz;
    long seq = ++c->seq;
    if (publish(c, seq, j->send, send_bytes) != 0)
        fprintf(stderr, "fake collectives: cannot publish rank %d seq %ld\n", c->rank, seq);
    char **in = gather_files(c, seq);
    if (!in)
        return;
    switch (j->kind) {
    case FAKE_ALL_REDUCE: fold(in, c->nranks, 0, j->recv, j->count, j->dtype, j->op); break;
    case FAKE_REDUCE:
        if (c->rank == j->root)
            fold(in, c->nranks, 0, j->recv, j->count, j->dtype, j->op);
        break;
    case FAKE_REDUCE_EVERY_RANK: fold(in, c->nranks, 0, j->recv, j->count, j->dtype, j->op); break;
    case FAKE_REDUCE_SCATTER:
        fold(in, c->nranks, (size_t)c->rank * j->count, j->recv, j->count, j->dtype, j->op);
        break;
    case FAKE_ALL_GATHER:
        for (int r = 0; r < c->nranks; r++)
            memcpy((char *)j->recv + (size_t)r * j->count * isz, in[r], j->count * isz);
        break;
    case FAKE_BROADCAST: memcpy(j->recv, in[j->root], j->count * isz); break;
    }
    for (int r = 0; r < c->nranks; r++)
        free(in[r]);
    free(in);
    /* Every rank has published seq, so every rank is done reading seq - 1: our old file can go. */
    char old[512];
    path_of(c, seq - 1, c->rank, old, sizeof old);
    unlink(old);
}

/* Frees a finished (or abandoned) job, and a group's operations, each leaving its stream. */
static void free_job(fake_job_t *j)
{
    for (fake_job_t *k = j->children, *next; k; k = next) {
        next = k->next;
        free_job(k);
    }
    if (j->kind != FAKE_GROUP)
        leave(j->stream);
    free(j->ticket);
    free(j);
}

static void *worker(void *arg)
{
    fake_comm_t *c = arg;
    char init[1] = {0};
    publish(c, 0, init, 1);
    char **in = gather_files(c, 0);
    if (!in)
        return NULL;
    for (int r = 0; r < c->nranks; r++)
        free(in[r]);
    free(in);
    pthread_mutex_lock(&c->lock);
    c->ready = 1;
    for (;;) {
        while (!c->head && !c->stop && !c->drain)
            pthread_cond_wait(&c->cond, &c->lock);
        if (c->stop || (!c->head && c->drain))
            break;
        fake_job_t *j = c->head;
        pthread_mutex_unlock(&c->lock);
        /* Its turn on its stream: what was queued there before it (and what that waits for) has completed. */
        const fake_ticket_t *ticket = j->kind == FAKE_GROUP ? j->children->ticket : j->ticket;
        while (!ticket_ready(ticket) && !stopping(c))
            usleep(100);
        if (stopping(c)) {
            pthread_mutex_lock(&c->lock);
            break;
        }
        int failed = j->async_error;
        const char *kernel_us = getenv("FAKE_KERNEL_US"); /* a device kernel's run time, for latency tests */
        if (failed && kernel_us) /* it runs that long before it hits the failure */
            usleep((useconds_t)atoi(kernel_us));
        if (!failed && j->kind == FAKE_GROUP)
            failed = run_group(c, j);
        else if (!failed)
            run_job(c, j);
        if (failed) {
            /* The collective hit an error (a peer died): recorded, and the kernel never finishes -- the job
             * stays queued and its stream busy until abort, as a GPU kernel waiting on a dead peer does. */
            pthread_mutex_lock(&c->lock);
            c->async_error = failed;
            while (!c->stop)
                pthread_cond_wait(&c->cond, &c->lock);
            break;
        } else {
            if (kernel_us && j->kind != FAKE_BARRIER)
                usleep((useconds_t)atoi(kernel_us));
        }
        pthread_mutex_lock(&c->lock);
        if (c->stop) /* aborted mid-collective: the job stays queued, its stream busy, as on a dead GPU */
            break;
        c->head = j->next;
        if (!c->head)
            c->tail = NULL;
        free_job(j);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

fake_comm_t *fake_comm_start(const char *id, int rank, int nranks)
{
    fake_comm_t *c = calloc(1, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    c->rank = rank;
    c->nranks = nranks;
    c->sent = calloc((size_t)nranks, sizeof *c->sent);
    c->received = calloc((size_t)nranks, sizeof *c->received);
    c->sent_bytes = calloc((size_t)nranks, sizeof *c->sent_bytes);
    c->received_bytes = calloc((size_t)nranks, sizeof *c->received_bytes);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    pthread_create(&c->worker, NULL, worker, c);
    return c;
}

int fake_comm_ready(fake_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    int ready = c->ready;
    pthread_mutex_unlock(&c->lock);
    return ready;
}

int fake_comm_async_error(fake_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    int e = c->async_error;
    pthread_mutex_unlock(&c->lock);
    return e;
}

/* j at the end of the list *head .. *tail (both NULL: empty). */
static void append(fake_job_t **head, fake_job_t **tail, fake_job_t *j)
{
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static void push(fake_job_t *j)
{
    fake_comm_t *c = j->comm;
    pthread_mutex_lock(&c->lock);
    append(&c->head, &c->tail, j);
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static _Thread_local int group_depth;
static _Thread_local fake_job_t *group_head, *group_tail;

void fake_group_start(void)
{
    group_depth++;
}

/* A group's sends and receives on one communicator become one FAKE_GROUP job there (they progress together);
 * its collectives stay jobs of their own, in order. */
static fake_job_t *group_job(fake_comm_t *c)
{
    fake_job_t *g = calloc(1, sizeof *g);
    g->kind = FAKE_GROUP;
    g->comm = c;
    return g;
}

static int is_p2p(const fake_job_t *j)
{
    return j->kind == FAKE_SEND || j->kind == FAKE_RECV;
}

void fake_group_end(void)
{
    if (group_depth == 0 || --group_depth > 0)
        return;
    fake_job_t *jobs = group_head;
    group_head = group_tail = NULL;
    while (jobs) {
        fake_job_t *j = jobs;
        jobs = j->next;
        j->next = NULL;
        if (!is_p2p(j)) {
            push(j);
            continue;
        }
        /* j and every later operation of the group on j's communicator, in their order */
        fake_job_t *g = group_job(j->comm), **tail = &g->children;
        *tail = j;
        tail = &j->next;
        g->async_error = j->async_error;
        for (fake_job_t **p = &jobs; *p;) {
            fake_job_t *k = *p;
            if (is_p2p(k) && k->comm == j->comm) {
                *p = k->next;
                k->next = NULL;
                *tail = k;
                tail = &k->next;
                if (!g->async_error)
                    g->async_error = k->async_error;
            } else {
                p = &k->next;
            }
        }
        push(g);
    }
}

void fake_comm_enqueue(fake_comm_t *c, int kind, const void *send, void *recv, size_t count, int dtype, int op,
                       int root, void *stream, int async_error)
{
    fake_job_t *j = calloc(1, sizeof *j);
    *j = (fake_job_t){.kind = kind, .dtype = dtype, .op = op, .root = root, .async_error = async_error,
                      .send = send, .recv = recv, .count = count, .stream = stream, .comm = c};
    j->ticket = calloc(1, sizeof *j->ticket);
    pthread_mutex_lock(&streams_lock);
    enter_locked(stream, j->ticket);
    pthread_mutex_unlock(&streams_lock);
    if (group_depth == 0 && is_p2p(j)) { /* a lone send or receive is a group of its own */
        fake_job_t *g = group_job(c);
        g->children = j;
        g->async_error = async_error;
        push(g);
        return;
    }
    if (group_depth == 0) {
        push(j);
        return;
    }
    append(&group_head, &group_tail, j);
}

void fake_comm_set_mismatch_error(fake_comm_t *c, int code)
{
    c->mismatch_error = code;
}

const char *fake_comm_id(const fake_comm_t *c)
{
    return c->id;
}

int fake_comm_busy(fake_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    int busy = c->head != NULL;
    pthread_mutex_unlock(&c->lock);
    return busy;
}

/* Stops the worker (mid-collective too) and frees its jobs, each leaving its stream. */
static void stop_worker(fake_comm_t *c, int abort)
{
    pthread_mutex_lock(&c->lock);
    if (abort)
        c->stop = 1;
    else
        c->drain = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->worker, NULL);
    for (fake_job_t *j = c->head, *next; j; j = next) {
        next = j->next;
        free_job(j);
    }
    c->head = c->tail = NULL;
}

void fake_comm_cancel(fake_comm_t *c)
{
    if (!c->cancelled)
        stop_worker(c, 1);
    c->cancelled = 1;
}

static void finish(fake_comm_t *c, int abort)
{
    if (!c->cancelled)
        stop_worker(c, abort);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c->sent);
    free(c->received);
    free(c->sent_bytes);
    free(c->received_bytes);
    free(c);
}

void fake_comm_abort(fake_comm_t *c)
{
    finish(c, 1);
}

void fake_comm_destroy(fake_comm_t *c)
{
    finish(c, 0);
}
