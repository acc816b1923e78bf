"""Hostile input never crashes: observers and projections under hypothesis, odd HTTP on a
real server."""

from __future__ import annotations

import functools
import itertools
import json
import re
from typing import Any

import httpx
import orjson
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxai.config import TimeoutsConfig
from proxai.errors import ProxyError
from proxai.outcome import Outcome, OutcomeKind
from proxai.protocols.observer import Verdict
from proxai.protocols.table import APIS, WireApi
from proxai.protocols.tracking import StreamLimits
from proxai.testing import Reset, Script, Send
from proxai.testing.seed import TURN1_EVENTS, turn_bytes
from proxai.testing.streams import made_bytes as raw
from proxai.wire.json_body import load_json_object
from proxai.wire.sse import SSEFramer

TIMEOUTS = TimeoutsConfig(idle=30.0, tool_arguments=20.0, total=1000.0)
#: Every API's stream observer, from the table (for a stream whose request it did not see).
OBSERVERS = {
    api.wire: functools.partial(api.observer, TIMEOUTS, None, StreamLimits()) for api in APIS
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Event payloads that look like the real thing: known types, plausible and implausible fields.
EVENT_TYPES = [
    "response.created", "response.output_item.added", "response.output_item.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.output_text.delta", "response.output_text.done", "response.completed", "error",
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "keepalive",
]  # fmt: skip
FIELDS = [
    "output_index", "item_id", "delta", "item", "response", "index", "content_block",
    "choices", "tool_calls", "finish_reason", "error", "arguments", "text", "usage",
]  # fmt: skip
payloads = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(EVENT_TYPES),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5),
)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 12))):
        choice = draw(st.integers(0, 5))
        if choice == 0:
            parts.append(draw(st.binary(max_size=40)))
        elif choice == 1:
            parts.append(b"data: [DONE]\n\n")
        else:
            payload = draw(payloads)
            name = payload["type"] if draw(st.booleans()) else None
            head = f"event: {name}\n".encode() if name else b""
            parts.append(head + b"data: " + json.dumps(payload).encode() + b"\n\n")
    return b"".join(parts)


def check_closing(verdict: Verdict) -> None:
    """Whatever the observer appends is whole events, each with a JSON object."""
    framer = SSEFramer()
    frames = framer.feed(raw(verdict.closing))
    assert framer.close() == b""
    for frame in frames:
        if frame.data is not None and frame.data != b"[DONE]":
            assert isinstance(json.loads(frame.data), dict)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(protocol=st.sampled_from(list(OBSERVERS)), stream=streams(), data=st.data())
def test_observers_survive_any_stream(
    protocol: WireApi, stream: bytes, data: st.DataObject
) -> None:
    observer = OBSERVERS[protocol]()
    framer = SSEFramer()
    observer.on_start(0.0)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=6)))
    bounds = [0, *cuts, len(stream)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        observer.on_frames(framer.feed(stream[a:b]), float(i))
    deadline = observer.deadline()
    assert deadline < 1e9
    ending = data.draw(st.sampled_from(["deadline", "eof", "reset", "total", "client"]))
    if ending == "deadline":
        verdict = observer.on_deadline(deadline)
    elif ending == "eof":
        verdict = observer.on_end(fault=None, detail=None, now=deadline)
    elif ending == "reset":
        verdict = observer.on_end(fault=OutcomeKind.UPSTREAM_RESET, detail="x", now=deadline)
    elif ending == "total":
        verdict = observer.on_total_timeout(deadline)
    else:
        verdict = observer.on_client_stalled(5.0)
    check_closing(verdict)
    outcome = Outcome("POST", "/x")
    observer.fill(outcome)
    assert len(outcome.anomalies) <= 21  # bounded, whatever came in


#: Every API's request projection, from the table.
PROJECTIONS = {api.wire: api.project for api in APIS}
KEYS = ["model", "stream", "tools", "tool_choice", "input", "messages", "metadata", "include",
        "max_output_tokens", "max_tokens", "temperature", "reasoning", "text", "stop", "n",
        "conversation", "prompt", "previous_response_id", "stream_options", "system"]  # fmt: skip


def field_of(path: str) -> str:
    """The body's key a 400's ``param`` starts at (``tools[0].name`` -> ``tools``)."""
    return re.split(r"[.\[]", path, maxsplit=1)[0]


@settings(max_examples=400, deadline=None)
@given(
    wire=st.sampled_from(list(PROJECTIONS)),
    body=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6) | json_values,
)
def test_projections_accept_or_refuse_with_400(wire: WireApi, body: Any) -> None:
    """A body is projected with what it says, or refused with a 400 naming one of its own
    fields; a body that is no JSON object is refused before any projection sees it."""
    if not isinstance(body, dict):
        with pytest.raises(ProxyError) as refused:
            load_json_object(orjson.dumps(body))
        assert (refused.value.status, refused.value.code) == (400, "invalid_json")
        return
    try:
        projection = PROJECTIONS[wire](body)
    except ProxyError as exc:
        assert (exc.status, exc.type) == (400, "invalid_request_error")
        assert exc.param is not None and field_of(exc.param) in body, exc
        return
    assert projection.model == body.get("model")
    assert projection.stream == body.get("stream")
    assert all(isinstance(name, str) for name in projection.tool_names())


@settings(max_examples=100, deadline=None)
@given(
    wire=st.sampled_from(list(PROJECTIONS)),
    model=st.text(min_size=1, max_size=20),
    stream=st.booleans() | st.none(),
)
def test_projections_read_a_plain_body(wire: WireApi, model: str, stream: bool | None) -> None:
    """What every API's body has is read back: a projection that refused or misread every
    body would pass the test above on refusals alone."""
    body: dict[str, Any] = {"model": model}
    if stream is not None:
        body["stream"] = stream
    projection = PROJECTIONS[wire](body)
    assert (projection.model, projection.stream) == (model, stream)


# --- odd HTTP through a real server -----------------------------------------------------------


async def raw_exchange(url: str, request: bytes) -> bytes:
    parsed = httpx.URL(url)
    assert parsed.port is not None
    stream = await trio.open_tcp_stream(parsed.host, parsed.port)
    async with stream:
        await stream.send_all(request)
        response = b""
        with trio.move_on_after(5):
            while chunk := await stream.receive_some():
                response += chunk
    return response


async def test_wrong_content_type_is_forwarded_as_is(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream([Script.sse([turn_bytes(TURN1_EVENTS)])])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        body = json.dumps({"model": "m", "stream": True}).encode()
        response = await client.post(
            px.base_url + "/responses", content=body, headers={"content-type": "text/plain"}
        )
    assert response.content == turn_bytes(TURN1_EVENTS)
    assert upstream.requests[0].header("content-type") == "text/plain"
    assert upstream.requests[0].body == body


async def test_chunked_request_body_is_forwarded_whole(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"ok": True})])
    body = json.dumps({"model": "m", "input": "北京" * 5000}, ensure_ascii=False).encode()

    async def pieces() -> Any:
        for i in range(0, len(body), 777):
            yield body[i : i + 777]

    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", content=pieces())
    assert response.status_code == 200
    assert upstream.requests[0].body == body


async def test_expect_100_continue(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream([Script.json({"ok": True})])
    body = b'{"model": "m"}'
    async with proxai_for(upstream) as px:
        response = await raw_exchange(
            px.url,
            b"POST /v1/responses HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
            b"expect: 100-continue\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body,
        )
    assert b"HTTP/1.1 200 " in response
    assert upstream.requests[0].body == body
    assert upstream.requests[0].header("expect") is None


async def test_huge_headers_are_refused_not_a_crash(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px:
        response = await raw_exchange(
            px.url,
            b"GET /v1/models HTTP/1.1\r\nhost: localhost\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n",
        )
        healthy = await raw_exchange(
            px.url, b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
        )
    assert response == b"" or response.startswith((b"HTTP/1.1 4", b"HTTP/1.0 4"))
    assert upstream.requests == []
    assert healthy.startswith(b"HTTP/1.1 200 ")  # the server carries on


async def test_http2_prior_knowledge_streams_byte_exact(
    start_upstream: Any, proxai_for: Any
) -> None:
    pytest.importorskip("h2")
    upstream = await start_upstream([Script.sse(TURN1_EVENTS, chunk_size=100)])
    async with proxai_for(upstream) as px, httpx.AsyncClient(http1=False, http2=True) as client:
        response = await client.post(
            px.base_url + "/responses", json={"model": "m", "stream": True}
        )
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.http_version == "HTTP/2"
    assert response.content == turn_bytes(TURN1_EVENTS)
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_http2_body_cut_short_does_not_leave_the_client_hanging(
    start_upstream: Any, proxai_for: Any
) -> None:
    # Hypercorn cannot reset an HTTP/2 stream for an app, so proxai ends it (the JSON
    # is visibly incomplete) instead of leaving the client waiting for its own timeout.
    script = Script(
        headers=(("content-type", "application/json"),), steps=[Send(b'{"data":['), Reset()]
    )
    upstream = await start_upstream([script])
    async with proxai_for(upstream) as px, httpx.AsyncClient(http1=False, http2=True) as client:
        with trio.fail_after(3):
            response = await client.post(px.base_url + "/embeddings", json={})
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.content == b'{"data":['
    assert outcome.kind is OutcomeKind.UPSTREAM_RESET


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=200))
def test_arbitrary_request_bytes_never_get_a_500(body: bytes) -> None:
    async def main() -> None:
        from proxai.testing import ScriptedUpstream, open_proxai

        upstream = ScriptedUpstream([Script.json({})])
        async with trio.open_nursery() as nursery:
            await nursery.start(upstream.serve)
            async with open_proxai(upstream.base_url) as px, httpx.AsyncClient() as client:
                for path in ("/responses", "/chat/completions"):
                    response = await client.post(px.base_url + path, content=body)
                    assert response.status_code in (200, 400), response.text
            nursery.cancel_scope.cancel()

    trio.run(main)
