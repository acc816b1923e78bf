"""OpenTelemetry ([telemetry]): spans and GenAI metrics as a real OTLP receiver gets them.

proxai runs on hypercorn in front of scripted upstreams, exporting over OTLP/HTTP to
:class:`~proxai.testing.otlp.OtlpReceiver`, which decodes the protobuf payloads with
the official ``opentelemetry-proto`` messages. Leaving ``proxai_for`` shuts proxai's
lifespan down, which flushes the exporters: every span and metric is then received.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import FrameType
from typing import Any

import httpx
import pytest
import trio

from proxai.config import ConfigError, TelemetryConfig
from proxai.config_file import load_config
from proxai.ops.genai import usage_attributes
from proxai.ops.request_log import log_fields
from proxai.outcome import AttemptRecord, Outcome
from proxai.protocols.chat.reader import chat_usage
from proxai.protocols.messages.reader import messages_usage
from proxai.protocols.responses.reader import responses_usage
from proxai.testing import Script, Stall
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.otlp import OtlpReceiver, ReceivedSpan
from proxai.testing.seed import (
    ANSWER_DELTAS,
    QUESTION,
    TURN1_EVENTS,
    TURN1_REQUEST,
    TURN2_EVENTS,
    TURN2_REQUEST,
    WEATHER_ARGUMENTS,
    WEATHER_RESULT,
    chat_seed_responder,
    seed_responder,
    turn1_stalled_script,
)

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
CLIENT_KEY = "sk-client-telemetry-secret-0123456789"
UPSTREAM_KEY = "sk-upstream-telemetry-secret-9876543210"
USAGE = {
    "input_tokens": 120,
    "output_tokens": 45,
    "total_tokens": 165,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens_details": {"reasoning_tokens": 10},
}
TURN2_WITH_USAGE = [
    *TURN2_EVENTS[:-1],
    {**TURN2_EVENTS[-1], "response": {**TURN2_EVENTS[-1]["response"], "usage": USAGE}},
]


@pytest.fixture
async def receiver(nursery: trio.Nursery) -> OtlpReceiver:
    otlp = OtlpReceiver()
    await nursery.start(otlp.serve)
    return otlp


def telemetry(receiver: OtlpReceiver, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "endpoint": receiver.endpoint, **extra}


def by_kind(spans: list[ReceivedSpan], kind: str) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.kind == kind), key=lambda s: s.start_ns)


def one(spans: list[ReceivedSpan], kind: str) -> ReceivedSpan:
    found = by_kind(spans, kind)
    assert len(found) == 1, found
    return found[0]


async def stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], **headers: str
) -> bytes:
    async with client.stream("POST", url, json=body, headers=headers) as response:
        return b"".join([chunk async for chunk in response.aiter_bytes()])


async def test_a_completed_stream_is_a_server_span_over_a_client_span_whose_context_went_upstream(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    def respond(request: Any) -> Script:
        if request.json().get("previous_response_id"):
            return Script.sse(TURN2_WITH_USAGE)
        return seed_responder(request)

    upstream = await start_upstream(respond)
    async with (
        proxai_for(upstream, telemetry=telemetry(receiver)) as px,
        httpx.AsyncClient() as client,
    ):
        await stream(
            client,
            px.base_url + "/responses",
            {**TURN2_REQUEST, "conversation": {"id": "conv_01"}},
            traceparent=TRACEPARENT,
            tracestate="vendor=kept",
        )
        [outcome] = await px.wait_for_outcomes(1)
    spans = receiver.spans
    server, client_span = one(spans, "SERVER"), one(spans, "CLIENT")
    assert server.name == client_span.name == "chat gpt-5.4"
    assert server.trace_id == client_span.trace_id == CLIENT_TRACE
    assert server.parent_span_id == CLIENT_SPAN  # the client's traceparent is the parent
    assert client_span.parent_span_id == server.span_id
    assert server.resource["service.name"] == "proxai"
    # The upstream got the attempt's context, proxai's request id beside it.
    [sent] = upstream.requests
    assert sent.header("traceparent") == f"00-{CLIENT_TRACE}-{client_span.span_id}-01"
    assert sent.header("tracestate") == "vendor=kept"
    assert sent.header("x-proxai-request-id") == outcome.request_id
    genai = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5.4",
        "gen_ai.request.stream": True,
        "gen_ai.request.previous_response.id": "resp_01",
        "gen_ai.conversation.id": "conv_01",
        "gen_ai.response.id": "resp_02",
        "gen_ai.response.model": "gpt-5.4",
        "gen_ai.response.finish_reasons": ["completed"],
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 45,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.reasoning.output_tokens": 10,
    }
    assert server.attributes | genai == server.attributes
    assert client_span.attributes | genai == client_span.attributes
    assert server.attributes["proxai.request_id"] == outcome.request_id
    assert server.attributes["proxai.outcome"] == "completed"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["proxai.events"] == len(TURN2_EVENTS)
    assert server.attributes["proxai.duration"] > 0
    assert client_span.attributes["server.address"] == "127.0.0.1"
    assert client_span.attributes["server.port"] == upstream.port
    # The attempt's own time to its first event, measured (a clamp at 0 would pass a
    # `>= 0` check whatever it measured).
    [attempt] = outcome.attempts
    assert outcome.first_event_s is not None and outcome.total_s is not None
    ttfc = client_span.attributes["gen_ai.response.time_to_first_chunk"]
    assert ttfc == pytest.approx(outcome.first_event_s - attempt.started_s)
    assert 0 < ttfc < outcome.total_s
    assert "error.type" not in server.attributes and server.status == "UNSET"
    first = server.event("proxai.first_event")
    assert first is not None and server.start_ns <= first.time_ns <= server.end_ns
    assert server.event("proxai.stall") is None
    # The GenAI metrics came over the same exporter.
    duration = receiver.metric("gen_ai.client.inference.duration")
    assert duration is not None and duration.unit == "s"
    [point] = duration.points
    assert point.count == 1
    assert point.attributes["gen_ai.request.model"] == "gpt-5.4"
    assert point.attributes["gen_ai.provider.name"] == "openai"
    ttfc = receiver.metric("gen_ai.client.inference.time_to_first_chunk")
    per_chunk = receiver.metric("gen_ai.client.inference.time_per_output_chunk")
    assert ttfc is not None and ttfc.points[0].count == 1
    assert per_chunk is not None and per_chunk.points[0].count == 1
    tokens = {
        name: receiver.metric(f"gen_ai.client.inference.usage.{name}")
        for name in ("input_tokens", "output_tokens", "cache_read.input_tokens")
    }
    assert {n: m.points[0].value for n, m in tokens.items() if m} == {
        "input_tokens": 120,
        "output_tokens": 45,
        "cache_read.input_tokens": 100,
    }
    assert tokens["input_tokens"] and tokens["input_tokens"].unit == "{token}"


async def test_a_translated_stream_names_the_pair_and_the_upstreams_response(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream(chat_seed_responder)
    upstream_table = {"protocol": "openai_chat"}
    async with (
        proxai_for(upstream, upstream=upstream_table, telemetry=telemetry(receiver)) as px,
        httpx.AsyncClient() as client,
    ):
        await stream(client, px.base_url + "/responses", TURN1_REQUEST)
        await px.wait_for_outcomes(1)
    server, client_span = one(receiver.spans, "SERVER"), one(receiver.spans, "CLIENT")
    assert server.name == "chat gpt-5.4"
    assert server.attributes["proxai.translation"] == "responses→chat"
    assert "tools.web_search" in server.attributes["proxai.dropped"]
    # The upstream's words: its Chat completion's id, model and finish reason.
    assert client_span.attributes["gen_ai.response.id"] == "chatcmpl-1"
    assert client_span.attributes["gen_ai.response.model"] == "gpt-4o"
    assert client_span.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert client_span.parent_span_id == server.span_id
    assert server.attributes["proxai.outcome"] == "completed"


async def test_a_failover_is_two_sibling_client_spans(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    broken = await start_upstream([Script.json({"error": {"message": "down"}}, status=503)])
    backup = await start_upstream(seed_responder)
    tables = {
        "upstreams": {"backup": {"base_url": backup.base_url}},
        "routes": [{"model": "*", "upstreams": ["default", "backup"]}],
    }
    async with (
        proxai_for(broken, telemetry=telemetry(receiver), **tables) as px,
        httpx.AsyncClient() as client,
    ):
        await stream(client, px.base_url + "/responses", TURN1_REQUEST, traceparent=TRACEPARENT)
        await px.wait_for_outcomes(1)
    server = one(receiver.spans, "SERVER")
    first, second = by_kind(receiver.spans, "CLIENT")
    assert first.parent_span_id == second.parent_span_id == server.span_id
    assert first.end_ns <= second.start_ns  # one after the other, not nested
    assert (first.attributes["proxai.upstream"], first.attributes["proxai.attempt"]) == (
        "default",
        0,
    )
    assert (second.attributes["proxai.upstream"], second.attributes["proxai.attempt"]) == (
        "backup",
        1,
    )
    assert first.attributes["error.type"] == "503" and first.status == "ERROR"
    assert first.attributes["http.response.status_code"] == 503
    assert "error.type" not in second.attributes and second.status == "UNSET"
    assert server.attributes["proxai.attempts"] == 2
    assert server.attributes["proxai.upstream"] == "backup"
    # Each attempt sent its own span's context.
    assert broken.requests[0].header("traceparent") == f"00-{CLIENT_TRACE}-{first.span_id}-01"
    assert backup.requests[0].header("traceparent") == f"00-{CLIENT_TRACE}-{second.span_id}-01"
    duration = receiver.metric("gen_ai.client.inference.duration")
    assert duration is not None
    assert sorted(p.attributes.get("error.type", "") for p in duration.points) == ["", "503"]


async def test_a_stall_is_an_error_with_its_item_and_a_stall_event(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream([turn1_stalled_script()])
    async with (
        proxai_for(upstream, timeouts={"tool_arguments": 0.3}, telemetry=telemetry(receiver)) as px,
        httpx.AsyncClient() as client,
    ):
        await stream(client, px.base_url + "/responses", TURN1_REQUEST)
        await px.wait_for_outcomes(1)
    server, client_span = one(receiver.spans, "SERVER"), one(receiver.spans, "CLIENT")
    item = "function_call get_weather (call_weather_01)"
    for span in (server, client_span):
        assert span.attributes["error.type"] == "stalled_tool_arguments"
        assert span.status == "ERROR"
        stall = span.event("proxai.stall")
        assert stall is not None
        assert stall.attributes["proxai.stalled_item"] == item
        assert "stalled" in stall.attributes["proxai.detail"]
        first = span.event("proxai.first_event")
        assert first is not None and first.time_ns <= stall.time_ns <= span.end_ns
    assert server.attributes["proxai.stalled_item"] == item


async def test_a_client_that_hangs_up_ends_its_spans_without_an_error_status(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream([Script.sse(TURN1_EVENTS[:3], then=[Stall()])])
    async with (
        proxai_for(upstream, telemetry=telemetry(receiver)) as px,
        httpx.AsyncClient() as client,
    ):
        async with client.stream("POST", px.base_url + "/responses", json=TURN1_REQUEST) as r:
            async for _ in r.aiter_bytes():
                break  # the first bytes, then away
        [outcome] = await px.wait_for_outcomes(1)
    assert outcome.kind is not None and outcome.kind.value == "client_disconnected"
    server, client_span = one(receiver.spans, "SERVER"), one(receiver.spans, "CLIENT")
    for span in (server, client_span):
        assert span.attributes["error.type"] == "client_disconnected"
        assert span.status == "UNSET"  # the client's doing: no fault of proxai's
        assert span.event("proxai.stall") is None
    assert server.attributes["gen_ai.response.id"] == "resp_01"


async def test_no_prompt_output_argument_or_key_is_ever_exported(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream(seed_responder)
    tables = {
        "auth": {"keys": [CLIENT_KEY]},
        "upstream": {"api_key": UPSTREAM_KEY},
        "telemetry": telemetry(receiver, headers={"x-collector": "token"}),
    }
    async with proxai_for(upstream, **tables) as px, httpx.AsyncClient() as client:
        auth = {"authorization": f"Bearer {CLIENT_KEY}"}
        turn1 = await stream(client, px.base_url + "/responses", TURN1_REQUEST, **auth)
        turn2 = await stream(client, px.base_url + "/responses", TURN2_REQUEST, **auth)
        await px.wait_for_outcomes(2)
    assert b"get_weather" in turn1 and ANSWER_DELTAS[0].encode() in turn2  # they went through
    assert len(by_kind(receiver.spans, "SERVER")) == 2
    exported = b"".join(receiver.payloads)
    assert b"chat gpt-5.4" in exported and b"gen_ai.request.model" in exported
    assert receiver.metric("gen_ai.client.inference.duration") is not None
    secrets = [CLIENT_KEY, UPSTREAM_KEY, QUESTION, WEATHER_RESULT, *ANSWER_DELTAS]
    secrets += [WEATHER_ARGUMENTS, "查询指定城市的天气"]  # tool arguments, a tool's description
    for secret in secrets:
        assert secret.encode() not in exported, secret
    assert b"gen_ai.input.messages" not in exported
    assert b"gen_ai.output.messages" not in exported


async def test_sampling_zero_keeps_no_trace_but_still_propagates_and_counts(
    start_upstream: Any, proxai_for: Any, receiver: OtlpReceiver
) -> None:
    upstream = await start_upstream(seed_responder)
    tables = {"telemetry": telemetry(receiver, sampling_ratio=0.0)}
    async with proxai_for(upstream, **tables) as px, httpx.AsyncClient() as client:
        await stream(client, px.base_url + "/responses", TURN1_REQUEST)
        await px.wait_for_outcomes(1)
    assert receiver.spans == []
    traceparent = upstream.requests[0].header("traceparent")
    assert traceparent is not None
    assert int(traceparent.rsplit("-", 1)[1], 16) & 1 == 0  # not sampled, still sent
    duration = receiver.metric("gen_ai.client.inference.duration")
    assert duration is not None and duration.points[0].count == 1


def test_telemetry_off_loads_no_opentelemetry_module_and_starts_no_thread() -> None:
    """A whole request through proxai with the default config, in a fresh interpreter."""
    script = textwrap.dedent(
        """
        import sys, threading
        import httpx, trio
        from proxai.testing import ScriptedUpstream, open_proxai
        from proxai.testing.seed import TURN1_REQUEST, seed_responder

        async def main():
            upstream = ScriptedUpstream(seed_responder)
            async with trio.open_nursery() as nursery:
                await nursery.start(upstream.serve)
                async with open_proxai(upstream.base_url) as px:
                    async with httpx.AsyncClient() as client:
                        r = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
                        assert r.status_code == 200, r.status_code
                    await px.wait_for_outcomes(1)
                    threads = [t.name for t in threading.enumerate()]
                nursery.cancel_scope.cancel()
            loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
            print(loaded, [t for t in threads if "Otel" in t or "Batch" in t or "Periodic" in t])

        trio.run(main)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []"


def test_usage_of_each_api_maps_to_the_genai_names() -> None:
    chat = {
        "prompt_tokens": 50,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    assert usage_attributes(chat_usage(chat)) == {
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.reasoning.output_tokens": 5,
    }
    # Anthropic counts cache reads and writes apart from input_tokens; the conventions
    # count them in.
    messages = {
        "input_tokens": 10,
        "output_tokens": 7,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 40,
    }
    assert usage_attributes(messages_usage(messages)) == {
        "gen_ai.usage.input_tokens": 150,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_write.input_tokens": 40,
    }
    responses = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4}}
    assert usage_attributes(responses_usage(responses)) == {
        "gen_ai.usage.input_tokens": 9,
        "gen_ai.usage.cache_read.input_tokens": 4,
    }
    assert usage_attributes(responses_usage({"input_tokens": True, "output_tokens": "3"})) == {}
    assert usage_attributes(None) == {}


def test_telemetry_table_loads() -> None:
    config = load_config(
        None,
        overrides={
            "upstream": {"base_url": "http://127.0.0.1:1/v1"},
            "telemetry": {"enabled": True, "sampling_ratio": 0.25, "headers": {"x-k": "v"}},
        },
    )
    assert config.telemetry == TelemetryConfig(
        enabled=True, sampling_ratio=0.25, headers={"x-k": "v"}
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"sampling_ratio": 2}, "telemetry.sampling_ratio: must be a number from 0 to 1"),
        ({"protocol": "grpc"}, "telemetry.protocol: must be one of 'http/protobuf'"),
        ({"endpoint": "collector:4318"}, "telemetry.endpoint: must be an http:// or https:// URL"),
        ({"headers": {"bad name": "v"}}, "telemetry.headers: 'bad name' is not a valid"),
        ({"headers": {"x-k": "a\nb"}}, "telemetry.headers.x-k: the value contains a line break"),
    ],
)
def test_telemetry_table_is_checked(table: dict[str, Any], message: str) -> None:
    overrides = {"upstream": {"base_url": "http://127.0.0.1:1/v1"}, "telemetry": table}
    with pytest.raises(ConfigError) as raised:
        load_config(None, overrides=overrides)
    assert message in str(raised.value)


def test_headers_of_the_exporter_are_never_in_the_config_repr() -> None:
    assert "s3cret" not in repr(TelemetryConfig(headers={"x-honeycomb-team": "s3cret"}))


def test_the_log_and_the_metrics_name_tokens_one_way_whatever_the_api() -> None:
    """The request log's ``usage`` is the outcome's one shape: a Chat upstream's
    ``prompt_tokens`` is ``input_tokens`` there, as a Responses one's is."""
    chat = chat_usage({"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12})
    responses = responses_usage({"input_tokens": 7, "output_tokens": 5, "total_tokens": 12})
    for tokens in (chat, responses):
        fields = log_fields(Outcome("POST", "/v1/x", tokens=tokens))
        assert fields["usage"] == {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12}
    assert log_fields(Outcome("POST", "/v1/x"))["usage"] == {}


def _answer_of(deltas: int) -> list[dict[str, Any]]:
    """Turn 2's stream with ``deltas`` text deltas (its events renumbered)."""
    head, done, completed = TURN2_EVENTS[:2], TURN2_EVENTS[4], TURN2_EVENTS[5]
    pieces = [ANSWER_DELTAS[i % 2] for i in range(deltas)]
    middle = [{**TURN2_EVENTS[2], "delta": piece} for piece in pieces]
    events = [*head, *middle, {**done, "text": "".join(pieces)}, completed]
    return [{**event, "sequence_number": i} for i, event in enumerate(events)]


async def test_telemetry_does_nothing_per_event(receiver: OtlpReceiver) -> None:
    """The calls into OpenTelemetry and proxai's telemetry on the request's thread are
    as many for 100 events as for 10: events are counted by the relay, never spanned,
    recorded or attributed one by one (issue 34)."""
    streams = {n: _answer_of(n) for n in (10, 100)}

    def respond(request: Any) -> Script:
        return Script.sse(streams[int(request.json()["model"].rsplit("-", 1)[1])])

    def counted(path: str) -> bool:
        return "opentelemetry" in path or path.endswith(("ops/telemetry.py", "ops/genai.py"))

    calls: dict[int, int] = {}
    tables = {"telemetry": telemetry(receiver, sampling_ratio=1.0)}
    async with MemoryProxy(respond, **tables) as proxy:
        for n in streams:  # a model's first request creates its metrics' series
            await proxy.request({**TURN2_REQUEST, "model": f"m-{n}"})
        for n in streams:
            count = 0

            def profile(frame: FrameType, event: str, arg: object) -> None:
                nonlocal count
                if event == "call" and counted(frame.f_code.co_filename):
                    count += 1

            sys.setprofile(profile)
            try:
                exchange = await proxy.request({**TURN2_REQUEST, "model": f"m-{n}"})
            finally:
                sys.setprofile(None)
            assert exchange.outcome is not None and exchange.outcome.events == n + 4
            calls[n] = count
    assert 0 < calls[10] == calls[100], calls
    assert len(by_kind(receiver.spans, "SERVER")) == 4  # all of them sampled


@pytest.mark.parametrize("sampler", ["parentbased_always_on", "always_on"])
def test_an_attempts_headers_are_what_the_propagators_write(
    sampler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt's context is written directly, W3C style, as the default propagators
    would write it; its span is the request's child whether or not the sampler is asked."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan

    from proxai.ops.telemetry import Telemetry

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    tables = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "telemetry": {"enabled": True, "endpoint": "http://127.0.0.1:9", "metrics": False},
    }
    telemetry = Telemetry(load_config(None, overrides=tables))
    try:
        headers = [(b"traceparent", TRACEPARENT.encode()), (b"tracestate", b"vendor=kept")]
        trace_ = telemetry.request(headers, Outcome("POST", "/v1/responses"))
        sent = dict(trace_.attempt_started(AttemptRecord("default", 0.0), 0, headers))
        attempt = trace_._attempts[0].span
        assert attempt.parent == trace_.span.context
        assert attempt.context.trace_id == int(CLIENT_TRACE, 16)
        written: dict[str, str] = {}
        within = trace.set_span_in_context(NonRecordingSpan(attempt.context))
        telemetry.propagator.inject(written, context=within)
        assert sent == {n.encode(): v.encode() for n, v in written.items()}
        assert sent[b"tracestate"] == b"vendor=kept"
    finally:
        telemetry.shutdown()


def _telemetry_to_nowhere() -> Any:
    from proxai.ops.telemetry import Telemetry

    tables = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "telemetry": {"enabled": True, "endpoint": "http://127.0.0.1:9", "metrics": False},
    }
    return Telemetry(load_config(None, overrides=tables))


def test_sdk_disabled_records_no_span_and_passes_the_clients_context_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry = _telemetry_to_nowhere()
    ended: list[Any] = []
    monkeypatch.setattr(telemetry._processor, "on_end", ended.append)
    try:
        headers = [(b"traceparent", TRACEPARENT.encode())]
        outcome = Outcome("POST", "/v1/responses")
        trace_ = telemetry.request(headers, outcome)
        sent = dict(trace_.attempt_started(AttemptRecord("default", 0.0), 0, headers))
        assert sent[b"traceparent"] == TRACEPARENT.encode()
        assert (
            dict(
                telemetry.request([], outcome).attempt_started(AttemptRecord("default", 0.0), 0, [])
            )
            == {}
        )
        trace_.finish(outcome)
        assert ended == []
    finally:
        telemetry.shutdown()


def test_span_limits_from_the_environment_still_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    telemetry = _telemetry_to_nowhere()
    ended: list[Any] = []
    monkeypatch.setattr(telemetry._processor, "on_end", ended.append)
    try:
        outcome = Outcome("POST", "/v1/responses", request_id="req_0123456789")
        telemetry.request([], outcome).finish(outcome)
        [span] = ended
        assert span.attributes["proxai.request_id"] == "req_"
    finally:
        telemetry.shutdown()
