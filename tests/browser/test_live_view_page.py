"""The live view page in a real headless browser (Debian's chromium).

Run by ``make test-browser``, which installs chromium; ``make test`` leaves this
folder out (see pyproject.toml). The page is loaded from a real proxai with a
stream stalled mid-arguments; chromium runs its script, the test reads the
rendered DOM and keeps a screenshot in tests/artifacts/live-view.png.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from proxai.testing.seed import TURN1_REQUEST, turn1_stalled_script

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
KEY = "sk-live-view-key"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is not installed: run `make test-browser`, which installs it"
    return found


async def headless(url: str, *args: str) -> bytes:
    """Load ``url`` in headless chromium with ``args``; what it prints."""
    result = await trio.run_process(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,420",
            "--virtual-time-budget=3000",
            *args,
            url,
        ],
        capture_stdout=True,
        capture_stderr=True,
    )
    return bytes(result.stdout)


async def test_the_page_shows_the_open_stream_and_its_deadline(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([turn1_stalled_script()])
    tables = {
        "live_view": {"enabled": True},
        "auth": {"keys": [KEY]},
        "timeouts": {"tool_arguments": 90},
    }
    async with (
        proxai_for(upstream, **tables) as px,
        httpx.AsyncClient(timeout=60) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(
            partial(
                client.post,
                px.base_url + "/responses",
                json=TURN1_REQUEST,
                headers={"authorization": f"Bearer {KEY}"},
            )
        )
        await upstream.wait_for_requests(1)
        page = f"{px.url}/_proxai/#key={KEY}"
        dom = (await headless(page, "--dump-dom")).decode()
        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "live-view.png"
        screenshot.unlink(missing_ok=True)
        await headless(page, f"--screenshot={screenshot}")
        without_key = (await headless(f"{px.url}/_proxai/", "--dump-dom")).decode()
        nursery.cancel_scope.cancel()
    assert "1 open stream(s), updated" in dom
    assert "gpt-5.4" in dom and "default" in dom and "streaming" in dom
    assert "function_call get_weather (call_weather_01): arguments, 12 chars" in dom
    assert "s left)" in dom
    assert screenshot.stat().st_size > 10_000  # a rendered page, kept as the test's artifact
    assert "proxai answered 401" in without_key
