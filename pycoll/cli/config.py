"""``pycoll config --cflags | --libs | --include | --library``: the flags to build a C or C++ program against
the installed pycoll, e.g. ``cc app.c $(pycoll config --cflags --libs)``."""

from pycoll import paths

WHAT = {"cflags": paths.cflags, "libs": paths.libs, "include": paths.get_include, "library": paths.get_library}


def register(subparsers):
    parser = subparsers.add_parser("config", help="compiler and linker flags for pycoll's C ABI",
                                   description=__doc__)
    parser.add_argument("--cflags", action="store_true", help="the include flag (-I...)")
    parser.add_argument("--libs", action="store_true", help="the link flags (-L... -Wl,-rpath,... -lpycoll)")
    parser.add_argument("--include", action="store_true", help="the include directory")
    parser.add_argument("--library", action="store_true", help="the path of libpycoll.so")
    parser.set_defaults(func=run)


def run(args):
    chosen = [name for name in WHAT if getattr(args, name)]
    if not chosen:
        print("pycoll config: say what to print: --cflags, --libs, --include or --library")
        return 2
    print(" ".join(WHAT[name]() for name in chosen))
    return 0
