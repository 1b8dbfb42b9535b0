"""``python -m pycoll ...``: the same as the ``pycoll`` command."""

import sys

from pycoll.cli import main

sys.exit(main())
