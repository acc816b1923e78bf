"""``proxai demo``: the seed document's exchange, played through proxai on loopback.

A scripted upstream plays the two Responses turns of the seed document; proxai
runs in front of it; the official openai SDK (in a worker thread, as any
synchronous client would) talks to proxai. Nothing leaves the machine and no
API key is needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from typing import Any

import trio

from .outcome import Outcome
from .testing import ScriptedUpstream, open_proxai
from .testing.seed import TURN1_REQUEST, TURN2_REQUEST, make_seed_responder

__all__ = ["run_demo"]


def _say(text: str = "") -> None:
    print(text, flush=True)


def _drive_sdk(base_url: str) -> None:
    """Both turns with the openai SDK, printing what arrives as it arrives."""
    try:
        import openai
    except ImportError:
        _say("the demo needs the openai SDK: pip install 'proxai[dev]' (make demo does this)")
        raise SystemExit(1) from None

    client = openai.OpenAI(base_url=base_url, api_key="sk-demo-client", max_retries=0)

    _say(
        "── Turn 1: responses.create(stream=True) with get_weather (function) + web_search (hosted)"
    )
    calls: dict[str, dict[str, Any]] = {}
    stream: Any = client.responses.create(**TURN1_REQUEST)
    for event in stream:
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
            _say(f"   {kind}: {event.response.id} status={event.response.status}")
    call = next(iter(calls.values()))
    args = json.loads(call["arguments"])
    _say(f"   aggregated call: {call['name']}({args})")

    _say()
    _say(f"── Local tool: get_weather({args['city']}, {args['date']}) → function_call_output")
    _say("── Turn 2: previous_response_id=resp_01, streaming the answer")
    text = ""
    stream = client.responses.create(**TURN2_REQUEST)
    sys.stdout.write("   ")
    for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
            sys.stdout.write(event.delta)
            sys.stdout.flush()
        elif event.type == "response.output_text.done":
            assert event.text == text
    _say()


def _print_outcomes(outcomes: list[Outcome]) -> None:
    _say()
    _say("── proxai's outcome record of each request")
    for o in outcomes:
        first = f"{o.first_byte_s * 1000:.1f} ms" if o.first_byte_s is not None else "-"
        total = f"{o.total_s * 1000:.1f} ms" if o.total_s is not None else "-"
        _say(
            f"   {o.method} {o.path}: {o.kind} status={o.status} events={o.events} "
            f"bytes={o.bytes_out} first_byte={first} total={total}"
        )


async def _main(delay: float) -> None:
    upstream = ScriptedUpstream(make_seed_responder(delay=delay))
    async with trio.open_nursery() as nursery:
        upstream_url = await nursery.start(upstream.serve)
        async with open_proxai(upstream_url, api_key="sk-demo-upstream") as proxai:
            _say(f"scripted upstream on {upstream_url}; proxai on {proxai.url}")
            _say()
            await trio.to_thread.run_sync(partial(_drive_sdk, proxai.base_url))
            _print_outcomes(await proxai.wait_for_outcomes(2))
        nursery.cancel_scope.cancel()
    for request in upstream.requests:
        assert request.header("authorization") == "Bearer sk-demo-upstream"
    _say()
    _say("Both turns went through proxai; the upstream saw proxai's key, never the client's.")


def run_demo(args: argparse.Namespace) -> int:
    trio.run(_main, args.delay)
    return 0
