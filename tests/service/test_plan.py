"""Planning without an app: a request's head, body and the config in, a plan out.

``proxai.service.plan`` decides what each upstream of a route is sent (the client's
bytes, rewritten, or translated) and what proxai answers itself; these tests run it
alone, with no ASGI, no upstream and no relay.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import attrs
import orjson
import pytest

from proxai.config import TimeoutsConfig, UpstreamKind
from proxai.config_file import load_config
from proxai.errors import ProxyError
from proxai.policy.target import check_path
from proxai.protocols import table
from proxai.protocols.chat.observer import ChatObserver
from proxai.protocols.messages.observer import MessagesObserver
from proxai.protocols.names import WireApi
from proxai.protocols.observer import PassThroughObserver
from proxai.protocols.responses.observer import ResponsesObserver
from proxai.protocols.table import APIS, PathPattern
from proxai.service.plan import REQUEST_ID_HEADER, Incoming, Plan, Planner, read_head
from proxai.testing.seed import TURN1_REQUEST
from proxai.translate.pairs import PAIRS, translate
from proxai.translate.requests import estimate_input_tokens

UPSTREAMS = {
    "openai": {"base_url": "http://openai.test/v1", "protocol": "openai"},
    "chat": {"base_url": "http://chat.test/v1", "protocol": "openai_chat"},
    "claude": {"base_url": "http://claude.test/v1", "protocol": "anthropic_messages"},
    "responses": {"base_url": "http://responses.test/v1", "protocol": "openai_responses"},
}

CHAT_REQUEST: dict[str, Any] = {
    "model": "m",
    "stream": True,
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "the weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ],
    "max_tokens": 100,
}

MESSAGES_REQUEST: dict[str, Any] = {
    "model": "m",
    "max_tokens": 100,
    "stream": True,
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "P"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ],
    "tools": [
        {
            "name": "weather",
            "description": "the weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ],
}

#: Stateless (TURN2_REQUEST's previous_response_id cannot be translated), with every kind of item.
RESPONSES_REQUEST: dict[str, Any] = {
    "model": "m",
    "stream": True,
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "weather",
            "description": "the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ],
    "store": False,
}

REQUESTS: dict[WireApi, list[dict[str, Any]]] = {
    WireApi.RESPONSES: [TURN1_REQUEST, RESPONSES_REQUEST],
    WireApi.CHAT: [CHAT_REQUEST],
    WireApi.MESSAGES: [MESSAGES_REQUEST],
}
PATHS = {api.wire: api.path.template for api in APIS}


def planner(routes: list[dict[str, Any]] | None = None, **upstreams: dict[str, Any]) -> Planner:
    config = load_config(
        overrides={"upstreams": upstreams or UPSTREAMS, "routes": routes or []}, environ={}
    )
    return Planner(config)


def head(
    p: Planner,
    path: str,
    method: str = "POST",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> Incoming:
    return read_head(
        method,
        path,
        path.encode(),
        b"",
        headers or [],
        request_id="req_1",
        http2=False,
        configured=p.router.has_protocol,
    )


def plan_of(p: Planner, path: str, body: dict[str, Any] | bytes) -> tuple[Incoming, Plan]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    incoming = head(p, path)
    return incoming, p.plan(incoming, raw, p.prepare(incoming, raw))


def sent(plan: Plan, name: str) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(plan.targets[name].body)
    return body


def route(model: str, *names: str, upstream_model: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"model": model, "upstreams": list(names)}
    if upstream_model is not None:
        entry["upstream_model"] = upstream_model
    return entry


# -- the head -------------------------------------------------------------------------------


def test_the_head_names_the_api_the_upstream_kind_and_the_error_shape() -> None:
    p = planner()
    for api in APIS:
        incoming = head(p, api.path.template)
        assert (incoming.api, incoming.kind, incoming.sdk) == (api, api.upstream, api.sdk)
    models = head(p, "/v1/models", "GET")
    assert models.api is None and models.kind is UpstreamKind.OPENAI


def test_the_head_replaces_the_clients_request_id_and_normalizes_the_route_path() -> None:
    p = planner()
    incoming = read_head(
        "POST",
        "/v1//responses/",
        b"/v1//responses/",
        b"",
        [(REQUEST_ID_HEADER, b"client-chosen"), (b"x-other", b"1")],
        request_id="req_proxai",
        http2=True,
        configured=p.router.has_protocol,
    )
    assert incoming.route_path == "/v1/responses"
    assert incoming.api is not None and incoming.api.wire is WireApi.RESPONSES
    assert incoming.headers == [(b"x-other", b"1"), (REQUEST_ID_HEADER, b"req_proxai")]


def test_an_anthropic_sdks_request_on_no_apis_path_goes_to_anthropic_when_there_is_one() -> None:
    marked = [(b"anthropic-version", b"2023-06-01")]
    with_claude = planner()
    assert head(with_claude, "/v1/models", "GET", marked).kind is UpstreamKind.ANTHROPIC_MESSAGES
    without = planner(openai=UPSTREAMS["openai"])
    assert head(without, "/v1/models", "GET", marked).kind is UpstreamKind.OPENAI


# -- what each upstream is sent -------------------------------------------------------------


@pytest.mark.parametrize("wire", list(WireApi))
def test_a_native_upstream_gets_the_clients_bytes_and_its_apis_observer(wire: WireApi) -> None:
    native = {WireApi.RESPONSES: "openai", WireApi.CHAT: "chat", WireApi.MESSAGES: "claude"}[wire]
    p = planner([route("*", native)])
    raw = orjson.dumps(REQUESTS[wire][0]) + b" "  # a byte no re-serialization would keep
    _, plan = plan_of(p, PATHS[wire], raw)
    target = plan.targets[native]
    assert target.body is raw and target.translator is None and target.raw_path is None
    observer = target.observer_factory(TimeoutsConfig())
    expected = {
        WireApi.RESPONSES: ResponsesObserver,
        WireApi.CHAT: ChatObserver,
        WireApi.MESSAGES: MessagesObserver,
    }
    assert isinstance(observer, expected[wire])
    assert plan.first_byte_applies is True and plan.local is None


def test_a_translated_upstream_gets_its_apis_request_path_and_a_translator() -> None:
    p = planner([route("*", "chat", "claude")])
    _, plan = plan_of(p, "/v1/responses", TURN1_REQUEST)
    assert list(plan.targets) == ["chat", "claude"]
    chat, claude = plan.targets["chat"], plan.targets["claude"]
    assert chat.raw_path == b"/v1/chat/completions" and chat.query == b""
    assert claude.raw_path == b"/v1/messages" and claude.query == b""
    assert chat.translator is not None and claude.translator is not None
    assert "messages" in sent(plan, "chat") and "max_tokens" in sent(plan, "claude")
    assert isinstance(chat.observer_factory(TimeoutsConfig()), ChatObserver)
    assert isinstance(claude.observer_factory(TimeoutsConfig()), MessagesObserver)


def test_a_model_rewrite_reaches_native_and_translated_upstreams_alike() -> None:
    p = planner([route("gpt-*", "openai", "claude", upstream_model="big")])
    _, plan = plan_of(p, "/v1/responses", {**TURN1_REQUEST, "model": "gpt-x"})
    assert sent(plan, "openai")["model"] == "big"
    assert sent(plan, "claude")["model"] == "big"
    assert plan.route.upstream_model == "big" and plan.route.name is not None


def test_a_request_without_a_stream_waits_for_its_answer_without_first_byte() -> None:
    p = planner([route("*", "openai")])
    _, plan = plan_of(p, "/v1/responses", {**TURN1_REQUEST, "stream": False})
    assert plan.first_byte_applies is False


def test_another_paths_body_is_passed_through_with_its_model_routed() -> None:
    p = planner([route("emb-*", "chat")])
    raw = b'{"model": "emb-1", "input": "x"}'
    incoming, plan = plan_of(p, "/v1/embeddings", raw)
    assert incoming.api is None and list(plan.targets) == ["chat"]
    target = plan.targets["chat"]
    assert target.body is raw
    assert isinstance(target.observer_factory(TimeoutsConfig()), PassThroughObserver)
    assert plan.first_byte_applies is False  # a body that asks for no stream


def test_a_bad_body_is_refused_with_its_field_named() -> None:
    p = planner()
    incoming = head(p, "/v1/chat/completions")
    with pytest.raises(ProxyError) as refused:
        p.prepare(incoming, b'{"model": 5, "messages": []}')
    assert refused.value.status == 400 and "model" in refused.value.message


def test_a_resumed_stream_with_no_upstream_that_speaks_its_api_is_a_404() -> None:
    p = planner(chat=UPSTREAMS["chat"])  # Chat only: a Responses stream cannot be resumed
    with pytest.raises(ProxyError) as missing:
        p.route(head(p, "/v1/responses/resp_1", "GET"), None)
    assert missing.value.status == 404 and missing.value.code == "no_upstream"
    assert "no OpenAI-compatible upstream" in missing.value.message


# -- the body is parsed once, and each upstream's rewrites are its own ----------------------


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """What orjson.loads is given, wherever it is called."""
    given: list[Any] = []
    loads = orjson.loads

    def counted(data: Any) -> Any:
        given.append(data)
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counted)
    yield given


def test_the_body_is_parsed_once_whatever_the_upstreams(parsed: list[Any]) -> None:
    p = planner(
        [route("*", "openai", "chat", "claude", "responses", upstream_model="x")],
        openai={**UPSTREAMS["openai"], "normalize": {"system_to_instructions": True}},
        chat=UPSTREAMS["chat"],
        claude=UPSTREAMS["claude"],
        responses=UPSTREAMS["responses"],
    )
    raw = orjson.dumps(RESPONSES_REQUEST)
    incoming = head(p, "/v1/responses")
    plan = p.plan(incoming, raw, p.prepare(incoming, raw))
    assert [t.translator is None for t in plan.targets.values()] == [True, False, False, True]
    # Two native rewrites (model, instructions) and two translations: one parse of the
    # body (a translator parses tool-call arguments, which are strings in the body).
    assert [data for data in parsed if data == raw] == [raw]


def test_planning_leaves_the_clients_parsed_request_as_it_was() -> None:
    """Each upstream's rewrite (envelopes stripped, system moved, model replaced) is made
    on its own copy, and translators take the request without changing it: one parse
    serves every upstream."""
    p = planner(
        [route("*", "openai", "chat", "claude", upstream_model="x")],
        openai={**UPSTREAMS["openai"], "normalize": {"system_to_instructions": True}},
        chat=UPSTREAMS["chat"],
        claude=UPSTREAMS["claude"],
    )
    for wire, bodies in REQUESTS.items():
        for body in bodies:
            request = {**body}
            if wire is WireApi.RESPONSES:
                request["input"] = [{"role": "system", "content": "sys"}, *body["input"]]
            raw = orjson.dumps(request)
            incoming = head(p, PATHS[wire])
            prepared = p.prepare(incoming, raw)
            assert prepared.data is not None
            before = copy.deepcopy(prepared.data)
            p.plan(incoming, raw, prepared)
            assert prepared.data == before


@pytest.mark.parametrize(("client", "upstream"), sorted(PAIRS))
def test_a_translator_leaves_the_clients_request_as_it_was(
    client: WireApi, upstream: WireApi
) -> None:
    """What lets :mod:`proxai.service.plan` give every upstream the one parse."""
    options = load_config(overrides={"upstream": {"base_url": "http://u.test/v1"}}).upstream
    for body in REQUESTS[client]:
        data = orjson.loads(orjson.dumps(body))
        before = copy.deepcopy(data)
        translate(client, upstream, data, options.translation)
        assert data == before


# -- what proxai answers itself --------------------------------------------------------------


def test_count_tokens_is_answered_locally_when_the_first_upstream_speaks_no_messages() -> None:
    p = planner([route("*", "chat", "claude")])
    incoming, plan = plan_of(p, "/v1/messages/count_tokens", MESSAGES_REQUEST)
    assert incoming.api is None and incoming.kind is UpstreamKind.ANTHROPIC_MESSAGES
    assert plan.local is not None and plan.targets == {}
    assert orjson.loads(plan.local.body()) == {
        "input_tokens": estimate_input_tokens(MESSAGES_REQUEST)
    }
    assert plan.local.answer.detail == "count_tokens estimated by proxai"


def test_count_tokens_goes_to_an_anthropic_upstream_that_has_the_endpoint() -> None:
    p = planner([route("*", "claude", "chat")])
    raw = orjson.dumps(MESSAGES_REQUEST)
    _, plan = plan_of(p, "/v1/messages/count_tokens", raw)
    assert plan.local is None
    assert plan.targets["claude"].body is raw and plan.targets["chat"].body is raw


def test_count_tokens_for_a_model_no_route_takes_is_a_404() -> None:
    p = planner([route("gpt-*", "claude")])
    with pytest.raises(ProxyError) as missing:
        plan_of(p, "/v1/messages/count_tokens", MESSAGES_REQUEST)
    assert missing.value.status == 404 and missing.value.code == "model_not_found"


# -- path patterns ---------------------------------------------------------------------------


def test_a_path_that_holds_the_model_routes_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """An API whose path names the model (as Gemini's does) is a row like the others:
    the model its path holds is the one routes match."""
    chat = next(api for api in APIS if api.wire is WireApi.CHAT)
    by_path = attrs.evolve(chat, path=PathPattern("/v1/models/{model}:chat"))
    monkeypatch.setattr(table, "APIS", (*APIS, by_path))
    p = planner([route("small-*", "chat"), route("*", "openai")])
    incoming = head(p, "/v1/models/small-1:chat")
    assert incoming.api is by_path and incoming.path_fields == {"model": "small-1"}
    body = {k: v for k, v in CHAT_REQUEST.items() if k != "model"}
    raw = orjson.dumps(body)
    prepared = p.prepare(incoming, raw)
    assert prepared.model == "small-1"
    assert list(p.plan(incoming, raw, prepared).targets) == ["chat"]


def test_only_the_served_prefixes_are_relayed() -> None:
    check_path("GET", "/v1/models", b"/v1/models")
    with pytest.raises(ProxyError) as outside:
        check_path("GET", "/v2/models", b"/v2/models")
    assert outside.value.status == 404 and "/v1/..." in outside.value.message
    check_path("POST", "/v1beta/models/g:x", b"/v1beta/models/g:x", ("/v1", "/v1beta"))


def test_a_path_pattern_can_hold_the_model() -> None:
    gemini = PathPattern("/v1beta/models/{model}:generateContent")
    assert gemini.match("/v1beta/models/gemini-2.5-pro:generateContent") == {
        "model": "gemini-2.5-pro"
    }
    assert gemini.match("/v1beta/models/a/b:generateContent") is None
    assert gemini.match("/v1beta/models/x:streamGenerateContent") is None
    assert gemini.format(model="g") == "/v1beta/models/g:generateContent"
    assert not gemini.literal and PathPattern("/v1/messages").literal
    messages = PathPattern("/v1/messages")
    assert messages.match("/v1/messages") == {}
    assert messages.holds("/v1/messages/count_tokens") and not messages.holds("/v1/messagesx")
