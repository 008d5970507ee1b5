"""Local stand-ins for the two third-party services: real HTTP servers on 127.0.0.1.

``make run`` and the tests use them in place of the mail provider and Payrail:
:func:`start_mail` and :func:`start_payrail` start one in a thread of the
calling process (stop it with ``.stop()`` or a ``with`` block);
``python -m stagedoor.standins mail|payrail --port P`` runs one alone.
"""

from stagedoor.standins.mail import MailStandIn, start_mail
from stagedoor.standins.payrail import PayrailStandIn, start_payrail

__all__ = ["MailStandIn", "PayrailStandIn", "start_mail", "start_payrail"]
