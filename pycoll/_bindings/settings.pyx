# cython: language_level=3
"""libpycoll's table of environment variables (native/common/settings.h), read once at import, and its parser:
pycoll.settings documents every PYCOLL_* variable from the table and parses every value through C, so Python
never declares one again nor checks it by other rules than a C embedder gets."""

from libc.stdint cimport int32_t

from pycoll._bindings.libpycoll cimport *

from pycoll.errors import SettingError as _SettingError

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


cdef dict _INDEX = {row["name"]: i for i, row in enumerate(SETTINGS)}


def expects(str name):
    """What a value of the setting `name` must be, in the words of its errors."""
    cdef char out[256]
    pycoll_setting_expects(&pycoll_settings(NULL)[_INDEX[name]], out, sizeof(out))
    return out.decode()


def parse(str name, str text):
    """The typed value of `text` for the setting `name` (str, int, float or bool by its type), parsed by
    libpycoll; SettingError, with the C library's message, if the setting cannot take it."""
    cdef const pycoll_setting_t *setting = &pycoll_settings(NULL)[_INDEX[name]]
    cdef pycoll_setting_value_t value
    cdef char error[512]
    encoded = text.encode()
    if b"\0" in encoded or pycoll_setting_parse(setting, encoded, &value, error, sizeof(error)) != PYCOLL_OK:
        failure = _SettingError(name, text, expects(name))
        if b"\0" not in encoded:
            failure.args = (error.decode(errors="replace"),)  # the C library's words, as an embedder reads them
        raise failure
    if setting.type == PYCOLL_SETTING_INT:
        return value.integer
    if setting.type == PYCOLL_SETTING_FLOAT:
        return value.number
    if setting.type == PYCOLL_SETTING_FLAG:
        return bool(value.integer)
    return text
