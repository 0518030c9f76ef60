"""``python -m sparsecoll``: the command line (see :mod:`sparsecoll.cli`)."""

import sys

from .cli import main

sys.exit(main())
