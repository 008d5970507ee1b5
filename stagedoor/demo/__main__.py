"""``python -m stagedoor.demo``: what ``make run`` runs (see :mod:`stagedoor.demo.show`)."""

import sys

from stagedoor.demo.show import main

sys.exit(main())
