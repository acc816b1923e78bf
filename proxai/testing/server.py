"""Run a real proxai server (hypercorn on a loopback port) inside a test's nursery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from ..config import Config
from ..config_file import load_config
from ..outcome import Outcome
from ..service.server import serve

__all__ = ["RunningProxai", "open_proxai"]


@attrs.define
class RunningProxai:
    """A proxai server started by :func:`open_proxai`."""

    url: str  # e.g. http://127.0.0.1:40123
    config: Config
    outcomes: list[Outcome] = attrs.field(factory=list)
    #: The folder of each capture written, in the order they were (``[capture] enabled``).
    captures: list[Path] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event, repr=False)

    @property
    def base_url(self) -> str:
        """The URL an OpenAI SDK takes as ``base_url``."""
        return self.url + "/v1"

    def _record(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        self._wake()

    def _saved(self, outcome: Outcome, folder: Path) -> None:
        self.captures.append(folder)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for_outcomes(self, count: int) -> list[Outcome]:
        """Wait until ``count`` requests have finished (every task of each has ended)."""
        while len(self.outcomes) < count:
            await self._changed.wait()
        return self.outcomes[:count]

    async def wait_for_captures(self, count: int) -> list[Path]:
        """Wait until ``count`` captures are written (a request's outcome is reported
        before its capture is): then their files can be read."""
        while len(self.captures) < count:
            await self._changed.wait()
        return self.captures[:count]


@asynccontextmanager
async def open_proxai(
    upstream_url: str, /, *, api_key: str | None = "sk-upstream-test", **tables: Any
) -> AsyncIterator[RunningProxai]:
    """Start proxai on 127.0.0.1 with an OS-chosen port, in front of ``upstream_url``.

    Extra keyword arguments are config tables, e.g. ``timeouts={"first_byte": 0.5}``
    (``routes``: a list of them).
    """
    overrides: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, **tables.pop("server", {})},
        "upstream": {"base_url": upstream_url, "api_key": api_key, **tables.pop("upstream", {})},
        **tables,
    }
    config = load_config(None, overrides=overrides)
    async with trio.open_nursery() as nursery:
        running = RunningProxai("", config)
        binds = await nursery.start(
            partial(serve, config, on_outcome=running._record, on_capture_saved=running._saved)
        )
        running.url = binds[0]
        yield running
        nursery.cancel_scope.cancel()
