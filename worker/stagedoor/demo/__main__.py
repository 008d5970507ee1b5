"""``python -m worker.stagedoor.demo``: what ``make run`` runs (see :mod:`worker.stagedoor.demo.show`)."""

import sys

from worker.stagedoor.demo.show import main

sys.exit(main())
