/* The reusable halves of the all-reduce algorithms, over any block layout (schedule.h), so that
 * reduce_scatter, all_gather and reduce share the all-reduce schedules instead of copying them.
 * Reduce-scatter phases: input holds this rank's values for every block; work is a writable buffer of
 * partials with the same layout (reduction.h; in FAST mode it may be input itself); afterwards the final
 * plain values of block p2p->rank are in out (which may alias that block of input in FAST mode).
 * All-gather phases: block p2p->rank of buf is this rank's; afterwards every block is filled. */
#ifndef PYCOLL_ALGORITHMS_PHASES_H
#define PYCOLL_ALGORITHMS_PHASES_H

#include "kernels/reduction.h"
#include "algorithms/collectives.h"
#include "algorithms/schedule.h"

/* What every all-reduce algorithm does first: check its arguments and set up the reduction. Returns false, with
 * *status set, when there is nothing more to do (an error, a single rank, or no data). */
bool all_reduce_setup(coll_ctx_t *ctx, const char *what, const void *buf, int64_t count, pycoll_dtype_t dtype,
                      pycoll_op_t op, pycoll_accuracy_t accuracy, reduction_t *red, pycoll_status_t *status);

pycoll_status_t ring_reduce_scatter_blocks(coll_ctx_t *ctx, const reduction_t *red, const void *input, void *work,
                                           block_layout_t layout, void *out);
/* Elements per ring segment: each block is cut into segments of this many elements from its start, and in
 * COMPENSATED mode each segment of the rank's own block is one unit of `work`'s partials when the
 * reduce-scatter returns (hierarchical.c carries them on from there). */
int64_t ring_segment_elements(int64_t segment_bytes, size_t elem_bytes);
pycoll_status_t ring_all_gather_blocks(coll_ctx_t *ctx, void *buf, size_t dsize, block_layout_t layout);

pycoll_status_t mesh_reduce_scatter_blocks(coll_ctx_t *ctx, const reduction_t *red, const void *input,
                                           block_layout_t layout, void *out);
pycoll_status_t mesh_all_gather_blocks(coll_ctx_t *ctx, void *buf, size_t dsize, block_layout_t layout);

/* An all-reduce made of a reduce-scatter phase and an all-gather phase (ring, mesh), over an even split. */
typedef struct two_phase_all_reduce {
    const char *what;  /* "ring all_reduce": names the collective in messages */
    /* Compensated partials go to the communicator's workspace (ring); else work is buf itself and the phase
     * keeps its own scratch (mesh). */
    bool partials_in_workspace;
    /* The reduce-scatter reads input and writes only work and out (ring), so input can be the caller's send
     * buffer; else (mesh) the input is copied into buf first and the schedule runs in place. */
    bool reads_input;
    pycoll_status_t (*reduce_scatter)(coll_ctx_t *ctx, const reduction_t *red, const void *input, void *work,
                                      block_layout_t layout, void *out);
    pycoll_status_t (*all_gather)(coll_ctx_t *ctx, void *buf, size_t dsize, block_layout_t layout);
} two_phase_all_reduce_t;

/* The all-reduce of input into buf (the same buffer, or one that shares no byte with it; else input is copied
 * into buf first): all_reduce_setup, then reduce-scatter into this rank's block of buf, then all-gather it. */
pycoll_status_t two_phase_all_reduce_run(coll_ctx_t *ctx, const two_phase_all_reduce_t *alg, const void *input,
                                         void *buf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                         pycoll_accuracy_t accuracy);

/* Rabenseifner's reduce-scatter for reduce_scatter: block b (size * count elements in all) ends on rank b. */
pycoll_status_t halving_doubling_reduce_scatter(coll_ctx_t *ctx, const reduction_t *red, const void *input, void *out,
                                                int64_t count);

#endif
