/* The vendors built into libpycoll, each filled in its own backends/<vendor>/ directory and found by name
 * with pycoll_vendor_find (backends/common/vendor_comm.c). */
#ifndef PYCOLL_BACKENDS_VENDOR_COMMON_H
#define PYCOLL_BACKENDS_VENDOR_COMMON_H

#include "pycoll/vendor.h"

/* The address of a vendor struct entry as a symbol's slot. */
#define VENDOR_SLOT(entry) ((void (**)(void))&(entry))

extern pycoll_vendor_t pycoll_nccl_vendor;
extern pycoll_vendor_t pycoll_hccl_vendor;

#endif
