"""``proxai demo``: the seed document's exchange, played through proxai on loopback.

A scripted upstream plays the two Responses turns of the seed document; proxai
runs in front of it; the official openai SDK (in a worker thread, as any
synchronous client would) talks to proxai. Then turn 1 is replayed with an
upstream that goes silent in the middle of the function call's arguments, to
show what proxai is for, and the two turns run again over one WebSocket
(``client.responses.connect()``, Codex's default transport). Nothing leaves the
machine and no API key is needed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from functools import partial
from typing import Any

import trio

from .outcome import Outcome
from .testing import RecordedRequest, Script, ScriptedUpstream, open_proxai
from .testing.seed import (
    TURN1_EVENTS,
    TURN1_REQUEST,
    TURN2_REQUEST,
    WEATHER_RESULT,
    chat_seed_responder,
    make_seed_responder,
    turn1_stalled_script,
)

__all__ = ["add_demo_arguments", "run_demo"]

#: How long common clients wait on a silent stream on their own.
CLIENT_READ_TIMEOUTS = "openai-python waits 600 s and Codex 300 s"


def _stall_after(text: str) -> int:
    value = int(text)
    if not 1 <= value < len(TURN1_EVENTS):
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {len(TURN1_EVENTS) - 1} (turn 1 has {len(TURN1_EVENTS)} events)"
        )
    return value


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--delay", type=float, default=0.05, help="seconds between upstream events (default 0.05)"
    )
    parser.add_argument(
        "--stall-after",
        type=_stall_after,
        default=6,
        metavar="N",
        help="in the replay, the upstream goes silent after N events of turn 1 (default 6: "
        "right after the first arguments delta of get_weather)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="proxai's tool_arguments deadline for the demo (default 2.0; 120 in production)",
    )
    parser.add_argument(
        "--direct-wait",
        type=float,
        default=4.0,
        metavar="SECONDS",
        help="how long the demo lets the same call wait on the stalled upstream directly, "
        "without proxai, before giving up on it (default 4.0; 0 skips this step)",
    )


def _say(text: str = "") -> None:
    print(text, flush=True)


def _client(base_url: str, **options: Any) -> Any:
    try:
        import openai
    except ImportError:
        _say("the demo needs the openai SDK: pip install 'proxai[dev]' (make demo does this)")
        raise SystemExit(1) from None
    return openai.OpenAI(base_url=base_url, api_key="sk-demo-client", max_retries=0, **options)


def _turn1(client: Any, request: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Stream turn 1, printing what arrives; return the aggregated function calls by item."""
    calls: dict[str, dict[str, str]] = {}
    for event in client.responses.create(**request):
        kind = event.type
        if kind.startswith("response.web_search_call."):
            _say(f"   web_search {event.item_id}: {kind.rsplit('.', 1)[1]}")
        elif kind == "response.output_item.added" and event.item.type == "function_call":
            item = event.item
            calls[item.id] = {"call_id": item.call_id, "name": item.name, "arguments": ""}
            _say(f"   function_call {item.name} ({item.call_id}) opened")
        elif kind == "response.function_call_arguments.delta":
            calls[event.item_id]["arguments"] += event.delta
            _say(f"   arguments += {event.delta!r}")
        elif kind == "response.function_call_arguments.done":
            assert calls[event.item_id]["arguments"] == event.arguments
            _say(f"   arguments done: {event.arguments}")
        elif kind == "response.completed":
            _say(f"   {kind}: {event.response.id}, status {event.response.status}")
    return calls


def _story(proxai_url: str, upstream_url: str, args: argparse.Namespace) -> None:
    """The SDK side of the demo (runs in a worker thread)."""
    import openai

    client = _client(proxai_url)
    _say("1. Turn 1 through proxai: responses.create(stream=True) with the get_weather function")
    _say("   tool (strict) and the hosted web_search tool (two allowed domains, low context).")
    calls = _turn1(client, TURN1_REQUEST)
    call = next(iter(calls.values()))
    arguments = json.loads(call["arguments"])
    _say(f"   aggregated by item: {call['name']}({json.dumps(arguments, ensure_ascii=False)})")

    _say()
    _say(f"2. The client runs get_weather locally: {WEATHER_RESULT}")
    _say("   Turn 2 sends it back as function_call_output with previous_response_id=resp_01:")
    answer = ""
    sys.stdout.write("   ")
    for event in client.responses.create(**TURN2_REQUEST):
        if event.type == "response.output_text.delta":
            answer += event.delta
            sys.stdout.write(event.delta)
            sys.stdout.flush()
    _say()

    _say()
    _say(f"3. Turn 1 again, but the upstream goes silent after {args.stall_after} events,")
    _say("   in the middle of get_weather's arguments, and never says another word.")
    stalled_request = {**TURN1_REQUEST, "metadata": {"demo": "stall"}}
    started = time.monotonic()
    try:
        _turn1(client, stalled_request)
        _say("   (the stream ended without an error: that should not happen)")
    except openai.APIError as exc:
        _say(
            f"   after {time.monotonic() - started:.1f} s the SDK raised {type(exc).__name__}: "
            f"{exc.message}"
        )
        _say(f"   (proxai's tool_arguments deadline is {args.deadline} s in this demo)")
    if args.direct_wait > 0:
        _say()
        _say("   The same call straight to the upstream, without proxai:")
        direct = _client(upstream_url, timeout=args.direct_wait)
        started = time.monotonic()
        try:
            _turn1(direct, stalled_request)
        except (openai.APITimeoutError, openai.APIConnectionError):
            waited = time.monotonic() - started
            _say(f"   still waiting after {waited:.1f} s, when the demo gave up on it;")
            _say(f"   on their own, {CLIENT_READ_TIMEOUTS} on a silent stream.")
        else:
            _say("   the stream ended as if complete, with no error")

    _say()
    _socket_story(client)


def _socket_story(client: Any) -> None:
    """The seed's two turns again, over one WebSocket (Codex's default transport)."""
    _say("4. The same two turns over one WebSocket: client.responses.connect(), GET")
    _say("   /v1/responses upgraded; each turn is one response.create frame, and turn 2")
    _say("   carries only the function_call_output and previous_response_id.")
    with client.responses.connect() as connection:
        previous = None
        for number, request in ((1, TURN1_REQUEST), (2, TURN2_REQUEST)):
            fields = {k: v for k, v in request.items() if k != "stream"}
            if previous is not None:
                fields["previous_response_id"] = previous
            connection.send({"type": "response.create", **fields})
            frames, text = 0, ""
            for event in connection:
                frames += 1
                if event.type == "response.output_text.delta":
                    text += event.delta
                if event.type in ("response.completed", "response.failed", "error"):
                    break
            previous = getattr(getattr(event, "response", None), "id", None)
            said = f": {text}" if text else ""
            _say(f"   turn {number}: {frames} frames, ended {event.type} ({previous}){said}")


def _stored_story(proxai_url: str, chat: ScriptedUpstream) -> None:
    """The seed's two turns in front of a Chat-only server, which keeps nothing: proxai
    stores turn 1 and makes turn 2 self-contained."""
    client = _client(proxai_url)
    _say()
    _say("5. The same two turns in front of a Chat-only server (vLLM, llama.cpp, Ollama keep")
    _say("   nothing): proxai stores turn 1 and sends turn 2 with the whole conversation.")
    body = {k: v for k, v in TURN1_REQUEST.items() if k != "stream"}
    with client.responses.stream(**body) as stream:
        first = stream.get_final_response()
    _say(f"   turn 1: {first.status}, stored by proxai as {first.id[:20]}...")
    output = TURN2_REQUEST["input"]
    with client.responses.stream(
        model=TURN2_REQUEST["model"], previous_response_id=first.id, input=output
    ) as stream:
        second = stream.get_final_response()
    roles = [m["role"] for m in chat.requests[-1].json()["messages"]]
    _say(f"   turn 2 (previous_response_id + the tool's output only): {second.output_text}")
    _say(f"   what the Chat server received for turn 2: messages {roles}")
    kept = client.responses.retrieve(first.id)
    items = list(client.responses.input_items.list(second.id, order="asc"))
    _say(f"   responses.retrieve(turn 1): {kept.status}, {len(kept.output)} output item(s);")
    _say(f"   input_items.list(turn 2): {[i.type for i in items]}")


def _print_outcomes(outcomes: list[Outcome]) -> None:
    _say()
    _say("6. proxai's outcome record of each request (what it logs; never prompts or arguments):")
    for i, o in enumerate(outcomes, 1):
        first = f"{o.first_byte_s * 1000:.1f} ms" if o.first_byte_s is not None else "-"
        total = f"{o.total_s * 1000:.0f} ms" if o.total_s is not None else "-"
        calls = ", ".join(f"{c.name} ({c.arguments_length} chars)" for c in o.calls) or "none"
        _say(
            f"   #{i} {o.method} {o.path} model={o.model}: {o.kind}, status {o.status}, "
            f"{o.events} events, {o.bytes_out} bytes, first byte {first}, total {total}"
        )
        _say(f"      calls: {calls}")
        if o.stalled_item:
            _say(f"      stalled item: {o.stalled_item}")
            _say(f"      detail: {o.detail}")


async def _main(args: argparse.Namespace) -> None:
    seed = make_seed_responder(delay=args.delay)

    def respond(request: RecordedRequest) -> Script:
        body = request.json()
        if isinstance(body, dict) and body.get("metadata", {}).get("demo") == "stall":
            return turn1_stalled_script(after_events=args.stall_after, delay=args.delay)
        return seed(request)

    upstream = ScriptedUpstream(respond)
    timeouts = {"tool_arguments": args.deadline, "idle": max(args.deadline * 2, 5.0)}
    async with trio.open_nursery() as nursery:
        upstream_url = await nursery.start(upstream.serve)
        async with open_proxai(
            upstream_url, api_key="sk-demo-upstream", timeouts=timeouts
        ) as proxai:
            _say(f"A scripted upstream plays the seed's exchange on {upstream_url};")
            _say(f"proxai runs in front of it on {proxai.url}.")
            _say("The official openai SDK talks to proxai.")
            _say()
            story = partial(_story, proxai.base_url, upstream_url, args)
            await trio.to_thread.run_sync(story, abandon_on_cancel=True)
            # Three over HTTP, the socket's two responses and its upgrade.
            outcomes = await proxai.wait_for_outcomes(6)
        chat = ScriptedUpstream(chat_seed_responder)
        chat_url = await nursery.start(chat.serve)
        chat_upstream = {"protocol": "openai_chat"}
        async with open_proxai(chat_url, api_key="sk-demo-upstream", upstream=chat_upstream) as px:
            story = partial(_stored_story, px.base_url, chat)
            await trio.to_thread.run_sync(story, abandon_on_cancel=True)
            # The two turns, and retrieve and input_items answered by proxai.
            outcomes += await px.wait_for_outcomes(4)
        _print_outcomes(outcomes)
        nursery.cancel_scope.cancel()
    keys = {r.header("authorization") for r in upstream.requests[:3]}
    _say()
    seen = ", ".join(sorted(k or "-" for k in keys))
    _say(f"The upstream saw proxai's key ({seen}), never the client's.")


def run_demo(args: argparse.Namespace) -> int:
    # The demo prints each outcome record itself (step 4); the request log's own line
    # for the stalled replay would only interrupt the story.
    logging.getLogger("proxai.request").addHandler(logging.NullHandler())
    trio.run(_main, args)
    return 0
