"""Build the fake NCCL and HCCL (tests/fakes: their "device" memory is host memory) into a directory and print
the shell exports that point pycoll at them, so a mixed job runs on a machine without GPUs or NPUs:

    eval "$(python tests/fakes/build.py /tmp/pycoll-fakes)"
"""

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fakes.vendor_harness import LIBRARY_VARIABLES, build_fake  # noqa: E402


def exports(out_dir: Path) -> dict:
    """Build both fakes into out_dir; the variables to set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {"FAKE_COLL_DIR": str(out_dir)}
    for vendor, variables in LIBRARY_VARIABLES.items():
        lib = build_fake(vendor, out_dir)
        if lib is None:
            raise SystemExit("no C compiler (cc or gcc) to build the fakes")
        env.update(dict.fromkeys(variables, lib))
    return env


if __name__ == "__main__":
    for name, value in exports(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pycoll-fakes")).items():
        print(f"export {name}={shlex.quote(value)}")
