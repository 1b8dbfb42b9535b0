#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>

#include "common/error_format.h"
#include "vendor_common.h"

/* One lock for every vendor library: loads are rare, and two threads must not both dlopen the same one. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

pycoll_status_t vendor_load(void **handle, const char *path, const char *const *names, size_t n,
                            void (**table)(void), const char *requirement, char *error, size_t error_len)
{
    pycoll_status_t st = PYCOLL_OK;
    pthread_mutex_lock(&load_lock);
    if (!*handle) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s", dlerror());
        for (size_t i = 0; h && i < n; i++) {
            *(void **)&table[i] = dlsym(h, names[i]);
            if (!table[i]) {
                st = pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s lacks %s%s%s", path,
                                         names[i], requirement ? ": " : "", requirement ? requirement : "");
                dlclose(h);
                h = NULL;
            }
        }
        *handle = h;
    }
    pthread_mutex_unlock(&load_lock);
    return st;
}

static int64_t seconds_to_ns(double s)
{
    return s > 9e9 ? INT64_MAX / 2 : (int64_t)(s * 1e9);
}

void vendor_comm_state_init(vendor_comm_state_t *s, const char *vendor, int32_t rank, int32_t size,
                            double timeout_s)
{
    s->vendor = vendor;
    s->rank = rank;
    s->size = size;
    s->timeout_ns = seconds_to_ns(timeout_s);
    s->status = PYCOLL_OK;
    s->error[0] = '\0';
}

void vendor_set_timeout(vendor_comm_state_t *s, double timeout_s)
{
    s->timeout_ns = seconds_to_ns(timeout_s);
}

int64_t vendor_deadline(const vendor_comm_state_t *s)
{
    return pycoll_now_ns() + s->timeout_ns;
}

pycoll_status_t vendor_fail(vendor_comm_state_t *s, pycoll_status_t status, const char *fmt, ...)
{
    if (s->status != PYCOLL_OK)
        return s->status;
    va_list ap;
    va_start(ap, fmt);
    s->status = pycoll_vformat_error(s->error, sizeof s->error, status, fmt, ap);
    va_end(ap);
    return status;
}

pycoll_status_t vendor_reject(vendor_comm_state_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pycoll_vformat_error(s->error, sizeof s->error, PYCOLL_ERR_INVALID, fmt, ap);
    va_end(ap);
    return PYCOLL_ERR_INVALID;
}

pycoll_status_t vendor_deadline_passed(vendor_comm_state_t *s, const char *what, const char *action)
{
    return vendor_fail(s, PYCOLL_ERR_TIMEOUT,
                       "%s: %s did not complete within %.3f s on rank %d of %d (a peer may be dead or behind); "
                       "the communicator was %s",
                       s->vendor, what, (double)s->timeout_ns / 1e9, (int)s->rank, (int)s->size, action);
}

pycoll_status_t vendor_check_args(vendor_comm_state_t *s, int64_t count, pycoll_dtype_t dtype, int32_t root)
{
    if (s->status != PYCOLL_OK)
        return PYCOLL_ERR_CLOSED; /* s->error still says why it broke */
    if (count < 0)
        return vendor_reject(s, "%s: count must be >= 0, got %lld", s->vendor, (long long)count);
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES)
        return vendor_reject(s, "%s: unknown dtype id %d", s->vendor, (int)dtype);
    if (root != -1 && (root < 0 || root >= s->size))
        return vendor_reject(s, "%s: root %d is not a rank of a %d-rank communicator", s->vendor, (int)root,
                             (int)s->size);
    return PYCOLL_OK;
}
