/* Printf-style error messages into a fixed buffer, shared by the p2p layer and the vendor backends. */
#ifndef PYCOLL_COMMON_ERROR_FORMAT_H
#define PYCOLL_COMMON_ERROR_FORMAT_H

#include <stdarg.h>
#include <stddef.h>

#include "pycoll/types.h"

/* Formats into error[len] and returns status, so a caller can `return pycoll_format_error(...)`. */
pycoll_status_t pycoll_format_error(char *error, size_t len, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
pycoll_status_t pycoll_vformat_error(char *error, size_t len, pycoll_status_t status, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
