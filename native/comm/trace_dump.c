/* The flight recorder's dumps (flight_ring.h): one JSON file per rank per communicator,
 * DIR/pycoll-trace-<comm_uid>-rank<R>.json, written whole or not at all (a temporary file, then a rename), so that
 * a reader of the directory never sees half a dump. The format is docs/api.md's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/flight_clock.h"
#include "comm/flight_ring.h"
#include "common/settings.h"

#define TRACE_FORMAT_VERSION 1

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct json_text {
    char *data;
    size_t len, cap;
    int short_of_memory;
} json_text_t;

static void json_printf(json_text_t *j, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2 && !j->short_of_memory; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = j->cap - j->len;
        const int n = vsnprintf(j->data ? j->data + j->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n < room) {
            j->len += n > 0 ? (size_t)n : 0;
            return;
        }
        const size_t cap = (j->cap + (size_t)n + 1) * 2;
        char *grown = realloc(j->data, cap);
        if (!grown) {
            j->short_of_memory = 1;
            return;
        }
        j->data = grown;
        j->cap = cap;
    }
}

/* s as a JSON string (NULL: null): quotes, backslashes and control characters escaped. */
static void json_string(json_text_t *j, const char *s)
{
    if (!s) {
        json_printf(j, "null");
        return;
    }
    json_printf(j, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            json_printf(j, "\\%c", *c);
        else if (*c < 0x20)
            json_printf(j, "\\u%04x", *c);
        else
            json_printf(j, "%c", *c);
    }
    json_printf(j, "\"");
}

/* An int64 field that is null when `known` is 0. */
static void json_int_or_null(json_text_t *j, const char *key, int known, int64_t value)
{
    if (known)
        json_printf(j, ", \"%s\": %lld", key, (long long)value);
    else
        json_printf(j, ", \"%s\": null", key);
}

/* The id every rank of a communicator derives alike: the job's id (PYCOLL_JOB_ID, set by pycoll run), the
 * communicator's group (0 for the one init made, the split's hash else) and its fault-tolerance epoch. */
static uint64_t comm_uid(const pycoll_comm_t *comm)
{
    uint64_t h = 14695981039346656037ULL;
    const char *job = setting_text(SETTING_JOB_ID);
    for (const char *c = job ? job : ""; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    const uint64_t words[2] = {comm->group, comm->ft_generation};
    for (int w = 0; w < 2; w++)
        for (int byte = 0; byte < 8; byte++)
            h = (h ^ ((words[w] >> (8 * byte)) & 0xff)) * 1099511628211ULL;
    return h;
}

static int reduces(int collective)
{
    return collective == PYCOLL_COLL_ALL_REDUCE || collective == PYCOLL_COLL_REDUCE_SCATTER ||
           collective == PYCOLL_COLL_REDUCE || collective == PYCOLL_COLL_REDUCE_SCATTER_V;
}

static const char *const state_names[] = {"running", "completed", "failed"};

/* What write_entry needs besides the entry: the 64-bit counts its 32-bit numbers are the low bits of, the time
 * offset, the transport. clock turns the entries' ticks into CLOCK_MONOTONIC times, and unix_offset (CLOCK_REALTIME
 * minus CLOCK_MONOTONIC at the dump) those into wall-clock times that compare across processes and hosts (a
 * wall-clock step since a call shifts its times). */
typedef struct dump_context {
    uint64_t coll_seqs, p2p_seqs; /* numbered so far */
    flight_clock_map_t clock;
    int64_t unix_offset;
    const char *transport;
} dump_context_t;

/* The seq whose low 32 bits are `low`, near `count` (numbered so far when the dump began: the ring's calls are
 * within 2^31 of it, before it, or just after for calls that entered since). */
static uint64_t restore_seq(uint64_t count, uint32_t low)
{
    return count + (uint64_t)(int64_t)(int32_t)(low - (uint32_t)count);
}

static void write_entry(json_text_t *j, const flight_entry_t *e, const char *error, const dump_context_t *d)
{
    const int p2p = e->collective == PYCOLL_COLL_SEND_RECV;
    const uint64_t seq = restore_seq(p2p ? d->p2p_seqs : d->coll_seqs, e->seq);
    json_printf(j, "    {\"seq\": %llu, \"collective\": ", (unsigned long long)seq);
    json_string(j, p2p ? (e->sends ? "send" : "recv") : pycoll_coll_name((pycoll_coll_t)e->collective));
    json_printf(j, ", \"dtype\": ");
    json_string(j, pycoll_dtype_name((pycoll_dtype_t)e->dtype));
    json_printf(j, ", \"count\": %lld, \"op\": ", (long long)e->count);
    json_string(j, reduces(e->collective) ? pycoll_op_name((pycoll_op_t)e->op) : NULL);
    json_int_or_null(j, "root", !p2p && e->rank >= 0, e->rank);
    json_int_or_null(j, "peer", p2p, e->rank);
    json_printf(j, ", \"algorithm\": ");
    json_string(j, e->algorithm < PYCOLL_NUM_ALGOS ? pycoll_algorithm_name((pycoll_algorithm_t)e->algorithm) : NULL);
    json_printf(j, ", \"transport\": ");
    json_string(j, d->transport);
    json_printf(j, ", \"accuracy\": ");
    json_string(j, pycoll_accuracy_name((pycoll_accuracy_t)e->accuracy));
    json_printf(j, ", \"async\": %s, \"bytes\": null, \"start_unix_ns\": %lld", e->is_async ? "true" : "false",
                (long long)(flight_clock_ns(&d->clock, e->start_ticks) + d->unix_offset));
    json_int_or_null(j, "end_unix_ns", e->end_ticks != 0, flight_clock_ns(&d->clock, e->end_ticks) + d->unix_offset);
    const int32_t wait_peer = atomic_load_explicit(&e->wait_peer, memory_order_relaxed);
    json_printf(j, ", \"wait_ns\": %lld", (long long)atomic_load_explicit(&e->wait_ns, memory_order_relaxed));
    json_int_or_null(j, "wait_peer", wait_peer >= 0, wait_peer);
    json_printf(j, ", \"state\": \"%s\", \"error\": ", state_names[e->state < 3 ? e->state : 0]);
    json_string(j, e->state == FLIGHT_FAILED ? error : NULL);
    json_printf(j, "}");
}

static void write_calls(json_text_t *j, const pycoll_comm_t *comm)
{
    const flight_recorder_t *r = comm->recorder;
    const uint64_t last = r ? atomic_load_explicit(&r->calls, memory_order_acquire) : 0;
    const uint64_t first = r && last > r->capacity ? last - r->capacity + 1 : 1;
    const uint64_t p2p_calls = r ? atomic_load_explicit(&r->p2p_calls, memory_order_acquire) : 0;
    dump_context_t d = {.coll_seqs = last - p2p_calls, .p2p_seqs = p2p_calls,
                        .unix_offset = realtime_ns() - pycoll_now_ns(),
                        .transport = comm->family->transport->ops->name};
    flight_clock_map(&d.clock);
    int written = 0;
    for (uint64_t id = first; id <= last; id++) {
        flight_entry_t e;
        char error[FLIGHT_ERROR_LEN];
        if (!flight_entry_read(r, (id - 1) & r->mask, &e, error) || e.id != (uint32_t)id)
            continue; /* overwritten by a newer call since `last` was read */
        json_printf(j, written++ ? ",\n" : "\n");
        write_entry(j, &e, error, &d);
    }
    json_printf(j, written ? "\n  ]" : "]");
}

/* The whole dump of comm; NULL when memory is short. */
static char *dump_text(const pycoll_comm_t *comm, const char *reason, size_t *len)
{
    json_text_t j = {0};
    const flight_recorder_t *r = comm->recorder;
    const uint64_t calls = r ? atomic_load_explicit(&r->calls, memory_order_relaxed) : 0;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char name[96];
    comm_live_members(comm, name, sizeof name);
    json_printf(&j, "{\"format\": \"pycoll-trace\", \"version\": %d, \"rank\": %d, \"world\": %d, "
                "\"comm_uid\": \"%016llx\", \"comm_name\": ", TRACE_FORMAT_VERSION, (int)comm->p2p->rank,
                (int)comm->p2p->size, (unsigned long long)comm_uid(comm));
    json_string(&j, name);
    json_printf(&j, ",\n  \"parent_ranks\": ");
    if (comm->parent_ranks) {
        for (int32_t i = 0; i < comm->p2p->size; i++)
            json_printf(&j, "%s%d", i ? ", " : "[", (int)comm->parent_ranks[i]);
        json_printf(&j, "]");
    } else {
        json_printf(&j, "null");
    }
    json_printf(&j, ", \"host\": ");
    json_string(&j, host);
    json_printf(&j, ", \"pid\": %d, \"reason\": ", (int)getpid());
    json_string(&j, reason);
    json_printf(&j, ", \"dumped_unix_ns\": %lld, \"capacity\": %llu, \"dropped\": %llu,\n  \"calls\": [",
                (long long)realtime_ns(), (unsigned long long)(r ? r->capacity : 0),
                (unsigned long long)(r && calls > r->capacity ? calls - r->capacity : 0));
    write_calls(&j, comm);
    json_printf(&j, "}\n");
    if (j.short_of_memory) {
        free(j.data);
        return NULL;
    }
    *len = j.len;
    return j.data;
}

int64_t pycoll_comm_trace_json(pycoll_comm_t *comm, char *buf, int64_t len)
{
    size_t n = 0;
    char *text = dump_text(comm, "request", &n);
    if (!text)
        return -1;
    if (buf && len > 0)
        snprintf(buf, (size_t)len, "%s", text);
    free(text);
    return (int64_t)n;
}

static pycoll_status_t trace_path(const pycoll_comm_t *comm, const char *path, char *out, size_t len, char *error,
                                  size_t error_len)
{
    if (!path) {
        path = setting_text(SETTING_TRACE_DIR);
        if (!path) {
            snprintf(error, error_len, "dump_trace: no path given and PYCOLL_TRACE_DIR is not set");
            return PYCOLL_ERR_INVALID;
        }
        mkdir(path, 0777); /* one level, as the user named it; an error shows when the file is written */
    }
    struct stat st;
    int n = stat(path, &st) == 0 && S_ISDIR(st.st_mode)
                ? snprintf(out, len, "%s/pycoll-trace-%016llx-rank%d.json", path,
                           (unsigned long long)comm_uid(comm), (int)comm->p2p->rank)
                : snprintf(out, len, "%s", path);
    if (n < 0 || (size_t)n >= len) {
        snprintf(error, error_len, "dump_trace: the path is too long (%d bytes)", n);
        return PYCOLL_ERR_INVALID;
    }
    return PYCOLL_OK;
}

pycoll_status_t pycoll_comm_trace_path(const pycoll_comm_t *comm, const char *path, char *out, int32_t len)
{
    char error[64];
    return trace_path(comm, path, out, len > 0 ? (size_t)len : 0, error, sizeof error);
}

/* Write the dump of comm to the file `path` (already resolved). */
static pycoll_status_t write_dump(const pycoll_comm_t *comm, const char *path, const char *reason, char *error,
                                  size_t error_len)
{
    size_t n = 0;
    char *text = dump_text(comm, reason, &n);
    if (!text) {
        snprintf(error, error_len, "dump_trace: out of memory");
        return PYCOLL_ERR_NOMEM;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fwrite(text, 1, n, f) == n;
    ok = f && fclose(f) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    const int saved = errno;
    free(text);
    if (ok)
        return PYCOLL_OK;
    if (f)
        unlink(tmp);
    snprintf(error, error_len, "dump_trace: cannot write %s: %s", path, strerror(saved));
    return PYCOLL_ERR_SYSTEM;
}

pycoll_status_t pycoll_comm_dump_trace(pycoll_comm_t *comm, const char *path)
{
    pycoll_status_t st = comm_enter(comm);
    if (st != PYCOLL_OK)
        return st;
    char resolved[4096];
    st = trace_path(comm, path, resolved, sizeof resolved, comm->error, sizeof comm->error);
    return st != PYCOLL_OK ? st : write_dump(comm, resolved, "request", comm->error, sizeof comm->error);
}

void flight_dump_to_dir(pycoll_comm_t *comm, const char *reason)
{
    if (!setting_text(SETTING_TRACE_DIR))
        return;
    char resolved[4096], error[COMM_ERROR_LEN];
    if (trace_path(comm, NULL, resolved, sizeof resolved, error, sizeof error) != PYCOLL_OK ||
        write_dump(comm, resolved, reason, error, sizeof error) != PYCOLL_OK)
        fprintf(stderr, "pycoll: rank %d: the flight recorder's dump (%s): %s\n", (int)comm->p2p->rank, reason,
                error);
}

static void dump_one(pycoll_comm_t *comm, void *reason) { flight_dump_to_dir(comm, reason); }

void flight_dump_all(const char *reason)
{
    if (setting_text(SETTING_TRACE_DIR))
        comm_live_each(dump_one, (void *)reason);
}
