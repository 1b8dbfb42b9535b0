/* The algorithm table: every algorithm's id, name, schedules and weighing in one row (table.h). A new algorithm
 * is its schedule file, its id (ids.h) and one row here; a collective it serves is one more field of its row. */
#include "algorithms/table.h"

#include "kernels/reduction.h"

#include <pthread.h>

/* These all-reduce schedules work in place: the table's all-reduce copies the input to the output first,
 * through the transport's memory table (the buffers may be device memory). The ring and the hierarchical one
 * read the input where it lies (their _from entries, collectives.h). */
#define IN_PLACE_ALL_REDUCE(schedule)                                                                             \
    static pycoll_status_t schedule##_from(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,   \
                                           pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)     \
    {                                                                                                             \
        pycoll_status_t st = memory_copy(ctx->p2p, recvbuf, sendbuf,                                              \
                                         count * (int64_t)pycoll_dtype_size(dtype), "all_reduce");               \
        return st != PYCOLL_OK ? st : schedule(ctx, recvbuf, count, dtype, op, accuracy);                         \
    }
IN_PLACE_ALL_REDUCE(halving_doubling_all_reduce)
IN_PLACE_ALL_REDUCE(mesh_all_reduce)
IN_PLACE_ALL_REDUCE(recursive_doubling_all_reduce)

/* A transport's own collectives (p2p.h's native table), which the decision picks only where the transport has
 * the collective: the communicator has checked the arguments and stamped the descriptor, as they expect. */
static pycoll_status_t native_all_reduce(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                         pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    return ctx->p2p->ops->native->all_reduce(ctx->p2p, sendbuf, recvbuf, count, dtype, op, accuracy);
}

static pycoll_status_t native_broadcast(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                        int32_t root)
{
    return ctx->p2p->ops->native->broadcast(ctx->p2p, buf, count, dtype, root);
}

static pycoll_status_t native_barrier(coll_ctx_t *ctx) { return ctx->p2p->ops->native->barrier(ctx->p2p); }

static pycoll_status_t native_all_to_all(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                         pycoll_dtype_t dtype)
{
    return ctx->p2p->ops->native->all_to_all(ctx->p2p, sendbuf, recvbuf, count, dtype);
}

static pycoll_status_t native_reduce_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                             pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    return ctx->p2p->ops->native->reduce_scatter(ctx->p2p, sendbuf, recvbuf, count, dtype, op, accuracy);
}

static pycoll_status_t native_all_gather(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                         pycoll_dtype_t dtype)
{
    return ctx->p2p->ops->native->all_gather(ctx->p2p, sendbuf, recvbuf, count, dtype);
}

static pycoll_status_t native_reduce(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    return ctx->p2p->ops->native->reduce(ctx->p2p, sendbuf, recvbuf, count, dtype, op, root, accuracy);
}

/* Below this many bytes at the root the trees' log2 N latency wins over the ring's N-1 steps (reduce) and over
 * the root's N-1 overlapped transfers (gather, scatter). */
enum { TREE_MAX_BYTES = 64 * 1024 };

const coll_algorithm_t algorithm_table[] = {
    /* Bandwidth-optimal and defined for every world size: the fallback of every collective it serves. */
    {.id = PYCOLL_ALGO_RING, .name = "ring", .cost_terms = ring_cost_terms, .all_reduce = ring_all_reduce_from,
     .reduce_scatter = ring_reduce_scatter, .all_gather = ring_all_gather, .all_gather_v = ring_all_gather_v,
     .reduce_scatter_v = ring_reduce_scatter_v},
    {.id = PYCOLL_ALGO_HALVING_DOUBLING, .name = "halving_doubling", .cost_terms = halving_doubling_cost_terms,
     .all_reduce = halving_doubling_all_reduce_from, .reduce_scatter = halving_doubling_reduce_scatter_run},
    {.id = PYCOLL_ALGO_MESH, .name = "mesh", .cost_terms = mesh_cost_terms, .all_reduce = mesh_all_reduce_from,
     .reduce_scatter = mesh_reduce_scatter},
    /* Exchanges whole buffers: it has no reduce-scatter half. */
    {.id = PYCOLL_ALGO_RECURSIVE_DOUBLING, .name = "recursive_doubling",
     .cost_terms = recursive_doubling_cost_terms, .all_reduce = recursive_doubling_all_reduce_from},
    {.id = PYCOLL_ALGO_HIERARCHICAL, .name = "hierarchical", .traits = PYCOLL_ALGO_TRAIT_HOSTS,
     .cost_terms = hierarchical_cost_terms, .all_reduce = hierarchical_all_reduce_from},
    {.id = PYCOLL_ALGO_BINOMIAL_TREE, .name = "binomial_tree", .auto_max_bytes = TREE_MAX_BYTES,
     .broadcast = binomial_tree_broadcast, .reduce = binomial_tree_reduce, .gather = binomial_tree_gather,
     .scatter = binomial_tree_scatter},
    {.id = PYCOLL_ALGO_SCATTER_GATHER, .name = "scatter_gather", .reduce = scatter_gather_reduce},
    {.id = PYCOLL_ALGO_FLAT, .name = "flat", .gather = flat_gather, .scatter = flat_scatter},
    {.id = PYCOLL_ALGO_DISSEMINATION, .name = "dissemination", .barrier = dissemination_barrier},
    {.id = PYCOLL_ALGO_PAIRWISE, .name = "pairwise", .all_to_all = pairwise_all_to_all},
    /* Last: never a collective's fallback, since only some transports have it. */
    {.id = PYCOLL_ALGO_SHM_SLOTS, .name = "shm_slots", .traits = PYCOLL_ALGO_TRAIT_NATIVE, .cost_terms = shm_cost_terms,
     .all_reduce = native_all_reduce, .broadcast = native_broadcast, .barrier = native_barrier,
     .all_to_all = native_all_to_all, .reduce_scatter = native_reduce_scatter, .all_gather = native_all_gather,
     .reduce = native_reduce},
};
const int32_t algorithm_table_len = (int32_t)(sizeof algorithm_table / sizeof algorithm_table[0]);

const coll_algorithm_t *algorithm_entry(pycoll_algorithm_t id)
{
    for (int32_t i = 0; i < algorithm_table_len; i++)
        if (algorithm_table[i].id == id)
            return &algorithm_table[i];
    return NULL;
}

bool algorithm_serves(const coll_algorithm_t *a, pycoll_coll_t coll)
{
    if (!a)
        return false;
    switch (coll) {
#define SERVES(ID, value, field, name, kind)                                                                   \
    case PYCOLL_COLL_##ID:                                                                                     \
        return a->field != NULL;
        PYCOLL_COLLECTIVES(SERVES)
#undef SERVES
    default:
        return false;
    }
}

/* How a schedule of each kind is called from a call description (the kinds of ids.h). */
static inline pycoll_status_t run_reduction(reduction_schedule *run, coll_ctx_t *ctx, const pycoll_call_t *c,
                                            int64_t count)
{
    return run(ctx, c->sendbuf, c->recvbuf, count, c->dtype, c->op, c->accuracy);
}

static inline pycoll_status_t run_blocks(blocks_schedule *run, coll_ctx_t *ctx, const pycoll_call_t *c,
                                         int64_t count)
{
    return run(ctx, c->sendbuf, c->recvbuf, count, c->dtype);
}

static inline pycoll_status_t run_in_place_rooted(in_place_rooted_schedule *run, coll_ctx_t *ctx,
                                                  const pycoll_call_t *c, int64_t count)
{
    return run(ctx, c->recvbuf, count, c->dtype, c->root);
}

static inline pycoll_status_t run_rooted_reduction(rooted_reduction_schedule *run, coll_ctx_t *ctx,
                                                   const pycoll_call_t *c, int64_t count)
{
    return run(ctx, c->sendbuf, c->recvbuf, count, c->dtype, c->op, c->root, c->accuracy);
}

static inline pycoll_status_t run_no_data(no_data_schedule *run, coll_ctx_t *ctx, const pycoll_call_t *c,
                                          int64_t count)
{
    (void)c, (void)count;
    return run(ctx);
}

static inline pycoll_status_t run_message(message_schedule *run, coll_ctx_t *ctx, const pycoll_call_t *c,
                                          int64_t count)
{
    (void)run, (void)ctx, (void)c, (void)count;
    return PYCOLL_ERR_INVALID; /* never reached: no algorithm serves messages (algorithm_serves) */
}

static inline pycoll_status_t run_rooted(rooted_schedule *run, coll_ctx_t *ctx, const pycoll_call_t *c,
                                         int64_t count)
{
    return run(ctx, c->sendbuf, c->recvbuf, count, c->dtype, c->root);
}

static inline pycoll_status_t run_counts(counts_schedule *run, coll_ctx_t *ctx, const pycoll_call_t *c,
                                         int64_t count)
{
    (void)count;
    return run(ctx, c->sendbuf, c->recvbuf, c->counts, c->dtype);
}

static inline pycoll_status_t run_counts_reduction(counts_reduction_schedule *run, coll_ctx_t *ctx,
                                                   const pycoll_call_t *c, int64_t count)
{
    (void)count;
    return run(ctx, c->sendbuf, c->recvbuf, c->counts, c->dtype, c->op, c->accuracy);
}

/* One runner per collective: its kind's call of the algorithm's field for it. */
#define RUNNER(ID, value, field, name, kind)                                                                   \
    static pycoll_status_t run_##field(const coll_algorithm_t *a, coll_ctx_t *ctx, const pycoll_call_t *call,    \
                                       int64_t count)                                                           \
    {                                                                                                            \
        return run_##kind(a->field, ctx, call, count);                                                           \
    }
PYCOLL_COLLECTIVES(RUNNER)
#undef RUNNER

#define RUNNER_ENTRY(ID, value, field, name, kind) [PYCOLL_COLL_##ID] = run_##field,
const coll_runner_fn collective_runners[PYCOLL_NUM_COLLS] = {PYCOLL_COLLECTIVES(RUNNER_ENTRY)};
#undef RUNNER_ENTRY

/* The list's values are its enum's, dense from 0: every id below PYCOLL_NUM_COLLS has a name and a runner. */
#define ONE(ID, value, field, name, kind) +1
_Static_assert(0 PYCOLL_COLLECTIVES(ONE) == PYCOLL_NUM_COLLS, "PYCOLL_COLLECTIVES: ids must be 0, 1, 2, ...");
#undef ONE

const char *pycoll_algorithm_name(pycoll_algorithm_t algorithm)
{
    if (algorithm == PYCOLL_ALGO_AUTO)
        return "auto";
    const coll_algorithm_t *a = algorithm_entry(algorithm);
    return a ? a->name : "?";
}

uint32_t pycoll_algorithm_traits(pycoll_algorithm_t algorithm)
{
    const coll_algorithm_t *a = algorithm_entry(algorithm);
    return a ? a->traits : 0;
}

/* The per-collective lists of pycoll_coll_algorithms, derived from the table once. */
static pycoll_algorithm_info_t coll_lists[PYCOLL_NUM_COLLS][PYCOLL_NUM_ALGOS];
static int32_t coll_list_len[PYCOLL_NUM_COLLS];
static pthread_once_t coll_lists_once = PTHREAD_ONCE_INIT;

static void build_coll_lists(void)
{
    for (int c = 0; c < PYCOLL_NUM_COLLS; c++)
        for (int32_t i = 0; i < algorithm_table_len; i++)
            if (algorithm_serves(&algorithm_table[i], (pycoll_coll_t)c))
                coll_lists[c][coll_list_len[c]++] =
                    (pycoll_algorithm_info_t){(int32_t)algorithm_table[i].id, algorithm_table[i].name};
}

const pycoll_algorithm_info_t *pycoll_coll_algorithms(pycoll_coll_t coll, int32_t *count)
{
    const int known = (unsigned)coll < PYCOLL_NUM_COLLS;
    pthread_once(&coll_lists_once, build_coll_lists);
    if (count)
        *count = known ? coll_list_len[coll] : 0;
    return known && coll_list_len[coll] ? coll_lists[coll] : NULL;
}
