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

const char *pycoll_status_name(pycoll_status_t status)
{
    static const char *const names[] = {
        [PYCOLL_OK] = "ok", [PYCOLL_ERR_INVALID] = "invalid", [PYCOLL_ERR_UNSUPPORTED] = "unsupported",
        [PYCOLL_ERR_TIMEOUT] = "timeout", [PYCOLL_ERR_PEER_FAILURE] = "peer_failure",
        [PYCOLL_ERR_MISMATCH] = "mismatch", [PYCOLL_ERR_SYSTEM] = "system", [PYCOLL_ERR_CLOSED] = "closed",
        [PYCOLL_ERR_NOMEM] = "nomem", [PYCOLL_ERR_INTERRUPTED] = "interrupted", [PYCOLL_ERR_BUSY] = "busy",
        [PYCOLL_ERR_AUTH] = "auth", [PYCOLL_ERR_FORKED] = "forked", [PYCOLL_ERR_REVOKED] = "revoked",
    };
    return (unsigned)status < sizeof names / sizeof names[0] ? names[status] : "?";
}
