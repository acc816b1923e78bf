"""Routes: which upstreams a model goes to, and what start-up refuses or warns about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

from proxai.config import Config, ConfigError, UpstreamKind
from proxai.config_file import load_config, route_warnings
from proxai.errors import ProxyError
from proxai.policy.model_patterns import compile_pattern
from proxai.policy.routes import Route, Router
from proxai.protocols.names import WireApi
from proxai.protocols.table import UPSTREAM_PROTOCOLS
from proxai.testing import Script, chat_chunk
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_REQUEST
from proxai.translate.pairs import upstream_api


def route(router: Router, api: WireApi, model: str | None) -> Route:
    """The route of a generation request of ``api`` for ``model``."""
    return router.route_for(
        model,
        native=lambda kind: api in UPSTREAM_PROTOCOLS[kind].apis,
        serves=lambda kind: upstream_api(kind, api) is not None,
        missing="no upstream",
    )


UPSTREAMS = {
    "openai": {"base_url": "https://api.openai.com/v1"},
    "azure": {"base_url": "https://azure.example/v1"},
    "local": {"base_url": "http://127.0.0.1:11434/v1", "protocol": "openai_chat"},
    "claude": {"base_url": "https://api.anthropic.com/v1", "protocol": "anthropic_messages"},
}
ROUTES = [
    {"model": "gpt-5.4", "upstreams": ["azure"]},
    {"model": "gpt-*", "upstreams": ["openai", "azure"], "upstream_model": None},
    {"model": "re:^o[0-9]", "upstreams": ["openai"]},
    {"model": "claude-*", "upstreams": ["claude"]},
    {"model": "*", "upstreams": ["local"], "upstream_model": "qwen3"},
]


def config(routes: list[dict[str, Any]] = ROUTES, **tables: Any) -> Config:
    clean = [{k: v for k, v in r.items() if v is not None} for r in routes]
    return load_config(None, overrides={"upstreams": UPSTREAMS, "routes": clean, **tables})


@pytest.mark.parametrize(
    ("api", "model", "upstreams", "upstream_model"),
    [
        (WireApi.CHAT, "gpt-5.4", ("azure",), None),  # exact wins because it comes first
        (WireApi.CHAT, "gpt-5.4-mini", ("openai", "azure"), None),  # glob, whole name
        (WireApi.RESPONSES, "o3", ("openai",), None),  # regex
        (WireApi.CHAT, "o4-mini", ("openai",), None),
        (WireApi.CHAT, "foo-o3", ("local",), "qwen3"),  # ^ anchors the regex
        (WireApi.CHAT, "llama-3", ("local",), "qwen3"),  # catch-all
        (WireApi.CHAT, "GPT-5", ("local",), "qwen3"),  # globs are case-sensitive
        (WireApi.MESSAGES, "claude-opus-4", ("claude",), None),
    ],
)
def test_first_matching_route_wins(
    api: WireApi, model: str, upstreams: tuple[str, ...], upstream_model: str | None
) -> None:
    found = route(Router(config()), api, model)
    assert found.upstreams == upstreams
    assert found.upstream_model == upstream_model
    assert found.name is not None and found.name.startswith("routes[")


def test_the_first_matching_route_wins_whatever_the_protocol_of_its_upstreams() -> None:
    # "*" (an OpenAI-compatible Chat server) comes first: it takes Claude Code's
    # claude-opus-4 too, translated, though claude-* speaks Messages itself. The order
    # of the routes is the operator's word on where a model's requests may go.
    routes = [
        {"model": "*", "upstreams": ["local"]},
        {"model": "claude-*", "upstreams": ["claude"]},
    ]
    router = Router(config(routes))
    assert route(router, WireApi.MESSAGES, "claude-opus-4").upstreams == ("local",)
    assert route(router, WireApi.CHAT, "claude-opus-4").upstreams == ("local",)


def test_an_exact_route_to_a_chat_server_beats_a_later_catch_all_for_every_api() -> None:
    # Codex (Responses) asking for the local model: translated for the local Chat server,
    # never sent untranslated to the cloud upstream of the catch-all.
    routes = [
        {"model": "qwen3-coder", "upstreams": ["local"]},
        {"model": "*", "upstreams": ["openai"]},
    ]
    router = Router(config(routes))
    for api in (WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES):
        found = route(router, api, "qwen3-coder")
        assert (found.upstreams, found.name) == (("local",), "routes[0] model='qwen3-coder'")
        assert route(router, api, "gpt-5").upstreams == ("openai",)


def test_a_route_keeps_its_order_and_skips_only_upstreams_that_cannot_serve() -> None:
    # Native upstreams are not moved ahead of the route's first: a local server listed
    # first stays first for a Responses client, the cloud one is its fallback.
    routes = [{"model": "qwen3-coder", "upstreams": ["local", "openai"]}]
    router = Router(config(routes))
    assert route(router, WireApi.RESPONSES, "qwen3-coder").upstreams == ("local", "openai")


def test_a_matching_route_that_cannot_serve_the_request_is_a_404_not_the_next_route() -> None:
    # The first matching route's upstreams cannot take it at all (only Messages
    # requests reach an Anthropic upstream untranslated): the later catch-all must not.
    routes = [
        {"model": "claude-*", "upstreams": ["claude"]},
        {"model": "*", "upstreams": ["local"]},
    ]
    router = Router(config(routes))
    with pytest.raises(ProxyError) as info:
        router.route_for(
            "claude-x",
            native=lambda kind: kind is not UpstreamKind.ANTHROPIC_MESSAGES,
            serves=lambda kind: kind is not UpstreamKind.ANTHROPIC_MESSAGES,
            missing="none",
        )
    assert (info.value.status, info.value.code, info.value.param) == (404, "no_upstream", "model")
    assert "routes[0] model='claude-*'" in info.value.message


def test_a_request_no_native_route_serves_is_translated_for_the_first_matching_one() -> None:
    router = Router(config(ROUTES[:4]))  # no catch-all to an OpenAI upstream
    # Anthropic's route for an OpenAI client: Chat is translated into Messages.
    assert route(router, WireApi.CHAT, "claude-opus-4").upstreams == ("claude",)
    # Claude Code asking for gpt-5: the gpt-* route, translated into Chat.
    assert route(router, WireApi.MESSAGES, "gpt-5").upstreams == ("openai", "azure")


def test_a_route_may_mix_protocols_and_each_request_keeps_the_upstreams_that_serve_it() -> None:
    routes = [{"model": "claude-*", "upstreams": ["claude", "local"]}]
    router = Router(config(routes))
    assert route(router, WireApi.MESSAGES, "claude-x").upstreams == ("claude", "local")
    only_native = router.route_for(
        "claude-x",
        native=lambda kind: kind is UpstreamKind.ANTHROPIC_MESSAGES,
        serves=lambda kind: kind is UpstreamKind.ANTHROPIC_MESSAGES,
        missing="none",
    )
    assert only_native.upstreams == ("claude",)


def test_no_match_is_404_model_not_found() -> None:
    router = Router(config(ROUTES[:3]))
    with pytest.raises(ProxyError) as info:
        route(router, WireApi.CHAT, "llama-3")
    assert (info.value.status, info.value.code) == (404, "model_not_found")
    assert info.value.param == "model" and "llama-3" in info.value.message


def test_requests_without_a_model_and_configs_without_routes_use_the_first_upstream() -> None:
    router = Router(config())
    assert route(router, WireApi.CHAT, None).upstreams == ("openai",)
    assert route(router, WireApi.MESSAGES, None).upstreams == ("claude",)
    plain = Router(load_config(None, overrides={"upstream": {"base_url": "http://u/v1"}}))
    assert not plain.has_routes
    found = route(plain, WireApi.CHAT, "anything")
    assert (found.upstreams, found.name) == (("default",), None)
    # Claude Code against an OpenAI-compatible upstream alone: translated.
    assert route(plain, WireApi.MESSAGES, "claude-x").upstreams == ("default",)
    with pytest.raises(ProxyError) as info:
        plain.route_for(
            "x", native=lambda kind: False, serves=lambda kind: False, missing="none here"
        )
    assert (info.value.status, info.value.code, info.value.message) == (
        404,
        "no_upstream",
        "none here",
    )


def test_the_upstream_shorthand_is_an_upstream_named_default() -> None:
    cfg = load_config(
        None,
        overrides={
            "upstream": {"base_url": "http://main/v1"},
            "upstreams": {"backup": {"base_url": "http://backup/v1"}},
            "routes": [{"model": "*", "upstreams": ["default", "backup"]}],
        },
    )
    assert route(Router(cfg), WireApi.CHAT, "m").upstreams == ("default", "backup")


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ([{"model": "x", "upstreams": ["nope"]}], "routes[0].upstreams: no upstream named 'nope'"),
        ([{"model": "x", "upstreams": []}], "routes[0].upstreams: name at least one upstream"),
        ([{"model": "re:(", "upstreams": ["openai"]}], "routes[0].model: invalid regular"),
        ([{"model": "x"}], "routes[0].upstreams: required key is missing"),
        ([{"model": "x", "upstreams": "openai"}], "routes[0].upstreams: expected an array"),
        ([{"model": "x", "upstreams": ["openai"], "weight": 2}], "routes[0].weight: unknown key"),
    ],
)
def test_bad_routes_stop_start_up(routes: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(routes)
    assert message in str(info.value)


def test_routes_must_be_an_array_of_tables(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('routes = "gpt-*"\n[upstream]\nbase_url = "http://u/v1"\n')
    with pytest.raises(ConfigError, match=r"routes: must be an array of tables \(\[\[routes\]\]\)"):
        load_config(path)


def test_routes_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        """
[upstreams.openai]
base_url = "https://api.openai.com/v1"
headers = { "OpenAI-Organization" = "org-1" }
timeouts = { idle = 300.0 }

[[routes]]
model = "gpt-*"
upstreams = ["openai"]
upstream_model = "gpt-5.4-mini"

[[routes]]
model = "*"
upstreams = ["openai"]
"""
    )
    cfg = load_config(path)
    assert [r.model for r in cfg.routes] == ["gpt-*", "*"]
    assert cfg.routes[0].upstream_model == "gpt-5.4-mini"
    assert cfg.upstreams["openai"].headers == {"OpenAI-Organization": "org-1"}
    assert cfg.timeouts_for("openai").idle == 300.0
    assert cfg.timeouts_for("openai").first_byte == cfg.timeouts.first_byte


def test_shadowed_routes_are_warned_about() -> None:
    warnings = route_warnings(
        config(
            [
                {"model": "gpt-*", "upstreams": ["openai"]},
                {"model": "gpt-5.4", "upstreams": ["azure"]},  # taken by gpt-*
                {"model": "gpt-*", "upstreams": ["azure"]},  # the same pattern again
                {"model": "claude-*", "upstreams": ["claude"]},
                {"model": "*", "upstreams": ["local"]},
                {"model": "llama-*", "upstreams": ["local"]},  # after the catch-all
                {"model": "claude-opus-4", "upstreams": ["local"]},  # another protocol
            ]
        )
    )
    assert len(warnings) == 4
    assert warnings[0].startswith("routes[1] (model = 'gpt-5.4') never matches: routes[0]")
    assert warnings[1].startswith("routes[2] (model = 'gpt-*') never matches: routes[0]")
    assert warnings[2].startswith("routes[5] (model = 'llama-*') never matches: routes[4]")
    # The first matching route wins whatever its protocol: claude-* took it (routes[3]).
    assert warnings[3].startswith("routes[6] (model = 'claude-opus-4') never matches: routes[3]")
    assert route_warnings(config()) == []


def test_a_later_route_that_would_serve_an_exact_model_natively_is_warned_about() -> None:
    # Responses requests for qwen3-coder go to the local Chat server translated, never to
    # the catch-all's OpenAI upstream, which speaks Responses: the operator is told once.
    warnings = route_warnings(
        config(
            [
                {"model": "qwen3-coder", "upstreams": ["local"]},
                {"model": "gpt-5.4", "upstreams": ["azure"]},
                {"model": "*", "upstreams": ["openai"]},
            ]
        )
    )
    assert warnings == [
        "routes[2] (model = '*') also matches 'qwen3-coder', which routes[0] names: every "
        "request for it goes to routes[0] (local), whatever its API, translated where "
        "local does not speak it (Responses); routes[2] never gets it"
    ]
    # The same protocol on both sides: nothing is translated, nothing to say.
    same = [{"model": "gpt-5.4", "upstreams": ["azure"]}, {"model": "*", "upstreams": ["openai"]}]
    assert route_warnings(config(same)) == []


def test_pattern_kinds() -> None:
    assert compile_pattern("gpt-4o")("gpt-4o")
    assert not compile_pattern("gpt-4o")("gpt-4o-mini")
    assert compile_pattern("gpt-4?")("gpt-4o")
    assert compile_pattern("gpt-[45]*")("gpt-5.4")
    assert compile_pattern("re:mini$")("gpt-5.4-mini")
    assert not compile_pattern("re:mini$")("gpt-mini-5")
    assert compile_pattern("*")("")


async def test_codex_asking_for_the_local_model_reaches_the_local_server_not_the_cloud(
    autojump_clock: MockClock,
) -> None:
    # Issue 20 item 5: a Responses request for the model an exact route sends to a local
    # Chat server went, untranslated and with the cloud key, to the catch-all's upstream.
    upstreams = {
        "local": {"base_url": "http://local.test/v1", "protocol": "openai_chat"},
        "openai": {"base_url": "http://cloud.test/v1", "api_key": "sk-cloud"},
    }
    routes = [
        {"model": "qwen3-coder", "upstreams": ["local"]},
        {"model": "*", "upstreams": ["openai"]},
    ]
    chat = [chat_chunk({"role": "assistant", "content": "hi"}), chat_chunk({}, "stop")]
    answer = Script.sse([*chat, b"data: [DONE]\n\n"])
    async with MemoryProxy([answer], upstreams=upstreams, routes=routes) as proxy:
        exchange = await proxy.request({**TURN1_REQUEST, "model": "qwen3-coder"})
    assert exchange.status == 200
    (sent,) = proxy.transport.requests
    assert (sent.header("host"), sent.target) == ("local.test", "/v1/chat/completions")
    assert sent.header("authorization") is None  # local has no key; the cloud's stays home
    assert sent.json()["model"] == "qwen3-coder"
    assert exchange.outcome is not None
    assert (exchange.outcome.upstream, exchange.outcome.route) == (
        "local",
        "routes[0] model='qwen3-coder'",
    )
