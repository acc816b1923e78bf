"""Shared fixtures: a scripted upstream and a proxai server, both real, on loopback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
from hypothesis import settings

from proxai.testing import Script, ScriptedUpstream, open_proxai
from proxai.testing.server import RunningProxai
from proxai.testing.upstream import Responder

# `make test` is deterministic: property tests draw the same examples every run (explore
# with HYPOTHESIS_PROFILE=explore, which draws new ones).
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

StartUpstream = Callable[
    [Responder | Sequence[Script]], AbstractAsyncContextManager[ScriptedUpstream]
]


@pytest.fixture
def start_upstream(nursery: trio.Nursery) -> Callable[..., Any]:
    """``upstream = await start_upstream(scripts_or_responder)``: a running ScriptedUpstream."""

    async def start(responder: Responder | Sequence[Script]) -> ScriptedUpstream:
        upstream = ScriptedUpstream(responder)
        await nursery.start(upstream.serve)
        return upstream

    return start


@pytest.fixture
def proxai_for() -> Callable[..., AbstractAsyncContextManager[RunningProxai]]:
    """``async with proxai_for(upstream, timeouts={...}) as px``: proxai in front of it."""

    @asynccontextmanager
    async def run(target: ScriptedUpstream | str, /, **tables: Any) -> AsyncIterator[RunningProxai]:
        url = target if isinstance(target, str) else target.base_url
        async with open_proxai(url, **tables) as running:
            yield running

    return run
