"""opslib's one exception class.

Every error opslib raises on purpose is an :class:`OpslibError` whose message
says what was wrong and what would be right: an unknown kind (with the kinds
that exist), a bad signature (with the signature of what was given), a
malformed entry id (with an example of a good one), a server that cannot be
reached (with the URL tried and how to point opslib elsewhere), a Redis user
without the rights a call needs. Notebooks and the CLI catch this one class.
"""

from worker.redact import redact


class OpslibError(Exception):
    """A call to opslib could not be carried out; the message says why and what to do instead.

    The message is redacted here, once: a server's error text that quotes a URL shows no password."""

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class UnknownKind(OpslibError):
    """No live worker declares the kind, and neither the queue nor the archive has seen it."""
