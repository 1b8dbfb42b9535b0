"""Type stubs for pycoll._bindings.jax_ffi: the XLA FFI handlers of native/jax/ffi_handlers.c as PyCapsules
(pycoll.jax registers them with jax.ffi.register_ffi_target)."""

from typing import Any

COLLECTIVES: tuple[str, ...]

def handler(name: str) -> Any: ...
def ffi_version() -> tuple[int, int]: ...
