#include <stdio.h>

#include "common/error_format.h"

pycoll_status_t pycoll_vformat_error(char *error, size_t len, pycoll_status_t status, const char *fmt, va_list ap)
{
    vsnprintf(error, len, fmt, ap);
    return status;
}

pycoll_status_t pycoll_format_error(char *error, size_t len, pycoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pycoll_vformat_error(error, len, status, fmt, ap);
    va_end(ap);
    return status;
}
