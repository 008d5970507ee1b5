"""pytest plugin for the nbval run of ``make test``: each notebook runs against a fresh demo night.

Loaded with ``-p tests.notebooks.nbval_stack``. Before the first cell of a
notebook (so before nbval starts its kernel, which inherits this process's
environment), the previous notebook's night is torn down and a new
:class:`~tests.notebooks.helpers.NightStack` is seeded (for the story notebook, a second night after a
first one, as a second ``make run`` does); its ``REDIS_URL``,
``DATABASE_URL`` and ``QUEUE_PREFIX`` go into the environment, where opslib
finds them as an analyst's notebook would.
"""

from __future__ import annotations

import os

import pytest

from tests.notebooks.helpers import NightStack, Servers, nights_for


class NotebookStacks:
    """Servers for the session, a night per notebook."""

    def __init__(self) -> None:
        self.servers: Servers | None = None
        self.night: NightStack | None = None
        self.notebook: object = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.parent is self.notebook:
            return
        self.notebook = item.parent
        if self.night is not None:
            self.night.stop()
            self.night = None
        if self.servers is None:
            self.servers = Servers()
        nights = nights_for(item.path)
        self.night = NightStack(
            self.servers.redis_url, self.servers.database_url, self.servers.folder / "worker.log", nights=nights
        )
        os.environ.update(self.night.env())

    def pytest_sessionfinish(self) -> None:
        if self.night is not None:
            self.night.stop()
        if self.servers is not None:
            self.servers.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(NotebookStacks(), "notebook-stacks")
