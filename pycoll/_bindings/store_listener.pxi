# The rendezvous store's listener and its clients' handshake (native/bootstrap/store_listener.h) for
# pycoll.rendezvous (included by bootstrap.pxi): the C bootstrap's listener accepts and authenticates the store's
# clients and hands each admitted socket to the store's Python loop.

# The header is internal to libpycoll: found from the public include directory the bindings are compiled with.
cdef extern from "../bootstrap/store_listener.h" nogil:
    enum: PYCOLL_STORE_INSTANCE_BYTES
    ctypedef struct pycoll_store_listener_t:
        int stop
        int open_to_new
        void *ctx
        int (*admitted)(void *ctx, int fd, int32_t rank) noexcept nogil
        void (*dropped)(void *ctx, int32_t rank, int kind, const char *why) noexcept nogil
    void pycoll_store_listener_set(int *flag, int value)
    pycoll_status_t pycoll_store_listener_serve(pycoll_store_listener_t *l, int listen_fd, const uint8_t *secret,
                                                size_t secret_len, int has_secret, const uint8_t *instance,
                                                int32_t max_pending, double handshake_s, char *error,
                                                size_t error_len)
    pycoll_status_t pycoll_store_client_handshake(int fd, const uint8_t *secret, size_t secret_len, int has_secret,
                                                  int32_t rank, uint8_t *instance, double deadline, const char *what,
                                                  int *refused, char *error, size_t error_len)

_STORE_INSTANCE_BYTES = PYCOLL_STORE_INSTANCE_BYTES
# How a store client's handshake ended, by status (and, for a closed connection, by how it was refused).
_CLIENT_OUTCOMES = {PYCOLL_OK: "ok", PYCOLL_ERR_AUTH: "auth", PYCOLL_ERR_TIMEOUT: "timeout",
                    PYCOLL_ERR_PEER_FAILURE: "protocol"}
_REFUSALS = {1: "other_job", 2: "closed"}  # BOOT_REFUSED_OTHER_JOB, BOOT_REFUSED_CLOSED


cdef int _store_admitted(void *ctx, int fd, int32_t rank) noexcept with gil:
    return 1 if (<_StoreListener>ctx).on_admitted(fd, rank) else 0


cdef void _store_dropped(void *ctx, int32_t rank, int kind, const char *why) noexcept with gil:
    (<_StoreListener>ctx).on_dropped(rank, kind, why.decode(errors="replace"))


cdef bytes _secret_bytes(secret):
    if secret is not None and not isinstance(secret, bytes):
        raise TypeError(f"secret must be bytes or None, got {type(secret).__name__}")
    return secret if secret is not None else b""


cdef bytes _instance_bytes(instance):
    if not isinstance(instance, bytes) or len(instance) != PYCOLL_STORE_INSTANCE_BYTES:
        raise ValueError(f"instance must be {PYCOLL_STORE_INSTANCE_BYTES} bytes, got {instance!r}")
    return instance


cdef class _StoreListener:
    """serve() accepts and authenticates the store's clients on a listening socket until stop(): each admitted
    one goes to on_admitted(fd, rank) (which owns the descriptor when it returns True), each dropped connection
    to on_dropped(rank, kind, why), kind 0 (junk), 1 (no misbehaviour) or 2 (failed authentication). Both run on
    serve()'s thread."""
    cdef pycoll_store_listener_t listener
    cdef readonly object on_admitted, on_dropped

    def __init__(self, on_admitted, on_dropped):
        self.on_admitted, self.on_dropped = on_admitted, on_dropped
        self.listener.open_to_new = 1
        self.listener.ctx = <void *>self
        self.listener.admitted = _store_admitted
        self.listener.dropped = _store_dropped

    def serve(self, int listen_fd, secret, instance, int32_t max_pending, double handshake_s):
        cdef bytes key = _secret_bytes(secret)
        cdef bytes job = _instance_bytes(instance)
        cdef const uint8_t *c_key = key
        cdef const uint8_t *c_job = job
        cdef size_t key_len = len(key)
        cdef int has_secret = secret is not None
        cdef char error[1024]
        cdef pycoll_status_t st
        with nogil:
            st = pycoll_store_listener_serve(&self.listener, listen_fd, c_key, key_len, has_secret, c_job,
                                             max_pending, handshake_s, error, sizeof(error))
        if st != PYCOLL_OK:
            raise error_for_status(st, error.decode(errors="replace"))

    def close_to_new(self):
        """From now on clients presenting no instance (those of a next rendezvous) are turned away."""
        pycoll_store_listener_set(&self.listener.open_to_new, 0)

    def stop(self):
        pycoll_store_listener_set(&self.listener.stop, 1)


def _store_client_handshake(int fd, secret, int32_t rank, instance, double deadline, str what):
    """A store client's handshake on a connected non-blocking socket: (outcome, message, the store's instance),
    outcome one of ok, auth, timeout, closed, other_job, protocol, error."""
    cdef bytes key = _secret_bytes(secret)
    cdef bytearray job = bytearray(_instance_bytes(instance))
    cdef const uint8_t *c_key = key
    cdef uint8_t *c_job = job
    cdef size_t key_len = len(key)
    cdef int has_secret = secret is not None
    cdef bytes b_what = what.encode()
    cdef const char *c_what = b_what
    cdef char error[1024]
    cdef int refused = 0
    cdef pycoll_status_t st
    error[0] = 0
    with nogil:
        st = pycoll_store_client_handshake(fd, c_key, key_len, has_secret, rank, c_job, deadline, c_what, &refused,
                                           error, sizeof(error))
    outcome = _CLIENT_OUTCOMES.get(st, "error")
    if st == PYCOLL_ERR_PEER_FAILURE and refused in _REFUSALS:
        outcome = _REFUSALS[refused]
    return outcome, error.decode(errors="replace"), bytes(job)
