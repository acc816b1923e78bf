"""The metrics' model labels stay few: junk and huge model names, and the models routes name."""

from __future__ import annotations

from trio.testing import MockClock

from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from tests.helpers import metric


async def test_junk_and_huge_model_names_do_not_grow_the_metrics(
    autojump_clock: MockClock,
) -> None:
    routes = [{"model": "gpt-*", "upstreams": ["default"]}]
    async with MemoryProxy(lambda r: Script.json({"ok": True}), routes=routes) as proxy:
        for i in range(150):
            await proxy.request({"model": f"junk-{i}", "input": "hi"})  # 404: no route
        await proxy.request({"model": "gpt-" + "x" * 5000, "input": "hi"})
        await proxy.request({"model": "gpt-5", "input": "hi"})
        metrics = proxy.app._metrics
        assert metrics is not None
        text = metrics.exposition().decode()
    assert 'model="gpt-5"' in text
    assert "junk-" not in text and "xxxxx" not in text
    assert len(text) < 50_000


async def test_models_a_route_names_exactly_keep_their_label_after_a_flood_of_junk(
    autojump_clock: MockClock,
) -> None:
    routes = [
        {"model": "gpt-5.4", "upstreams": ["default"]},
        {"model": "claude-?", "upstreams": ["default"]},
        {"model": "*", "upstreams": ["default"]},
    ]
    async with MemoryProxy(lambda r: Script.json({"ok": True}), routes=routes) as proxy:
        for i in range(150):  # an accepting upstream serves every junk name
            await proxy.request({"model": f"junk-{i}", "input": "hi"})
        await proxy.request({"model": "gpt-5.4", "input": "hi"})
        await proxy.request({"model": "claude-9", "input": "hi"})
        metrics = proxy.app._metrics
        assert metrics is not None
        text = metrics.exposition().decode()
    assert metric(text, "proxai_requests_total", model="gpt-5.4") == 1
    assert metric(text, "proxai_requests_total", model="junk-99") == 1  # the 100th slot
    assert "junk-100" not in text
    # A glob names no model: its models share the capped slots, full by now.
    assert 'model="claude-9"' not in text
    assert metric(text, "proxai_requests_total", route="routes[1] model='claude-?'") == 1
    assert metric(text, "proxai_requests_total", route="routes[1] model='claude-?'", model="other")
    assert metric(text, "proxai_requests_total", route="routes[2] model='*'", model="other") == 50
