"""``python -m sparsecoll``: the command line (see :mod:`sparsecoll.tools.cli`)."""

import sys

from .tools.cli import main

sys.exit(main())
