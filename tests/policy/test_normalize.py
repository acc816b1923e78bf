"""Request normalization: before/after bodies, and no-op passes that keep the original bytes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from proxai.config import NormalizeConfig
from proxai.policy.normalize import normalize_body
from proxai.testing import Script

SYSTEM = {"type": "message", "role": "system", "content": "You are terse."}
DEVELOPER = {"role": "developer", "content": [{"type": "input_text", "text": "Answer in Chinese."}]}
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
IMAGE_SYSTEM = {
    "role": "system",
    "content": [{"type": "input_image", "image_url": "https://example.test/a.png"}],
}


def run(data: dict[str, Any], passes: NormalizeConfig, **kw: Any) -> tuple[bytes, bytes]:
    body = json.dumps(data, indent=2, ensure_ascii=False).encode()  # not compact on purpose
    return body, normalize_body(body, json.loads(body), passes, responses=True, **kw)


def test_system_items_move_into_instructions() -> None:
    before = {"model": "m", "instructions": "Be kind.", "input": [SYSTEM, USER]}
    body, after = run(before, NormalizeConfig(system_to_instructions=True))
    assert after != body
    assert orjson.loads(after) == {
        "model": "m",
        "instructions": "You are terse.\n\nBe kind.",
        "input": [USER],
    }


def test_developer_items_move_only_when_configured() -> None:
    before = {"model": "m", "input": [SYSTEM, DEVELOPER, USER]}
    _, system_only = run(before, NormalizeConfig(system_to_instructions=True))
    assert orjson.loads(system_only) == {
        "model": "m",
        "instructions": "You are terse.",
        "input": [DEVELOPER, USER],
    }
    _, both = run(
        before, NormalizeConfig(system_to_instructions=True, developer_to_instructions=True)
    )
    assert orjson.loads(both) == {
        "model": "m",
        "instructions": "You are terse.\n\nAnswer in Chinese.",
        "input": [USER],
    }


@pytest.mark.parametrize(
    ("data", "passes"),
    [
        ({"model": "m", "input": [SYSTEM, USER]}, NormalizeConfig()),  # pass off
        (
            {"model": "m", "input": [USER]},
            NormalizeConfig(system_to_instructions=True),
        ),  # no system item
        ({"model": "m", "input": "just text"}, NormalizeConfig(system_to_instructions=True)),
        (
            {"model": "m", "input": [IMAGE_SYSTEM, USER]},
            NormalizeConfig(system_to_instructions=True),
        ),
    ],
)
def test_a_pass_that_changes_nothing_keeps_the_original_bytes(
    data: dict[str, Any], passes: NormalizeConfig
) -> None:
    body, after = run(data, passes)
    assert after is body


def test_model_rewrite() -> None:
    body, after = run(
        {"model": "gpt-*", "input": "hi"}, NormalizeConfig(), upstream_model="gpt-5.4"
    )
    assert orjson.loads(after) == {"model": "gpt-5.4", "input": "hi"}
    body, same = run(
        {"model": "gpt-5.4", "input": "hi"}, NormalizeConfig(), upstream_model="gpt-5.4"
    )
    assert same is body


def test_chat_bodies_are_never_moved_around() -> None:
    data = {"model": "m", "messages": [{"role": "system", "content": "x"}]}
    body = json.dumps(data).encode()
    assert (
        normalize_body(
            body, dict(data), NormalizeConfig(system_to_instructions=True), responses=False
        )
        is body
    )


async def test_configured_upstream_receives_the_normalized_body(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"id": "resp_1"})])
    normalize = {"system_to_instructions": True}
    async with (
        proxai_for(upstream, upstream={"normalize": normalize}) as px,
        httpx.AsyncClient() as client,
    ):
        original = json.dumps({"model": "m", "input": [SYSTEM, USER]}, indent=1).encode()
        untouched = json.dumps({"model": "m", "input": [USER]}, indent=1).encode()
        await client.post(px.base_url + "/responses", content=original)
        await client.post(px.base_url + "/responses", content=untouched)
    first, second = upstream.requests
    assert first.json() == {"model": "m", "input": [USER], "instructions": "You are terse."}
    assert second.body == untouched  # byte for byte, indentation and all


def test_an_empty_system_item_is_dropped_without_a_blank_paragraph() -> None:
    empty = {"role": "system", "content": "  "}
    _, after = run(
        {"model": "m", "instructions": "Be kind.", "input": [empty, USER]},
        NormalizeConfig(system_to_instructions=True),
    )
    assert orjson.loads(after) == {"model": "m", "instructions": "Be kind.", "input": [USER]}
