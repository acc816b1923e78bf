"""Hostile sizes (issue 20): what one request or one stream of an extreme shape costs.

    .venv/bin/python -m bench.hostile [--quick] [--only requests streams memory]

- ``requests``: one request of each shape a client can make huge (60,000 unknown
  top-level keys, hosted tool types, metadata keys, block types, system items,
  reasoning envelopes, consecutive assistant texts), translated for its upstream:
  CPU seconds and the length of the request's JSON log line;
- ``streams``: a Chat Completions stream of 10,000 and 20,000 parallel tool calls,
  through a whole proxai app in memory (pass-through for a Chat client, translated for
  a Responses and a Messages client): CPU seconds per stream and per call. The stream
  is sent in 64 KiB reads, as a fast upstream's would arrive;
- ``memory``: what a translated stream of short text deltas keeps per delta (observer
  and translator, by tracemalloc).

Figures are CPU time of this process (``time.process_time``), so they hold on a shared
machine better than wall time; they go to bench/profile.md by hand.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import orjson
import trio

from proxai.config import TimeoutsConfig, TranslationOptions
from proxai.ops.request_log import log_fields
from proxai.outcome import Outcome
from proxai.protocols.chat.observer import ChatObserver
from proxai.protocols.names import WireApi
from proxai.protocols.observer import Read
from proxai.testing import Script, chat_chunk
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.work import kept_by
from proxai.translate.ir import TranslationContext, wrap_reasoning
from proxai.translate.pairs import PAIRS
from proxai.translate.requests import estimate_input_tokens, translate_request
from proxai.wire.sse import SSEFramer

RESPONSES, CHAT, MESSAGES = WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES
Body = dict[str, Any]


def _keys(n: int) -> Body:
    return {f"x_unknown_field_{i}": i for i in range(n)}


#: (name, client API, upstream API, body of size n)
SHAPES: list[tuple[str, WireApi, WireApi, Callable[[int], Body]]] = [
    (
        "unknown top-level keys",
        RESPONSES,
        CHAT,
        lambda n: {"model": "m", "input": "hi", **_keys(n)},
    ),
    (
        "hosted tool types",
        RESPONSES,
        CHAT,
        lambda n: {"model": "m", "input": "hi", "tools": [{"type": f"h{i}"} for i in range(n)]},
    ),
    (
        "system items",
        RESPONSES,
        CHAT,
        lambda n: {"model": "m", "input": [{"role": "system", "content": "s" * 20}] * n},
    ),
    (
        "consecutive assistant texts",
        RESPONSES,
        CHAT,
        lambda n: {"model": "m", "input": [{"role": "assistant", "content": "t" * 20}] * n},
    ),
    (
        "reasoning envelopes in one turn",
        RESPONSES,
        CHAT,
        lambda n: {
            "model": "m",
            "input": [{"role": "assistant", "content": "t"}]
            + [{"type": "reasoning", "encrypted_content": wrap_reasoning("r" * 20)}] * n,
        },
    ),
    (
        "unknown top-level keys",
        MESSAGES,
        CHAT,
        lambda n: {"model": "m", "max_tokens": 1, "messages": [], **_keys(n)},
    ),
    (
        "block types",
        MESSAGES,
        CHAT,
        lambda n: {
            "model": "m",
            "max_tokens": 1,
            "messages": [{"role": "assistant", "content": [{"type": f"b{i}"} for i in range(n)]}],
        },
    ),
    (
        "metadata keys",
        MESSAGES,
        CHAT,
        lambda n: {"model": "m", "max_tokens": 1, "messages": [], "metadata": _keys(n)},
    ),
    (
        "system items",
        MESSAGES,
        CHAT,
        lambda n: {
            "model": "m",
            "max_tokens": 1,
            "messages": [{"role": "system", "content": "s" * 20}] * n,
        },
    ),
    (
        "tool fields",
        MESSAGES,
        CHAT,
        lambda n: {
            "model": "m",
            "max_tokens": 1,
            "messages": [],
            "tools": [{"name": "f", **_keys(n)}],
        },
    ),
    (
        "unknown top-level keys",
        MESSAGES,
        RESPONSES,
        lambda n: {"model": "m", "max_tokens": 1, "messages": [], **_keys(n)},
    ),
    (
        "unknown top-level keys",
        CHAT,
        MESSAGES,
        lambda n: {"model": "m", "messages": [], **_keys(n)},
    ),
    (
        "unknown top-level keys",
        CHAT,
        RESPONSES,
        lambda n: {"model": "m", "messages": [], **_keys(n)},
    ),
]


def requests(n: int) -> list[dict[str, Any]]:
    rows = []
    for name, client, upstream, build in SHAPES:
        body = build(n)
        size = len(orjson.dumps(body))
        started = time.process_time()
        _, ctx = translate_request(client, upstream, body, TranslationOptions())
        seconds = time.process_time() - started
        outcome = Outcome("POST", "/v1/x", dropped=list(ctx.dropped))
        line = len(orjson.dumps(log_fields(outcome)))
        rows.append(
            {
                "shape": f"{client}→{upstream}: {n:,} {name}",
                "body_bytes": size,
                "cpu_s": round(seconds, 3),
                "log_line_bytes": line,
            }
        )
        print(rows[-1], flush=True)
    body = {"model": "m", "messages": [{"role": "user", "content": "u" * 20}] * n}
    started = time.process_time()
    estimate_input_tokens(body)
    print({"shape": f"count_tokens: {n:,} messages", "cpu_s": time.process_time() - started})
    return rows


def _parallel_calls(n: int) -> Script:
    lines = [chat_chunk({"role": "assistant", "content": ""})]
    for i in range(n):
        start = {"index": i, "id": f"call_{i}", "type": "function"}
        start["function"] = {"name": "get_weather", "arguments": ""}
        lines.append(chat_chunk({"tool_calls": [start]}))
        fragment = {"index": i, "function": {"arguments": '{"city": "Paris"}'}}
        lines.append(chat_chunk({"tool_calls": [fragment]}))
    lines.append(chat_chunk({}, finish="tool_calls"))
    lines.append(b"data: [DONE]\n\n")
    return Script.sse(lines, chunk_size=65536)


_GO = [{"role": "user", "content": "go"}]
_REQUESTS = {
    CHAT: ("/v1/chat/completions", {"messages": _GO}),
    RESPONSES: ("/v1/responses", {"input": "go"}),
    MESSAGES: ("/v1/messages", {"max_tokens": 100, "messages": _GO}),
}


async def _stream(client: WireApi, n: int, server: dict[str, Any]) -> dict[str, Any]:
    path, body = _REQUESTS[client]
    script = _parallel_calls(n)
    timeouts = {"idle": 1000.0, "tool_arguments": 1000.0, "total": 10_000.0}
    upstreams = {"local": {"protocol": "openai_chat", "base_url": "http://local.test/v1"}}
    routes = [{"model": "*", "upstreams": ["local"]}]
    async with MemoryProxy(
        [script], server=server, upstreams=upstreams, routes=routes, **timeouts
    ) as proxy:
        started = time.process_time()
        exchange = await proxy.request({"model": "m", "stream": True, **body}, path=path)
        seconds = time.process_time() - started
    outcome = exchange.outcome
    return {
        "client": str(client),
        "calls": n,
        "cpu_s": round(seconds, 2),
        "us_per_call": round(seconds / n * 1e6, 1),
        "outcome": outcome.kind.value if outcome and outcome.kind else None,
        "bytes_out": len(exchange.body),
    }


def streams(sizes: list[int], server: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        for client in (CHAT, RESPONSES, MESSAGES):
            row = trio.run(_stream, client, n, server)
            rows.append(row)
            print(row, flush=True)
    return rows


def memory(deltas: int) -> list[dict[str, Any]]:
    """Bytes a translated Chat-upstream stream keeps per text delta (observer + translator)."""
    rows = []
    frames_bytes = [chat_chunk({"role": "assistant", "content": ""})]
    frames_bytes += [chat_chunk({"content": "abcde"})] * deltas
    framer = SSEFramer()
    frames = [f for data in frames_bytes for f in framer.feed(data)]
    for client in (RESPONSES, MESSAGES, CHAT):

        def stream(client: WireApi = client) -> object:
            observer = ChatObserver(TimeoutsConfig())
            ctx = TranslationContext(client=client, upstream=CHAT, stream=True, model="m")
            translator = PAIRS[(client, CHAT)].translator(ctx) if client is not CHAT else None
            if translator is not None:
                translator.follow(observer)  # as the relay has it
            observer.on_start(0.0)
            for frame in frames:
                reads: list[Read] | None = None if translator is None else []
                observer.read_frames([frame], 1.0, reads)
                if translator is not None and reads is not None:
                    translator.reads(reads)
            return observer, translator

        row = {
            "client": str(client),
            "deltas": deltas,
            "kept_bytes_per_delta": round(kept_by(stream) / deltas, 1),
            "translated": client is not CHAT,
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", default=["requests", "streams", "memory"])
    parser.add_argument(
        "--server",
        default="{}",
        help="extra [server] settings as JSON, e.g. '{\"max_open_items\": 100000}'",
    )
    args = parser.parse_args()
    server = json.loads(args.server)
    results: dict[str, Any] = {}
    if "requests" in args.only:
        results["requests"] = requests(6_000 if args.quick else 60_000)
    if "streams" in args.only:
        results["streams"] = streams([500] if args.quick else [10_000, 20_000], server)
    if "memory" in args.only:
        results["memory"] = memory(2_000 if args.quick else 100_000)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
