"""Stagedoor's handler errors: one base class, each subclass says what went wrong.

The dead-letter entry's ``error`` field is ``Type: message``, so the class name
and the message are what the person reading ``jobs:dead`` in the morning sees.
"""


class StagedoorError(Exception):
    """Base class of the errors Stagedoor's handlers raise on purpose."""


class NotConfigured(StagedoorError):
    """A handler needs a setting (MAIL_API_URL, PAYRAIL_URL) or the lifespan that was not given."""


class OrderNotFound(StagedoorError):
    """A job names an order that is not in the database."""


class SeatLabelInvalid(StagedoorError):
    """A seat label is not a seat number and a row letter (``14C``); the barcode cannot encode it."""


class RenderStopped(StagedoorError):
    """A ticket render was told to stop (its timeout, a cancel, the worker's shutdown) between two pages."""


class MailUnavailable(StagedoorError):
    """The mail API answered 5xx or 429, or did not answer in time: it passes, the policy retries."""


class MailRejected(StagedoorError):
    """The mail API refused the message (a 4xx other than 429)."""


class PayrailError(StagedoorError):
    """Payrail's API did not give a day's payments."""
