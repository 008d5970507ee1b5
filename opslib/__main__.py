"""``python -m opslib``: see :mod:`opslib.cli`."""

import sys

from opslib.cli import main

sys.exit(main())
