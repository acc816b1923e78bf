"""Request translation costs time linear in the request, and the record of it stays small
(issue 20, item 3): each translator measured at size n and 2n by counting its work
(:mod:`proxai.testing.work`: lines of Python run and bytes allocated), never by a clock.
The hostile sizes themselves (60,000 fields) are measured in bench/profile.md
(``bench/hostile.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from trio.testing import MockClock

from proxai.config import CaptureConfig, TranslationOptions
from proxai.ops.capture import Capture, Captures
from proxai.ops.request_log import MAX_LOG_TEXT, JsonFormatter, _human, log_fields
from proxai.outcome import MAX_LISTED, MAX_NAME, Outcome, OutcomeKind, listed
from proxai.protocols.names import WireApi
from proxai.testing import Script, chat_chunk
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.work import assert_linear
from proxai.translate.ir import TranslationContext, wrap_reasoning
from proxai.translate.requests import estimate_input_tokens, translate_request
from proxai.translate.requests._common import drop

RESPONSES, CHAT, MESSAGES = WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES
Body = dict[str, Any]
Operation = Callable[[int], Callable[[], object]]


class Counted(str):
    """A string that counts how often it is compared for equality (hashing is free):
    a list searched for it with ``in`` compares it with every element."""

    comparisons: ClassVar[list[int]] = [0]

    def __eq__(self, other: object) -> bool:
        Counted.comparisons[0] += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def comparisons(run: Callable[[], object]) -> int:
    Counted.comparisons[0] = 0
    run()
    return Counted.comparisons[0]


PAIRS = [
    (RESPONSES, CHAT, {"input": "hi"}),
    (MESSAGES, CHAT, {"max_tokens": 10, "messages": []}),
    (CHAT, RESPONSES, {"messages": []}),
    (CHAT, MESSAGES, {"messages": []}),
    (RESPONSES, MESSAGES, {"input": "hi"}),
    (MESSAGES, RESPONSES, {"max_tokens": 10, "messages": []}),
]


@pytest.mark.parametrize(("client", "upstream", "base"), PAIRS)
def test_unknown_top_level_fields_are_noted_in_linear_time(
    client: WireApi, upstream: WireApi, base: Body
) -> None:
    """60,000 unknown keys froze a worker for 16 s: each dropped field searched the list of
    those dropped before it."""
    n = 2000
    body = {"model": "m", **base, **{Counted(f"x_{i}"): i for i in range(n)}}
    count = comparisons(lambda: translate_request(client, upstream, body, TranslationOptions()))
    assert count <= 4 * n, f"{count} comparisons for {n} unknown fields"


def test_drop_notes_each_path_once_in_constant_time() -> None:
    n = 2000
    ctx = TranslationContext(client=RESPONSES, upstream=CHAT, stream=False)
    paths = [Counted(f"messages.block_{i}") for i in range(n)]

    def run() -> None:
        for path in paths + paths:
            drop(ctx, path)

    assert comparisons(run) <= 4 * n


def translation(client: WireApi, upstream: WireApi, build: Callable[[int], Body]) -> Operation:
    def operation(n: int) -> Callable[[], object]:
        body = build(n)
        return lambda: translate_request(client, upstream, body, TranslationOptions())

    return operation


def _responses(items: list[Body]) -> Body:
    return {"model": "m", "input": items}


def _messages(messages: list[Body], **extra: Any) -> Body:
    return {"model": "m", "max_tokens": 10, "messages": messages, **extra}


def _thinking(n: int) -> Body:
    block = {"type": "thinking", "thinking": "r" * 40, "signature": ""}
    return _messages([{"role": "assistant", "content": [block] * n}])


SHAPES: list[tuple[str, WireApi, WireApi, Callable[[int], Body]]] = [
    (
        "system items",
        RESPONSES,
        CHAT,
        lambda n: _responses([{"role": "system", "content": "s" * 40}] * n),
    ),
    (
        "consecutive assistant texts",
        RESPONSES,
        CHAT,
        lambda n: _responses([{"role": "assistant", "content": "t" * 40}] * n),
    ),
    (
        "reasoning envelopes in one turn",
        RESPONSES,
        CHAT,
        lambda n: _responses(
            [{"role": "assistant", "content": "t"}]
            + [{"type": "reasoning", "encrypted_content": wrap_reasoning("r" * 40)}] * n
        ),
    ),
    (
        "system items",
        MESSAGES,
        CHAT,
        lambda n: _messages([{"role": "system", "content": "s" * 40}] * n),
    ),
    (
        "system blocks",
        MESSAGES,
        CHAT,
        lambda n: _messages([], system=[{"type": "text", "text": "s" * 40}] * n),
    ),
    ("thinking blocks", MESSAGES, CHAT, _thinking),
    (
        "system messages",
        CHAT,
        MESSAGES,
        lambda n: {"model": "m", "messages": [{"role": "system", "content": "s" * 40}] * n},
    ),
    (
        "tool results",
        CHAT,
        MESSAGES,
        lambda n: {
            "model": "m",
            "messages": [{"role": "tool", "tool_call_id": "c", "content": "r" * 40}] * n,
        },
    ),
    (
        "system items",
        RESPONSES,
        MESSAGES,
        lambda n: _responses([{"role": "system", "content": "s" * 40}] * n),
    ),
    (
        "consecutive assistant texts",
        RESPONSES,
        MESSAGES,
        lambda n: _responses([{"role": "assistant", "content": "t" * 40}] * n),
    ),
    (
        "system items",
        MESSAGES,
        RESPONSES,
        lambda n: _messages([{"role": "system", "content": "s" * 40}] * n),
    ),
]


@pytest.mark.parametrize(
    ("client", "upstream", "build"),
    [shape[1:] for shape in SHAPES],
    ids=[f"{c}-{u}-{name}" for name, c, u, _ in SHAPES],
)
def test_request_translation_grows_linearly(
    client: WireApi, upstream: WireApi, build: Callable[[int], Body]
) -> None:
    """System prompts joined to the leading one, consecutive assistant texts and reasoning
    envelopes joined to their message: each was added by copying what came before."""
    assert_linear(translation(client, upstream, build), 1000)


def test_the_count_tokens_estimate_grows_linearly() -> None:
    def operation(n: int) -> Callable[[], object]:
        content = [{"type": "text", "text": "u" * 40}] * 4
        body = _messages([{"role": "user", "content": content}] * n, system="s")
        return lambda: estimate_input_tokens(body)

    assert_linear(operation, 500)


# -- the record of a huge request stays small ------------------------------------------------


def test_the_dropped_list_keeps_the_first_names_and_counts_the_rest() -> None:
    body = {"model": "m", "input": "hi", **{f"x_{i}": i for i in range(60_000)}}
    _, ctx = translate_request(RESPONSES, CHAT, body, TranslationOptions())
    assert len(ctx.dropped) == MAX_LISTED
    assert ctx.dropped[: MAX_LISTED - 1] == [f"x_{i}" for i in range(MAX_LISTED - 1)]
    assert ctx.dropped[-1] == f"... and {60_000 - MAX_LISTED + 1} more"


def test_a_list_of_at_most_max_listed_names_is_kept_whole_and_long_names_are_cut() -> None:
    names = [f"n{i}" for i in range(MAX_LISTED)]
    assert listed(names) == names
    more = [*names, "one more"]
    assert listed(more)[-1] == "... and 2 more"
    assert listed(listed(more)) == listed(more)
    (cut,) = listed(["x" * 10_000])
    assert len(cut) == MAX_NAME and cut.endswith("…")


def _calls(n: int) -> list[bytes]:
    lines = [chat_chunk({"role": "assistant", "content": ""})]
    for i in range(n):
        start = {"index": i, "id": f"call_{i}_" + "i" * 500, "type": "function"}
        lines.append(chat_chunk({"tool_calls": [start | {"function": {"name": "f" * 500}}]}))
        fragment = {"index": i, "function": {"arguments": '{"a": 1}'}}
        lines.append(chat_chunk({"tool_calls": [fragment]}))
    return [*lines, chat_chunk({}, finish="tool_calls"), b"data: [DONE]\n\n"]


async def test_a_huge_request_and_stream_leave_a_short_log_line_and_capture(
    autojump_clock: MockClock, tmp_path: Path
) -> None:
    """60,000 unknown fields wrote a 590 KB log line; 5,000 tools and 200 calls, their names
    as long as an upstream likes, would have too."""
    tools = [{"type": "function", "name": f"tool_{i}_" + "t" * 300} for i in range(5_000)]
    body = {
        "model": "m",
        "input": "hi",
        "stream": True,
        "tools": tools,
        **{f"x_{i}": i for i in range(60_000)},
    }
    upstreams = {"local": {"protocol": "openai_chat", "base_url": "http://local.test/v1"}}
    routes = [{"model": "*", "upstreams": ["local"]}]
    async with MemoryProxy(
        [Script.sse(_calls(200), chunk_size=65536)], upstreams=upstreams, routes=routes
    ) as proxy:
        exchange = await proxy.request(body)
    outcome = exchange.outcome
    assert outcome is not None and outcome.kind is OutcomeKind.COMPLETED
    assert outcome.translation == "responses→chat"
    assert len(outcome.dropped) == MAX_LISTED
    assert outcome.dropped[-1] == f"... and {60_000 - MAX_LISTED + 1} more"
    assert len(outcome.tools) == MAX_LISTED
    assert outcome.tools[-1] == f"... and {5_000 - MAX_LISTED + 1} more"
    assert all(len(name) <= MAX_NAME for name in outcome.tools)
    assert len(outcome.calls) == MAX_LISTED and outcome.calls_more == 200 - MAX_LISTED
    assert all(len(c.name or "") <= MAX_NAME for c in outcome.calls)
    assert all(len(c.call_id or "") <= MAX_NAME for c in outcome.calls)

    record = logging.LogRecord("proxai.request", logging.INFO, "", 0, "", (), None)
    record.proxai_fields = log_fields(outcome)
    line = JsonFormatter().format(record)
    assert len(line) < 16_000, len(line)
    assert json.loads(line)["calls_more"] == 200 - MAX_LISTED
    assert len(_human(log_fields(outcome))) < 16_000

    saved = captured_record(outcome, tmp_path)
    assert len(saved) < 32_000
    assert json.loads(saved)["dropped"] == outcome.dropped


def captured_record(outcome: Outcome, folder: Path) -> bytes:
    """The ``outcome.json`` a capture of ``outcome`` writes."""
    outcome.request_id = "req_" + "0" * 24
    Captures(CaptureConfig(enabled=True, dir=str(folder)))._write(Capture(1024), outcome)
    (saved,) = folder.glob("*/outcome.json")
    return saved.read_bytes()


def test_free_text_in_a_log_line_is_cut() -> None:
    outcome = Outcome("POST", "/v1/responses", model="m" * 100_000, detail="d" * 100_000)
    fields = log_fields(outcome)
    assert len(fields["model"]) < MAX_LOG_TEXT + 50
    assert fields["model"].endswith(f"({100_000 - MAX_LOG_TEXT} more characters)")
    assert len(fields["detail"]) < MAX_LOG_TEXT + 50
