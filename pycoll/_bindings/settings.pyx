# cython: language_level=3
"""libpycoll's table of environment variables (native/common/settings.h), read once at import: pycoll.settings
parses and documents every PYCOLL_* variable from it, so Python never declares one again."""

from libc.stdint cimport int32_t

from pycoll._bindings.libpycoll cimport *

_TYPES = {PYCOLL_SETTING_TEXT: "text", PYCOLL_SETTING_PATH: "path", PYCOLL_SETTING_INT: "int",
          PYCOLL_SETTING_FLOAT: "float", PYCOLL_SETTING_FLAG: "flag", PYCOLL_SETTING_CHOICE: "choice"}


cdef object _text(const char *value):
    return None if value == NULL else value.decode()


cdef tuple _table():
    cdef int32_t n = 0
    cdef const pycoll_setting_t *table = pycoll_settings(&n)
    return tuple({"name": table[i].name.decode(), "type": _TYPES[table[i].type],
                  "default": _text(table[i].default_value),
                  "choices": tuple(table[i].choices.decode().split("|")) if table[i].choices != NULL else (),
                  "min": table[i].min, "power_of_two": bool(table[i].power_of_two), "doc": table[i].doc.decode()}
                 for i in range(n))


# one dict per variable, in the documentation's order: name, type ("text", "path", "int", "float", "flag" or
# "choice"), default (text, or None), choices, min, power_of_two, doc
SETTINGS = _table()
