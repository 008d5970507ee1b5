"""``python -m stagedoor``: Stagedoor's own commands (see :mod:`stagedoor.cli`)."""

import sys

from stagedoor.cli import main

sys.exit(main())
