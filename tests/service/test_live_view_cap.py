"""The live view's event streams are capped (issue 20 item 17).

``/_proxai/events`` streams live as long as their viewer, outside
``max_concurrent_streams``: 50 were open beside a limit of 2. Past
``live_view.max_viewers`` (4 by default) another one is a 503.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
import trio

from proxai.config import ConfigError
from proxai.config_file import load_config
from proxai.testing import Script


async def _open_events(stack: AsyncExitStack, client: httpx.AsyncClient, url: str) -> int:
    """Open an event stream on ``stack`` and read its first snapshot; its status."""
    response = await stack.enter_async_context(client.stream("GET", url + "/_proxai/events"))
    if response.status_code == 200:
        # Kept referenced: an abandoned iterator would be finalized, closing the stream.
        chunks = response.aiter_bytes()
        stack.push_async_callback(chunks.aclose)
        assert (await anext(chunks)).startswith(b"data: ")  # the first snapshot: it is live
    else:
        await response.aread()
    return response.status_code


@pytest.mark.parametrize(("tables", "cap"), [({}, 4), ({"max_viewers": 2}, 2)])
async def test_event_streams_past_the_cap_are_503_and_a_closed_one_frees_its_place(
    start_upstream: Any, proxai_for: Any, tables: dict[str, Any], cap: int
) -> None:
    upstream = await start_upstream([Script.sse([b"data: {}\n\n"])])
    live_view = {"enabled": True, **tables}
    server = {"max_concurrent_streams": 2}
    limits = httpx.Limits(max_connections=20)
    async with (
        proxai_for(upstream, live_view=live_view, server=server) as px,
        httpx.AsyncClient(timeout=10, limits=limits) as client,
    ):
        async with AsyncExitStack() as first:
            statuses = [await _open_events(first, client, px.url) for _ in range(cap)]
            assert statuses == [200] * cap
            async with AsyncExitStack() as more:
                refused = await more.enter_async_context(
                    client.stream("GET", px.url + "/_proxai/events")
                )
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "1"
                error = (await refused.aread()).decode()
                assert "live_view.max_viewers" in error and "live_view_overloaded" in error
            # The page and the JSON snapshot are short answers: not counted.
            assert (await client.get(px.url + "/_proxai/streams")).status_code == 200
            assert (await client.get(px.url + "/_proxai/")).status_code == 200
        # The viewers left: their places are free again, once proxai has seen them go.
        async with AsyncExitStack() as again:
            with trio.fail_after(10):
                opened = 0
                while opened < cap:
                    async with AsyncExitStack() as attempt:
                        if await _open_events(attempt, client, px.url) == 200:
                            again.push_async_exit(attempt.pop_all())
                            opened += 1
                            continue
                    await trio.sleep(0.05)


def test_max_viewers_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigError, match=r"live_view\.max_viewers: must be a positive integer"):
        load_config(
            None,
            overrides={"upstream": {"base_url": "http://u/v1"}, "live_view": {"max_viewers": 0}},
        )
