"""bench/gateways.py's verdicts and the report's rows for the peers (issue 34 item 2):
what the per-event bench records about LiteLLM and Portkey, without starting them."""

from __future__ import annotations

import json
from typing import Any

from bench import streams
from bench.gateways import RESERIALIZED, byte_verdict, litellm_config, stall_verdict
from bench.streams import Variant

VARIANT = Variant(5, 0.002)
TEXT = "".join(streams.answer(VARIANT.deltas))


def reframed(body: bytes) -> bytes:
    """The upstream's Responses stream as LiteLLM sends it: no ``event:`` lines, JSON
    re-serialized with a field added, ``[DONE]`` at the end."""
    out = b""
    for frame in body.split(b"\n\n")[:-1]:
        data = next(line for line in frame.split(b"\n") if line.startswith(b"data: "))
        payload = {**json.loads(data[6:]), "model": VARIANT.model}
        out += b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def test_the_upstreams_bytes_pass_and_a_reserialized_stream_with_the_same_text_is_named() -> None:
    upstream = streams.body(VARIANT, "responses")
    assert byte_verdict(upstream, upstream, "responses", TEXT) is None
    assert byte_verdict(reframed(upstream), upstream, "responses", TEXT) == RESERIALIZED


def test_a_stream_with_other_text_or_cut_short_is_a_failure() -> None:
    upstream = streams.body(VARIANT, "responses")
    other = reframed(upstream).replace(TEXT[:2].encode(), b"xy", 1)
    assert byte_verdict(other, upstream, "responses", TEXT) == "bytes differ and so does the text"
    cut = upstream[: upstream.rindex(b"event: response.completed")]
    assert byte_verdict(cut, upstream, "responses", TEXT) == (
        "bytes differ and it is not a complete stream"
    )


def test_a_chat_stream_is_read_by_its_content_deltas() -> None:
    upstream = streams.body(VARIANT, "chat")
    assert byte_verdict(upstream.replace(b'"id"', b'"id" '), upstream, "chat", TEXT) == (
        RESERIALIZED
    )


def test_a_stall_ended_with_an_error_event_is_bounded() -> None:
    row = {"ending": "complete", "ended_s": 20.4, "body": 'event: response.failed\ndata: {"a":1}'}
    verdict = stall_verdict(row, 75.0)
    assert verdict["bounded"] and verdict["error_event"]
    assert verdict["what"].startswith("ended the body cleanly after 20.4 s")


def test_a_stall_still_open_when_the_client_gives_up_is_not_bounded() -> None:
    row = {"ending": "gave up", "ended_s": 75.0, "body": "event: response.created\n\n"}
    assert stall_verdict(row, 75.0) == {
        "bounded": False,
        "error_event": False,
        "what": "still open after 75 s (the client gave up)",
    }


def test_a_stall_cut_without_a_word_is_bounded_but_says_the_answer_is_truncated() -> None:
    verdict = stall_verdict({"ending": "closed", "ended_s": 60.0, "body": ""}, 75.0)
    assert verdict["bounded"] and not verdict["error_event"]
    assert "truncated" in verdict["what"]


def test_litellm_lists_every_model_with_native_streaming() -> None:
    config = litellm_config(4321, ["ev-20-2000", "ev-hold", "ev-20-2000"], 20.0)
    assert config.count("model_name:") == 2
    assert config.count("supports_native_streaming: true") == 2
    assert 'api_base: "http://127.0.0.1:4321/v1"' in config
    assert "stream_timeout: 20.0" in config and "master_key:" in config


def _perevent(peers: dict[str, Any]) -> dict[str, Any]:
    return {
        "cpu": [],
        "ttfb": [],
        "memory": {"summary": []},
        "checks": {"cells": 0, "bad": 0, "problems": [], "sdk": [], "reserialized": {}},
        "peers": peers,
        "stall": {
            "rows": [
                {"target": "nginx", "bounded": True, "what": "closed the connection"},
            ],
            "give_up_s": 75.0,
            "bound_s": 20.0,
            "failed": {"portkey": "every warm-up stream failed: incomplete (status 500)"},
        },
    }


def test_the_report_says_why_a_peer_did_not_run() -> None:
    from bench.report import peers_section

    reason = "every warm-up stream failed: incomplete (status 500: TypeError: immutable)"
    text = "\n".join(
        peers_section(_perevent({"ran": [], "failed": {"portkey": reason}, "versions": {}}))
    )
    assert f"**Portkey gateway (Responses route) did not run**: {reason}." in text
    assert "| Portkey gateway (Responses route) | — | — | did not run:" in text
