"""``python -m worker``: see :mod:`worker.cli.main`."""

import sys

from worker.cli.main import main

sys.exit(main())
