/* Copies into a shared-memory slot that other cores read next (the native collectives' copy-ins). A plain copy
 * leaves the slot's lines modified in this core's cache, and each reader then pulls every line from there.
 * How fast that pull is depends on where the two cores sit: on some machines -- a virtual machine whose host
 * moves its cores about, a host with several sockets -- it is several times slower than reading memory, and
 * can change from one second to the next (bench/core_to_core.py shows it). A streaming copy (non-temporal
 * stores) writes the lines to memory instead, so readers pay the same wherever the cores are, but the writer
 * and the readers then both wait on memory where the pull would have been fast.
 *
 * So a collective chooses per call, by its size: below STREAM_MIN_BYTES plain (too few lines for the pull to
 * matter); from there on, whichever of the two this rank has measured faster at this size (its whole
 * collective's time per byte, the median of the last few calls, so that one late peer does not decide),
 * trying each twice at first and the other now and then, so that a change of the machine is noticed.
 * PYCOLL_SHM_STREAMING=on or off fixes the choice instead. Ranks choose on their own: how a slot was written
 * never changes what is in it, only how fast it arrives. */
#ifndef PYCOLL_TRANSPORT_SHM_SLOT_COPY_H
#define PYCOLL_TRANSPORT_SHM_SLOT_COPY_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COPY_CLASSES 16 /* size classes by powers of two from STREAM_MIN_BYTES on */
#define SLOT_COPY_KEPT 3     /* measurements kept per class and choice: their median is the estimate */

typedef struct shm_slot_copy {
    int mode;                                   /* SLOT_COPY_AUTO, _PLAIN or _STREAMING (PYCOLL_SHM_STREAMING) */
    int streaming;                              /* this call's choice */
    int measuring;                              /* this call's size class + 1, 0: no measurement */
    int64_t started_ns, bytes;                  /* this call's start and size */
    int64_t calls[SLOT_COPY_CLASSES];           /* calls per class */
    /* [class][plain, streaming]: the last SLOT_COPY_KEPT measurements (ns per byte), the newest at
     * kept[..] - 1 modulo SLOT_COPY_KEPT */
    double ns_per_byte[SLOT_COPY_CLASSES][2][SLOT_COPY_KEPT];
    int64_t kept[SLOT_COPY_CLASSES][2];
} shm_slot_copy_t;

enum { SLOT_COPY_AUTO, SLOT_COPY_PLAIN, SLOT_COPY_STREAMING };

/* A fresh state, in the mode PYCOLL_SHM_STREAMING says (auto where streaming stores exist, else plain). */
void slot_copy_init(shm_slot_copy_t *s);
/* Before a collective moving `bytes` per rank through the slots: choose how its copy-ins go. */
void slot_copy_begin(shm_slot_copy_t *s, int64_t bytes);
/* After it, when it succeeded: record how long it took. */
void slot_copy_end(shm_slot_copy_t *s);
/* Copy n bytes into a slot as this call chose. Ends with a store fence where streaming, so that a release store
 * after it (the round's flag) publishes them. */
void slot_copy(const shm_slot_copy_t *s, void *dst, const void *src, size_t n);

#endif
