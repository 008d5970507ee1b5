"""A call repeated every few seconds on the kernel's event loop, for the panel's Auto-refresh.

The kernel runs widget callbacks on its asyncio loop; a timer on that same
loop (``call_later``) runs between them, never during one, so a reload can
never interleave with a replay the analyst just confirmed. Outside a running
loop (a plain script) there is nothing to repeat on: :meth:`Ticker.start`
says so with an :class:`~opslib.errors.OpslibError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from opslib.errors import OpslibError


class Ticker:
    """Calls ``tick`` every ``every_s`` seconds between :meth:`start` and :meth:`stop`."""

    def __init__(self, every_s: float, tick: Callable[[], None]) -> None:
        self.every_s, self.tick = every_s, tick
        self._handle: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self) -> None:
        if self._handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise OpslibError("auto-refresh needs a running kernel (Jupyter or Voilà); press Reload instead") from None
        self._handle = loop.call_later(self.every_s, self._fire)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self.every_s, self._fire)  # first: a tick that raises does not stop the clock
        self.tick()
