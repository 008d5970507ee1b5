"""The demo night: ``make run`` (``python -m stagedoor.demo``) and the tests' night.

- :func:`load_night` loads the night's data into a migrated database (a
  psycopg connection or a URL) and returns a :class:`Night`;
- :class:`DemoNight` adds the stand-ins and runs the night to its end state
  (``run_to_end``: the relay and ``python -m worker --burst``): 40
  render_tickets dead letters with attempts 2 and
  ``SeatLabelInvalid: '<label>' is not a row letter and a seat number``
  (labels ``11-A`` .. ``20-D``, ``14-C`` among them), everything else done.
"""

from stagedoor.demo.night import PLANTED_ISSUES, Night, clear_night, load_night
from stagedoor.demo.session import DemoNight

__all__ = ["PLANTED_ISSUES", "DemoNight", "Night", "clear_night", "load_night"]
