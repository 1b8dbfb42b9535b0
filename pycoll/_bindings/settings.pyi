"""Type stubs for pycoll._bindings.settings: libpycoll's table of environment variables
(native/common/settings.h), bound from C once."""

SETTINGS: tuple[dict[str, object], ...]

def expects(name: str) -> str: ...
def parse(name: str, text: str) -> object: ...
