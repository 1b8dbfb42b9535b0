/* The memory-kernel contract between the layers: a transport whose buffers live in other memory than the host's
 * (a device) points p2p->kernels at a table of this type, and the schedules and the reduction helpers
 * (reduction.h) reach that memory only through it. Below the transports and the algorithms, so that both see it
 * without either including the other. */
#ifndef PYCOLL_KERNELS_MEMORY_KERNELS_H
#define PYCOLL_KERNELS_MEMORY_KERNELS_H

#include "pycoll/kernels.h"
#include "pycoll/p2p.h"

/* Everything the schedules do to collective DATA, for the memory a transport's buffers live in, with
 * kernels.h's signatures: the elementwise kernels, the copies, and the data scratch (the communicator's
 * workspace, the algorithms' receive slots and partials). The schedules never touch data with memcpy or keep it
 * in malloc'ed memory themselves, so a device transport that points p2p->kernels at its device's table runs
 * them unchanged on device memory. Bookkeeping (request arrays, offsets) stays in host malloc: only the host
 * reads it. Host memory (p2p->kernels NULL): kernels.h's SIMD kernels, memmove, malloc and free, called
 * directly through this table (no wrapper: the host path pays one indirect call, as before). */
typedef struct pycoll_memory_kernels {
    const char *memory; /* "host", "cuda": named in errors */
    pycoll_status_t (*reduce_into)(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype,
                                   pycoll_op_t op);
    pycoll_status_t (*reduce)(void *out, const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                              pycoll_op_t op);
    pycoll_status_t (*scale_avg)(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor);
    pycoll_status_t (*compensated_load)(void *sum, void *comp, const void *src, int64_t count,
                                        pycoll_dtype_t dtype);
    pycoll_status_t (*compensated_combine)(void *dst_sum, void *dst_comp, const void *src_sum, const void *src_comp,
                                           int64_t count, pycoll_dtype_t dtype);
    pycoll_status_t (*compensated_store)(void *dst, const void *sum, const void *comp, int64_t count,
                                         pycoll_dtype_t dtype, int64_t divisor);
    /* nbytes > 0; the two ranges may overlap (all_gather moves a rank's own block inside the result). */
    pycoll_status_t (*copy)(void *dst, const void *src, int64_t nbytes);
    /* nbytes >= 0 (0 still returns a unique block); NULL when out of memory. free(NULL) does nothing. No
     * zero-fill entry: no schedule reads scratch it has not written (compensated_load writes the comp half). */
    void *(*alloc)(int64_t nbytes);
    void (*free)(void *p);
    /* Optional (NULL: the status says it all): the detail of this thread's last failure ("NVRTC could not
     * compile ...: <log>"), appended to the error a failed entry records. */
    const char *(*last_error)(void);
    /* Fields added later go here, after every earlier one (tables written before them leave them zero). */
    /* 1: the table's scratch lives one collective: the communicator frees its workspace at the end of every call
     * (comm_workspace_call_end), on the thread and stream the call ran on. A device table sets it, so that no
     * device memory is held between collectives beside the framework's allocator and a stream-ordered block is
     * freed on the stream it was allocated on; 0 (the host's): the workspace is kept until the communicator
     * closes (see comm_workspace). */
    int scratch_per_call;
    /* The table's version (PYCOLL_MEMORY_KERNELS_VERSION when written against this header): a field below is
     * read only from a table whose version has it. A table written before this field reads 0 (version 1: the
     * entries above only), and accuracy reproducible is refused on its memory. */
    int version;
    /* accuracy="reproducible"'s exact mode (native/kernels/reproducible.h), on this memory, with the host loops'
     * arithmetic so that the bits are the host's. Each optional: NULL refuses reproducible on this memory.
     * summary: the REPRO_SUMMARY_LEN int32 summary of x[0..n) written to `summary`, this table's memory (so that
     * the summary's all_reduce max runs over the transport as any of its data does). */
    pycoll_status_t (*repro_summary)(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t *summary);
    /* out[i * limbs + k] = limb k of x[i] / 2^base in limbs (1 or 2) limbs of `bits` bits: repro_encode_exact. */
    pycoll_status_t (*repro_encode)(const void *x, int64_t n, pycoll_dtype_t dtype, int32_t limbs, int32_t bits,
                                    int32_t base, int64_t *out);
    /* out[i] = the limb sums sums[i * limbs ..] rounded once to dtype: repro_decode_exact. */
    pycoll_status_t (*repro_decode)(const int64_t *sums, int64_t n, pycoll_dtype_t dtype, int32_t limbs,
                                    int32_t bits, int32_t base, void *out);
    /* dst (host memory) = src (this table's), nbytes > 0, complete when it returns: the host reads dst next (the
     * agreed summary, from which every rank draws its plan). */
    pycoll_status_t (*copy_to_host)(void *dst, const void *src, int64_t nbytes);
    /* Version 3 and later (an older table is read as 0 here).
     * 1: every entry but alloc and copy_to_host is queued on the stream the table was bound to, in order with
     * the transport's sends and receives on that stream, and free returns a block only once the work queued
     * before it is done: stream order alone then orders each step after the one before, and a device transport
     * issues a schedule's steps without a host wait between them (its caller waits once, at the end). 0 (the
     * host's, and a table written before this field): each entry has finished when it returns, so every step's
     * transfers must have finished on the host first. */
    int stream_ordered;
} pycoll_memory_kernels_t;

/* The table versions: 1 was the table without `version`; 2 added reproducible's entries, 3 stream_ordered. */
#define PYCOLL_MEMORY_KERNELS_REPRO_VERSION 2
#define PYCOLL_MEMORY_KERNELS_STREAM_VERSION 3
#define PYCOLL_MEMORY_KERNELS_VERSION 3

/* p2p->kernels, or the host table where the transport set none. */
const pycoll_memory_kernels_t *memory_kernels(const pycoll_p2p_t *p2p);

/* Whether table k (NULL: the host's) queues its entries on its stream (its stream_ordered, where its version
 * has the field). */
int memory_stream_ordered(const pycoll_memory_kernels_t *k);

/* The table's detail on its last failure, as "; <detail>", or "" (for error messages). */
const char *memory_error(const pycoll_memory_kernels_t *k);

/* dst = src, nbytes of data through the table (nothing for 0 bytes); a failure is recorded on p2p naming `what`
 * and the memory kind. */
pycoll_status_t memory_copy(pycoll_p2p_t *p2p, void *dst, const void *src, int64_t nbytes, const char *what);

#endif
