"""`pycoll config`: where the installed C ABI is, for C and C++ programs that build against it, and the
PYCOLL_* environment variables (--env)."""

import argparse
import os

from pycoll import paths

DESCRIPTION = """\
Prints what a C or C++ program needs to build against the installed pycoll:
  cc app.c $(pycoll config --cflags --libs)
  PKG_CONFIG_PATH="$(pycoll config --pkg-config-path)" pkg-config --cflags --libs pycoll
  cmake -Dpycoll_DIR="$(pycoll config --cmake-dir)" ...   (then find_package(pycoll CONFIG) and
                                                           target_link_libraries(app PRIVATE pycoll::pycoll))
Several options print their answers on one line, in the order of the options below.
  pycoll config --env             every PYCOLL_* variable: its value now, its default and what it does
  pycoll config --env markdown    the table of docs/getting_started.md"""


def _beside_library(folder):
    return lambda: os.path.join(os.path.dirname(paths.get_library()), folder)


WHAT = {"cflags": paths.cflags, "libs": paths.libs, "include": paths.get_include, "library": paths.get_library,
        "pkg_config_path": _beside_library("pkgconfig"), "cmake_dir": _beside_library("cmake")}


def register(subparsers):
    parser = subparsers.add_parser("config", help="compiler and linker flags for pycoll's C ABI",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cflags", action="store_true", help="the include flag (-I...)")
    parser.add_argument("--libs", action="store_true", help="the link flags (-L... -Wl,-rpath,... -lpycoll)")
    parser.add_argument("--include", action="store_true", help="the include directory")
    parser.add_argument("--library", action="store_true", help="the path of libpycoll.so")
    parser.add_argument("--pkg-config-path", action="store_true",
                        help="the directory of pycoll.pc, for PKG_CONFIG_PATH")
    parser.add_argument("--cmake-dir", action="store_true",
                        help="the directory of pycollConfig.cmake, for -Dpycoll_DIR (or CMAKE_PREFIX_PATH)")
    parser.add_argument("--env", nargs="?", const="text", choices=("text", "markdown"),
                        help="list pycoll's environment variables (markdown: as the table of docs/getting_started.md)")
    parser.set_defaults(func=run)


def _print_env(form):
    from pycoll import settings

    if form == "markdown":
        print(settings.markdown_table(), end="")
        return 0
    rows = [("variable", "value", "default", "meaning")] + settings.describe()
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
    for name, closest in settings.unknown():
        print(f"{name} is not a pycoll setting" + (f" (did you mean {closest}?)" if closest else ""))
    return 0


def run(args):
    if args.env:
        return _print_env(args.env)
    chosen = [name for name in WHAT if getattr(args, name)]
    if not chosen:
        print("pycoll config: say what to print: --cflags, --libs, --include, --library, --pkg-config-path, "
              "--cmake-dir or --env")
        return 2
    print(" ".join(WHAT[name]() for name in chosen))
    return 0
