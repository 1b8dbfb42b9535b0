# The flight recorder of a NativeComm (native/comm/flight_recorder.h): its dump as text, and written to a file.


def trace_json(NativeComm native):
    """The flight recorder's dump of `native` (docs/api.md's format) as JSON text."""
    cdef pycoll_comm_t *c = native._open()
    cdef int64_t room = 0, n = pycoll_comm_trace_json(c, NULL, 0)
    cdef char *text = NULL
    try:
        while n >= room:  # calls that entered since the last look make it longer
            if n < 0:
                raise MemoryError("the flight recorder's dump")
            room = n + 4096
            free(text)
            text = <char *>malloc(room)
            if text == NULL:
                raise MemoryError("the flight recorder's dump")
            n = pycoll_comm_trace_json(c, text, room)
        return text[:n].decode(errors="replace")
    finally:
        free(text)


def dump_trace(NativeComm native, path):
    """Write the dump to `path` (a file or a directory; None: PYCOLL_TRACE_DIR) and return the file written."""
    cdef bytes encoded = None if path is None else str(path).encode()
    cdef const char *where = NULL
    if encoded is not None:
        where = encoded
    cdef char written[4096]
    cdef pycoll_status_t st
    cdef pycoll_comm_t *c = native._enter()
    with nogil:
        st = pycoll_comm_dump_trace(c, where)
    native._leave(st)
    pycoll_comm_trace_path(c, where, written, sizeof(written))  # the file itself now, where `path` named one
    return written.decode(errors="replace")
