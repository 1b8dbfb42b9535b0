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
