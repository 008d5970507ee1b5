"""The worker's exceptions: one base class, each subclass says what went wrong."""


class WorkerError(Exception):
    """Base class of every error the worker package raises on purpose."""


class SettingsError(WorkerError):
    """A setting from the environment or the command line is invalid."""


class UnknownKind(WorkerError):
    """A job names a kind that no imported module registered."""


class KindAlreadyRegistered(WorkerError):
    """Two handlers were declared for the same kind name."""


class JobTimeout(WorkerError):
    """A handler ran longer than its kind's ``timeout_s``."""


class JobCancelled(WorkerError):
    """An operator cancelled the job while it ran (``opslib.cancel``): it is recorded, never retried."""


class JobKilled(WorkerError):
    """A handler's child process (``isolation="process"``) died or was killed before it finished."""


class QueueRefused(WorkerError):
    """Redis refused the write for now (out of memory, read-only, misconfigured persistence, ...); ``code`` is
    Redis's (``OOM``, ``MISCONF``, ``READONLY``, ``NOPERM``...). Nothing was written: try again later."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
