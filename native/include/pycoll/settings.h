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

/* A value parsed by its setting's type: a flag (0 or 1) or whole number in `integer`, a number in `number`. */
typedef struct {
    int64_t integer;
    double number;
} pycoll_setting_value_t;

/* Parses `text` as a value of `setting`: PYCOLL_OK and *value (may be NULL), or PYCOLL_ERR_INVALID with
 * "NAME='text': expected WHAT" in error[error_len] -- the text pycoll's Python SettingError carries too. */
PYCOLL_API pycoll_status_t pycoll_setting_parse(const pycoll_setting_t *setting, const char *text,
                                                pycoll_setting_value_t *value, char *error, size_t error_len);
/* What a value of `setting` must be, as the error says it ("one of scalar, avx2, avx512"), into out[len]. */
PYCOLL_API void pycoll_setting_expects(const pycoll_setting_t *setting, char *out, size_t len);
/* Checks every setting the environment gives a (non-empty) value: PYCOLL_OK, or PYCOLL_ERR_INVALID and the
 * first bad one's error. pycoll_comm_init_rank* run it first, so a bad value is refused, never ignored. */
PYCOLL_API pycoll_status_t pycoll_settings_check(char *error, size_t error_len);

#ifdef __cplusplus
}
#endif
#endif
