/* What the NCCL and HCCL bindings share: loading a library's entry points, a communicator's identity,
 * deadline and first error, and the checks every collective makes before it calls the vendor. */
#ifndef PYCOLL_BACKENDS_VENDOR_COMMON_H
#define PYCOLL_BACKENDS_VENDOR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "pycoll/p2p.h" /* PYCOLL_ERROR_LEN */

typedef struct {
    const char *vendor; /* "nccl" or "hccl": every message starts with it */
    int32_t rank;
    int32_t size;
    int64_t timeout_ns;
    pycoll_status_t status; /* first error; the communicator is broken after one */
    char error[PYCOLL_ERROR_LEN];
} vendor_comm_state_t;

/* dlopen `path` once (while *handle is NULL) and resolve every name in `names` into the matching slot of
 * `table`. `requirement`, if not NULL, is appended to the message when a name is missing. */
pycoll_status_t vendor_load(void **handle, const char *path, const char *const *names, size_t n,
                            void (**table)(void), const char *requirement, char *error, size_t error_len);

void vendor_comm_state_init(vendor_comm_state_t *s, const char *vendor, int32_t rank, int32_t size,
                            double timeout_s);
void vendor_set_timeout(vendor_comm_state_t *s, double timeout_s);
/* Now plus the communicator's timeout. */
int64_t vendor_deadline(const vendor_comm_state_t *s);

/* Breaks the communicator with this error, unless it already broke (the first error is the cause). */
pycoll_status_t vendor_fail(vendor_comm_state_t *s, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A bad argument, refused before the vendor sees it: recorded, but the communicator stays usable. */
pycoll_status_t vendor_reject(vendor_comm_state_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Breaks the communicator with a timeout naming `what`; `action` says what was done to it ("aborted"). */
pycoll_status_t vendor_deadline_passed(vendor_comm_state_t *s, const char *what, const char *action);
/* The checks before every collective: not broken, count >= 0, a known dtype, root -1 (none) or a rank. */
pycoll_status_t vendor_check_args(vendor_comm_state_t *s, int64_t count, pycoll_dtype_t dtype, int32_t root);

#endif
