/* pycoll's environment variables (PYCOLL_*), each declared once with its type, default and meaning
 * (native/common/settings.c): the Python layer, `pycoll config --env` and the table of docs/getting_started.md
 * all read this one list, so a variable is never parsed or described twice. */
#ifndef PYCOLL_SETTINGS_H
#define PYCOLL_SETTINGS_H
#include <stdint.h>

#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PYCOLL_SETTING_TEXT = 0,   /* any text */
    PYCOLL_SETTING_PATH = 1,   /* a file or directory */
    PYCOLL_SETTING_INT = 2,    /* a whole number, at least `min` (and a power of two where power_of_two) */
    PYCOLL_SETTING_FLOAT = 3,  /* a number, at least `min` */
    PYCOLL_SETTING_FLAG = 4,   /* "1" (on) or "0" (off) */
    PYCOLL_SETTING_CHOICE = 5, /* one of `choices`, separated by '|' */
} pycoll_setting_type_t;

typedef struct {
    const char *name;          /* "PYCOLL_SOCKET_IFNAME" */
    pycoll_setting_type_t type;
    const char *default_value; /* what an unset (or empty) variable means, as text; NULL: the doc says */
    const char *choices;       /* PYCOLL_SETTING_CHOICE: "scalar|avx2|avx512"; else NULL */
    double min;                /* PYCOLL_SETTING_INT and _FLOAT: the least value (-INFINITY: any) */
    int32_t power_of_two;      /* PYCOLL_SETTING_INT: 1 if the value must be a power of two */
    const char *doc;           /* one line: what it does, and the default where default_value is NULL */
} pycoll_setting_t;

/* Every setting, in the order the documentation lists them; *count receives how many. Never NULL. */
PYCOLL_API const pycoll_setting_t *pycoll_settings(int32_t *count);

#ifdef __cplusplus
}
#endif
#endif
