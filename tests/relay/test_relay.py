"""The relay end to end: real hypercorn, real httpx, the scripted upstream, on loopback."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from proxai.errors import ErrorShape
from proxai.outcome import Outcome, OutcomeKind
from proxai.relay.messages import ToWriter
from proxai.relay.writer import Writer
from proxai.testing import Close, Reset, Script, Send, Sleep, Stall, sse_event
from proxai.testing.seed import (
    TURN1_EVENTS,
    TURN1_REQUEST,
    TURN2_EVENTS,
    TURN2_REQUEST,
    seed_responder,
    turn_bytes,
)

TURN1 = turn_bytes(TURN1_EVENTS)
TURN2 = turn_bytes(TURN2_EVENTS)


async def test_seed_turns_are_relayed_byte_for_byte(start_upstream: Any, proxai_for: Any) -> None:
    upstream = await start_upstream(seed_responder)
    async with proxai_for(upstream) as px, httpx.AsyncClient(base_url=px.base_url) as client:
        for request, expected in ((TURN1_REQUEST, TURN1), (TURN2_REQUEST, TURN2)):
            body = json.dumps(request, ensure_ascii=False, indent=1).encode()
            response = await client.post(
                "/responses", content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            assert response.content == expected
        outcomes = await px.wait_for_outcomes(2)
    # request bodies reach the upstream unchanged (not re-serialized)
    assert (
        upstream.requests[0].body
        == json.dumps(TURN1_REQUEST, ensure_ascii=False, indent=1).encode()
    )
    assert upstream.requests[1].json() == TURN2_REQUEST
    assert [o.kind for o in outcomes] == [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED]
    assert [o.events for o in outcomes] == [len(TURN1_EVENTS), len(TURN2_EVENTS)]
    assert outcomes[0].bytes_in == outcomes[0].bytes_out == len(TURN1)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64])
async def test_arbitrary_upstream_chunking_is_relayed_exactly(
    start_upstream: Any, proxai_for: Any, chunk_size: int
) -> None:
    # CRLF and a comment too, cut into tiny pieces: a CRLF or a UTF-8 sequence can be split.
    stream = TURN1.replace(b"\n", b"\r\n") + b": ping\r\n\r\n"
    upstream = await start_upstream([Script.sse([stream], chunk_size=chunk_size)])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        assert response.content == stream


async def test_client_never_receives_half_an_event(start_upstream: Any, proxai_for: Any) -> None:
    """Each network read on the client side ends at an event boundary, even when the
    upstream pauses mid-event."""
    event = sse_event({"type": "response.output_text.delta", "delta": "北京"})
    done = sse_event(TURN2_EVENTS[-1])
    cut = len(event) // 2
    steps = [
        Send(event[:cut]),
        Sleep(0.05),
        Send(event[cut:] + event[:3]),
        Sleep(0.05),
        Send(event[3:] + done[:5]),
        Sleep(0.05),
        Send(done[5:]),
    ]
    upstream = await start_upstream([Script(steps=steps)])
    async with (
        proxai_for(upstream) as px,
        httpx.AsyncClient() as client,
        client.stream("POST", px.base_url + "/responses", json={}) as response,
    ):
        pieces = [chunk async for chunk in response.aiter_raw()]
    assert b"".join(pieces) == event + event + done
    assert pieces == [event, event, done]


async def test_openai_sdk_parses_the_relayed_stream(start_upstream: Any, proxai_for: Any) -> None:
    openai = pytest.importorskip("openai")
    upstream = await start_upstream(seed_responder)
    async with proxai_for(upstream) as px:

        def drive() -> tuple[list[str], str, str]:
            client = openai.OpenAI(base_url=px.base_url, api_key="sk-client", max_retries=0)
            types, arguments = [], ""
            for event in client.responses.create(**TURN1_REQUEST):
                types.append(event.type)
                if event.type == "response.function_call_arguments.delta":
                    arguments += event.delta
            text = ""
            for event in client.responses.create(**TURN2_REQUEST):
                if event.type == "response.output_text.delta":
                    text += event.delta
            return types, arguments, text

        types, arguments, text = await trio.to_thread.run_sync(drive)
    assert types == [e["type"] for e in TURN1_EVENTS]
    assert json.loads(arguments) == {"city": "北京", "date": "today"}
    assert text == TURN2_EVENTS[4]["text"]
    # the client's key stays with proxai; the upstream sees the configured one
    assert {r.header("authorization") for r in upstream.requests} == {"Bearer sk-upstream-test"}


async def test_openai_sdk_non_streaming_and_chat_completions(
    start_upstream: Any, proxai_for: Any
) -> None:
    openai = pytest.importorskip("openai")
    response_body = {
        "id": "resp_9",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-5.4",
        "output": [],
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }
    chat_chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
    }
    chat_stream = sse_event(chat_chunk, event="") + b"data: [DONE]\n\n"
    upstream = await start_upstream([Script.json(response_body), Script(steps=[Send(chat_stream)])])
    async with proxai_for(upstream) as px:

        def drive() -> tuple[str, list[str]]:
            client = openai.OpenAI(base_url=px.base_url, api_key="sk-client", max_retries=0)
            rid = client.responses.create(model="gpt-5.4", input="hi").id
            chunks = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            return rid, [c.choices[0].delta.content for c in chunks]

        rid, contents = await trio.to_thread.run_sync(drive)
    assert rid == "resp_9"
    assert contents == ["hi"]
    assert [r.target for r in upstream.requests] == ["/v1/responses", "/v1/chat/completions"]


async def test_headers_both_ways(start_upstream: Any, proxai_for: Any) -> None:
    script = Script.sse(
        TURN2_EVENTS,
        headers=(
            ("content-type", "text/event-stream; charset=utf-8"),
            ("x-request-id", "req_123"),
            ("openai-processing-ms", "42"),
            ("x-ratelimit-remaining-requests", "99"),
            ("retry-after", "1"),
            ("keep-alive", "timeout=5"),
            ("x-custom", "kept"),
        ),
    )
    upstream = await start_upstream([script])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/responses",
            json={"model": "m"},
            headers={
                "authorization": "Bearer sk-client-secret",
                "openai-beta": "responses=v1",
                "x-stainless-lang": "python",
                "connection": "keep-alive, x-hop",
                "x-hop": "dropped",
                "proxy-authorization": "Basic abc",
                "accept-encoding": "gzip",
            },
        )
    assert response.headers["x-request-id"] == "req_123"
    assert response.headers["openai-processing-ms"] == "42"
    assert response.headers["x-ratelimit-remaining-requests"] == "99"
    assert response.headers["retry-after"] == "1"
    assert response.headers["x-custom"] == "kept"
    assert "keep-alive" not in response.headers
    (request,) = upstream.requests
    assert request.header("authorization") == "Bearer sk-upstream-test"
    assert request.header("openai-beta") == "responses=v1"
    assert request.header("x-stainless-lang") == "python"
    assert request.header("x-hop") is None
    assert request.header("proxy-authorization") is None
    assert request.header("accept-encoding") == "identity"
    assert "sk-client-secret" not in str(request.headers)


async def test_no_configured_key_means_no_authorization_upstream(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"ok": True})])
    async with proxai_for(upstream, api_key=None) as px, httpx.AsyncClient() as client:
        await client.get(px.base_url + "/models", headers={"authorization": "Bearer sk-client"})
    assert upstream.requests[0].header("authorization") is None


async def test_other_v1_requests_are_forwarded_unchanged(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({"data": []}), Script.json({"deleted": True})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        listed = await client.get(px.base_url + "/models?limit=5&after=a%20b")
        deleted = await client.request(
            "DELETE", px.base_url + "/responses/resp_1", content=b"raw-not-json"
        )
    assert listed.json() == {"data": []}
    assert listed.headers["content-length"] == str(len(b'{"data":[]}'))
    assert deleted.json() == {"deleted": True}
    first, second = upstream.requests
    assert (first.method, first.target) == ("GET", "/v1/models?limit=5&after=a%20b")
    assert (second.method, second.target, second.body) == (
        "DELETE",
        "/v1/responses/resp_1",
        b"raw-not-json",
    )


@pytest.mark.parametrize(
    "target", ["/v1/files/a%2Fb/content", "/v1/files/a%3Fx=1", "/v1/vector_stores/vs%201?q=%22x%22"]
)
async def test_the_path_goes_out_as_the_client_encoded_it(
    start_upstream: Any, proxai_for: Any, target: str
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        url = httpx.URL(px.url).copy_with(raw_path=target.encode())
        response = await client.get(url)
    assert response.status_code == 200
    assert upstream.requests[0].target == target


async def raw_get(url: str, target: str) -> bytes:
    """A GET sent byte for byte (httpx would normalize a literal dot segment away)."""
    parsed = httpx.URL(url)
    assert parsed.port is not None
    stream = await trio.open_tcp_stream(parsed.host, parsed.port)
    async with stream:
        request = f"GET {target} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
        await stream.send_all(request.encode())
        response = b""
        while chunk := await stream.receive_some():
            response += chunk
    return response


@pytest.mark.parametrize(
    "target", ["/v1/files/../../admin", "/v1/files/%2e%2e/%2E%2E/admin", "/v1/./x", "/v1/a/%2E/b"]
)
async def test_dot_segments_cannot_climb_out_of_the_upstream(
    start_upstream: Any, proxai_for: Any, target: str
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px:
        response = await raw_get(px.url, target)
    assert response.startswith(b"HTTP/1.1 400 ")
    assert b'"code":"invalid_path"' in response
    assert upstream.requests == []


async def test_upstream_error_status_body_and_headers_pass_through(
    start_upstream: Any, proxai_for: Any
) -> None:
    error = {
        "error": {
            "message": "Rate limit",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    upstream = await start_upstream(
        [Script.json(error, status=429, headers=(("retry-after", "7"), ("x-request-id", "req_e")))]
    )
    # Retries off: this is about relaying an upstream's error (test_retries covers them).
    retries = {"max_attempts": 1}
    async with proxai_for(upstream, retries=retries) as px, httpx.AsyncClient() as client:
        response = await client.post(
            px.base_url + "/responses", json={"model": "m", "stream": True}
        )
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 429
    assert response.json() == error
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-request-id"] == "req_e"
    assert outcome.kind is OutcomeKind.UPSTREAM_ERROR


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "not valid JSON"),
    ],
)
async def test_invalid_json_is_refused_before_the_upstream(
    start_upstream: Any, proxai_for: Any, body: bytes, fragment: str
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        for path in ("/responses", "/chat/completions"):
            response = await client.post(px.base_url + path, content=body)
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["code"] == "invalid_json"
            assert fragment in error["message"]
            assert set(error) == {"message", "type", "param", "code"}
    assert upstream.requests == []


async def test_body_over_the_limit_is_refused_with_413(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with (
        proxai_for(upstream, server={"max_request_body_bytes": 1000}) as px,
        httpx.AsyncClient() as client,
    ):
        declared = await client.post(px.base_url + "/responses", content=b"x" * 1001)

        async def endless() -> Any:
            for _ in range(10_000):  # 10 MB, chunked: no Content-Length to refuse up front
                yield b"y" * 1000

        streamed = await client.post(px.base_url + "/responses", content=endless())
        fits = await client.post(
            px.base_url + "/responses", content=b'{"a": "' + b"z" * 900 + b'"}'
        )
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
    assert fits.status_code == 200
    assert len(upstream.requests) == 1


async def test_unreachable_upstream_is_502(proxai_for: Any) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    async with proxai_for(f"http://127.0.0.1:{port}/v1") as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json={"model": "m"})
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "server_error"
    assert response.json()["error"]["code"] == "upstream_unreachable"
    assert outcome.kind is OutcomeKind.UPSTREAM_UNREACHABLE


@pytest.mark.parametrize(
    ("ending", "code", "kind"),
    [
        (Close(), "upstream_closed", OutcomeKind.UPSTREAM_EOF),
        (Reset(), "upstream_reset", OutcomeKind.UPSTREAM_RESET),
    ],
)
async def test_upstream_closing_before_headers_is_502(
    start_upstream: Any, proxai_for: Any, ending: Any, code: str, kind: OutcomeKind
) -> None:
    upstream = await start_upstream([Script(before_head=[ending])])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json={})
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == code
    assert outcome.kind is kind


async def test_upstream_reset_mid_responses_stream_gets_a_terminal(
    start_upstream: Any, proxai_for: Any
) -> None:
    events = [sse_event(e) for e in TURN1_EVENTS[:5]]
    upstream = await start_upstream(
        [Script.sse(events, then=[Send(b"event: partial\nda"), Reset()])]
    )
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json={})
        (outcome,) = await px.wait_for_outcomes(1)
    # the unfinished event is dropped; proxai's error and response.failed follow at a boundary
    body = response.content
    assert body.startswith(b"".join(events) + b"event: error\ndata: ")
    assert b"event: partial" not in body
    assert body.endswith(b"\n\n") and b"event: response.failed\ndata: " in body
    assert outcome.kind is OutcomeKind.UPSTREAM_RESET


@pytest.mark.parametrize(
    ("path", "script"),
    [
        # an event stream no observer knows (a vendor route): the last event unfinished
        (
            "/vendor/stream",
            Script.sse([b'data: {"choices":[]}\n\n'], then=[Send(b"data: {"), Reset()]),
        ),
        # a chunked JSON body (no Content-Length) cut short
        (
            "/embeddings",
            Script(
                headers=(("content-type", "application/json"),), steps=[Send(b'{"data":['), Reset()]
            ),
        ),
    ],
)
async def test_a_body_cut_short_upstream_is_broken_for_the_client_too(
    start_upstream: Any, proxai_for: Any, path: str, script: Script
) -> None:
    # No observer can append an error in this body's own shape: proxai ends its
    # response broken, as the upstream's was, instead of as a whole 200.
    upstream = await start_upstream([script])
    received = b""
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("POST", px.base_url + path, json={}) as response:
                async for piece in response.aiter_raw():
                    received += piece
        (outcome,) = await px.wait_for_outcomes(1)
    assert received == script.body  # every byte the upstream sent, then the break
    assert outcome.kind is OutcomeKind.UPSTREAM_RESET


async def test_a_body_reset_before_its_first_byte_is_a_502(
    start_upstream: Any, proxai_for: Any
) -> None:
    script = Script(headers=(("content-type", "application/json"),), steps=[Reset()])
    upstream = await start_upstream([script])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/embeddings", json={})
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_reset"
    assert outcome.kind is OutcomeKind.UPSTREAM_RESET


async def test_healthz_and_unknown_paths(proxai_for: Any) -> None:
    async with proxai_for("http://127.0.0.1:9/v1") as px, httpx.AsyncClient() as client:
        health = await client.get(px.url + "/healthz")
        missing = await client.get(px.url + "/nope")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error"


async def test_client_disconnect_closes_the_upstream_at_once(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.sse(TURN1_EVENTS[:5], then=[Stall()])])
    async with proxai_for(upstream) as px:
        async with (
            httpx.AsyncClient() as client,
            client.stream("POST", px.base_url + "/responses", json={}) as response,
        ):
            async for chunk in response.aiter_raw():
                if chunk.count(b"\n\n") >= 1:
                    break
            hung_up = trio.current_time()
        closed_at = await upstream.requests[0].wait_closed()
        (outcome,) = await px.wait_for_outcomes(1)
    # At once: on real sockets, hypercorn's news of the hang-up reaches the relay, which
    # lets the upstream go, not at any deadline (idle's 120 s); the instant itself is exact
    # on a virtual clock (test_client_disconnect_mid_stall_ends_everything_at_once).
    assert closed_at - hung_up < 5
    assert outcome.kind is OutcomeKind.CLIENT_DISCONNECTED


async def test_a_hundred_concurrent_streams_are_byte_exact(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream(seed_responder)
    results: list[bytes] = []
    async with proxai_for(upstream) as px:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:

            async def one(i: int) -> None:
                request = TURN2_REQUEST if i % 2 else TURN1_REQUEST
                response = await client.post(px.base_url + "/responses", json=request)
                results.append(response.content)

            async with trio.open_nursery() as nursery:
                for i in range(100):
                    nursery.start_soon(one, i)
        outcomes = await px.wait_for_outcomes(100)
    assert sorted(results) == sorted([TURN1] * 50 + [TURN2] * 50)
    assert all(o.kind is OutcomeKind.COMPLETED for o in outcomes)


async def test_a_writer_whose_observer_ended_without_a_word_leaves_the_request_alone() -> None:
    # The observer closes its channel unsent only when the reader failed. The writer must
    # not cancel the request then: the reader may be in a checkpoint of its cleanup, and
    # a Cancelled there would replace its error (seen as a lost RuntimeError, 1 run in 8).
    class Nowhere:
        async def send_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
            raise AssertionError("nothing to send")

        async def send_body(self, data: bytes, *, more: bool = True, frames: Any = ()) -> None:
            raise AssertionError("nothing to send")

        async def wait_disconnect(self) -> None:
            await trio.sleep_forever()

        sends = None

    writer = Writer(
        Nowhere(),
        Outcome("POST", "/v1/responses"),
        client_write=1.0,
        error_shape=ErrorShape.OPENAI,
        response_headers=(),
        tap=None,
    )
    send, receive = trio.open_memory_channel[ToWriter](1)
    send.close()
    scope = trio.CancelScope()
    await writer.run(receive, scope)
    assert not scope.cancel_called
