"""``python -m worker``: see :mod:`worker.cli`."""

import sys

from worker.cli import main

sys.exit(main())
