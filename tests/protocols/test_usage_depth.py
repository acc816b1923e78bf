"""A usage object nested a thousand deep is cut and noted, never fatal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from proxai.testing import Script
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from tests.helpers import metric


async def test_a_usage_object_nested_a_thousand_deep_is_cut_and_noted_not_fatal(
    start_upstream: Any, proxai_for: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """orjson parses up to 1,024 levels; walking that many recursively blew the stack,
    and the request then had no log line, no metrics and no capture."""
    last = TURN1_EVENTS[-1]
    usage = {"output_tokens": 5, "nested": "HERE"}
    events = [*TURN1_EVENTS[:-1], {**last, "response": {**last["response"], "usage": usage}}]
    deep = b'{"x":' * 1000 + b'{"input_tokens":7}' + b"}" * 1000
    stream = turn_bytes(events).replace(b'"HERE"', deep)
    upstream = await start_upstream([Script.sse([stream])])
    caplog.set_level("INFO", logger="proxai.request")
    captures = tmp_path / "captures"
    async with (
        proxai_for(upstream, capture={"enabled": True, "dir": str(captures)}) as px,
        httpx.AsyncClient() as client,
    ):
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        with trio.fail_after(5):
            (outcome,) = await px.wait_for_outcomes(1)
            (folder,) = await px.wait_for_captures(1)  # written by a thread after the outcome
        text = (await client.get(px.url + "/metrics")).text
        kept = json.loads((folder / "outcome.json").read_text())["usage"]
        assert list(captures.glob("*/outcome.json")) == [folder / "outcome.json"]
    assert response.content == stream  # relayed untouched
    assert outcome.kind == "completed"
    assert any("usage nested deeper than" in a for a in outcome.anomalies)
    (record,) = [r for r in caplog.records if r.name == "proxai.request"]
    assert "usage=output_tokens=5 " in record.getMessage()
    assert metric(text, "proxai_usage_tokens_total", kind="output_tokens") == 5
    assert metric(text, "proxai_requests_total", outcome="completed") == 1
    assert kept["output_tokens"] == 5 and "x" in kept["nested"]
