"""Where the installed C library and its headers are, for programs that build against pycoll's C ABI
(``pycoll config --cflags / --libs``, tests/communicator/test_c_embedding.py, examples/c_allreduce.c)."""

from __future__ import annotations

import os

LIBRARY_NAME = "libpycoll.so"


def _package_dir() -> str:
    # The compiled bindings sit next to libpycoll and include/ in the installed package, also in an editable
    # install, whose build tree is not the source tree.
    from pycoll._bindings import comm

    return os.path.dirname(os.path.dirname(os.path.abspath(comm.__file__)))


def get_include() -> str:
    """The directory to add to the include path: ``#include <pycoll/pycoll.h>`` then works."""
    return os.path.join(_package_dir(), "include")


def get_library() -> str:
    """The path of the shared library ``libpycoll.so`` that pycoll itself runs on."""
    return os.path.join(_package_dir(), LIBRARY_NAME)


def cflags() -> str:
    return f"-I{get_include()}"


def libs() -> str:
    """Link flags, with an rpath so that the program finds libpycoll where it is installed."""
    lib_dir = os.path.dirname(get_library())
    return f"-L{lib_dir} -Wl,-rpath,{lib_dir} -lpycoll"
