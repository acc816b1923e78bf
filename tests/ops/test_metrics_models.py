"""Which models get a label in the metrics, with or without exact routes (issue 20 item 18c).

The models ``[[routes]]`` name exactly keep their label whatever clients send; with no
exact route, the first 100 names an upstream served took the slots, so behind an
upstream that accepts any name a client could crowd out every real model.
``metrics.models`` names the models to watch without routing them, and
``metrics.max_models`` bounds (or, at 0, turns off) the slots clients can take.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxai.config import ConfigError, MetricsConfig
from proxai.config_file import load_config
from proxai.ops.metrics import Metrics
from proxai.outcome import Outcome
from proxai.testing import Script
from tests.helpers import metric


def _served(model: str) -> Outcome:
    return Outcome("POST", "/v1/responses", model=model, status=200, upstream="default")


def test_models_the_config_names_keep_their_label_after_a_flood_of_junk() -> None:
    metrics = Metrics.from_config(MetricsConfig(models=["qwen3-coder"]), route_models=())
    for i in range(150):
        metrics.observe(_served(f"junk-{i}"))
    metrics.observe(_served("qwen3-coder"))
    metrics.observe(_served("llama-3"))
    text = metrics.exposition().decode()
    assert metric(text, "proxai_requests_total", model="qwen3-coder") == 1
    assert metric(text, "proxai_requests_total", model="junk-99") == 1  # the 100th slot
    assert 'model="llama-3"' not in text and 'model="junk-100"' not in text
    assert metric(text, "proxai_requests_total", model="other") == 51


@pytest.mark.parametrize(("max_models", "labelled"), [(0, 0), (3, 3)])
def test_max_models_bounds_the_slots_clients_can_take(max_models: int, labelled: int) -> None:
    config = MetricsConfig(models=["m"], max_models=max_models)
    metrics = Metrics.from_config(config, route_models=["routed"])
    for name in ["a", "b", "c", "d", "m", "routed"]:
        metrics.observe(_served(name))
    text = metrics.exposition().decode()
    for name in ["m", "routed"]:
        assert metric(text, "proxai_requests_total", model=name) == 1
    assert sum(f'model="{n}"' in text for n in "abcd") == labelled
    assert metric(text, "proxai_requests_total", model="other") == 4 - labelled


async def test_a_real_proxai_labels_the_models_its_metrics_table_names(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"ok": True})])
    tables = {"metrics": {"models": ["qwen3-coder"], "max_models": 0}}
    async with proxai_for(upstream, **tables) as px, httpx.AsyncClient() as client:
        for model in ["junk-1", "qwen3-coder", "junk-2"]:
            await client.post(px.base_url + "/responses", json={"model": model, "input": "hi"})
        await px.wait_for_outcomes(3)
        text = (await client.get(px.url + "/metrics")).text
    assert metric(text, "proxai_requests_total", model="qwen3-coder") == 1
    assert metric(text, "proxai_requests_total", model="other") == 2
    assert "junk" not in text


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"max_models": -1}, "metrics.max_models: must be 0 or a positive integer"),
        ({"models": "qwen3"}, "metrics.models: expected an array"),
    ],
)
def test_bad_metrics_models_stop_start_up(metrics: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides={"upstream": {"base_url": "http://u/v1"}, "metrics": metrics})
    assert message in str(info.value)
