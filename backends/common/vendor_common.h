/* What the vendor backends share below the generic calls of pycoll/vendor.h: loading a library's entry points,
 * and the built-in vendors' structs (each filled in its own backends/<vendor>/ directory). */
#ifndef PYCOLL_BACKENDS_VENDOR_COMMON_H
#define PYCOLL_BACKENDS_VENDOR_COMMON_H

#include <stddef.h>

#include "pycoll/vendor.h"

/* dlopen `path` once (while *handle is NULL) and resolve every name in `names` into the matching slot of
 * `table`. `requirement`, if not NULL, is appended to the message when a name is missing. */
pycoll_status_t vendor_load(void **handle, const char *path, const char *const *names, size_t n,
                            void (**table)(void), const char *requirement, char *error, size_t error_len);

extern const pycoll_vendor_t pycoll_nccl_vendor;
extern const pycoll_vendor_t pycoll_hccl_vendor;

#endif
