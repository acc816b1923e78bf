"""The browser policy on its own: headers and settings in, a verdict out."""

from __future__ import annotations

import pytest

from proxai.config import ConfigError
from proxai.config_file import load_config
from proxai.policy.browser import (
    BrowserPolicy,
    BrowserRequest,
    host_of,
    normalize_allowed_host,
    normalize_origin,
)
from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy

UPSTREAM = {"upstream": {"base_url": "http://upstream.test/v1"}}


def request(
    method: str = "POST", local: str | None = "127.0.0.1", **headers: str
) -> BrowserRequest:
    pairs = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return BrowserRequest(method, pairs, local)


@pytest.mark.parametrize(
    ("value", "host"),
    [
        ("localhost:8080", "localhost"),
        ("LocalHost.", "localhost"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("evil.example:80", "evil.example"),
        ("evil.example:x", "evil.example:x"),
    ],
)
def test_the_host_of_a_host_header_drops_port_brackets_and_trailing_dot(
    value: str, host: str
) -> None:
    assert host_of(value) == host


@pytest.mark.parametrize(
    ("entry", "origin"),
    [
        ("http://localhost:3000/", "http://localhost:3000"),
        ("HTTPS://App.Example:443", "https://app.example"),
        ("http://app.example:80", "http://app.example"),
        ("http://app.example:8443", "http://app.example:8443"),
        ("chrome-extension://abcdef", "chrome-extension://abcdef"),
        ("*", "*"),
        ("null", "null"),
    ],
)
def test_allowed_origins_are_compared_as_browsers_write_them(entry: str, origin: str) -> None:
    assert normalize_origin(entry) == origin


@pytest.mark.parametrize("entry", ["localhost:3000", "http://app.example/chat", "app.example"])
def test_an_allowed_origin_that_is_no_origin_stops_start_up(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.allowed_origins\[0\]: must be an origin"):
        load_config(None, overrides={**UPSTREAM, "server": {"allowed_origins": [entry]}})


@pytest.mark.parametrize("entry", ["proxai.internal:8080", "http://proxai.internal", "a b"])
def test_an_allowed_host_with_a_port_or_scheme_stops_start_up(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.allowed_hosts\[0\]: must be a host name"):
        load_config(None, overrides={**UPSTREAM, "server": {"allowed_hosts": [entry]}})


def test_allowed_hosts_take_names_addresses_and_a_star() -> None:
    assert [normalize_allowed_host(h) for h in ["Proxai.Internal.", "[::1]", "10.0.0.5", "*"]] == [
        "proxai.internal",
        "::1",
        "10.0.0.5",
        "*",
    ]


def test_the_host_check_is_off_on_other_addresses_unless_allowed_hosts_names_some() -> None:
    everywhere = BrowserPolicy(bound_to_loopback=False)
    assert everywhere.check(request("GET", "10.0.0.5", host="evil.example")).refusal is None
    named = BrowserPolicy(bound_to_loopback=False, allowed_hosts=["proxai.internal"])
    assert named.check(request("GET", "10.0.0.5", host="evil.example")).refusal is not None
    assert named.check(request("GET", "10.0.0.5", host="proxai.internal")).refusal is None
    assert named.check(request("GET", "10.0.0.5", host="10.0.0.5:8080")).refusal is None
    off = BrowserPolicy(allowed_hosts=["*"])
    assert off.check(request("GET", "127.0.0.1", host="evil.example")).refusal is None


def test_the_host_check_follows_the_address_a_connection_arrived_on() -> None:
    # Configured for loopback but run by hypercorn on all addresses: a connection that
    # arrived on another address is not checked, one on loopback (or unknown) is.
    policy = BrowserPolicy(bound_to_loopback=True)
    assert policy.check(request("GET", "10.0.0.5", host="proxai.lan")).refusal is None
    assert policy.check(request("GET", "::1", host="proxai.lan")).refusal is not None
    assert policy.check(request("GET", None, host="proxai.lan")).refusal is not None


def test_a_request_with_two_origins_is_refused() -> None:
    policy = BrowserPolicy(allowed_origins=["http://localhost:3000"])
    twice = BrowserRequest(
        "POST", [(b"origin", b"http://localhost:3000"), (b"origin", b"http://localhost:3000")]
    )
    verdict = policy.check(twice)
    assert verdict.refusal is not None and verdict.refusal.code == "origin_not_allowed"
    assert verdict.response_headers == ()


def test_a_star_allows_every_origin_and_echoes_it() -> None:
    verdict = BrowserPolicy(allowed_origins=["*"]).check(request(origin="https://any.example"))
    assert verdict.refusal is None
    assert (b"access-control-allow-origin", b"https://any.example") in verdict.response_headers


def test_a_cross_site_form_post_navigation_is_refused() -> None:
    form = request(
        origin="https://evil.example", sec_fetch_site="cross-site", sec_fetch_mode="navigate"
    )
    assert BrowserPolicy().check(form).refusal is not None


def test_requested_headers_that_are_no_header_names_are_not_echoed() -> None:
    policy = BrowserPolicy(allowed_origins=["http://localhost:3000"])
    preflight = request(
        "OPTIONS",
        origin="http://localhost:3000",
        access_control_request_method="POST",
        access_control_request_headers="x-ok, bad header",
    )
    answer = dict(policy.check(preflight).options_answer or ())
    assert b"access-control-allow-headers" not in answer
    assert answer[b"access-control-allow-methods"] == b"GET, HEAD, POST, DELETE"


async def test_a_request_without_a_host_is_answered_and_a_trace_is_not() -> None:
    # ASGI servers may leave the Host out (HTTP/1.0): no browser sends such a request.
    async with MemoryProxy([Script.json({"data": []})]) as proxy:
        listed = await proxy.request(b"", method="GET", path="/v1/models")
        traced = await proxy.request(b"", method="TRACE", path="/v1/models")
    assert (listed.status, traced.status) == (200, 405)
    assert [r.method for r in proxy.transport.requests] == ["GET"]


def test_an_allowed_page_can_read_why_its_request_was_refused() -> None:
    policy = BrowserPolicy(allowed_origins=["http://localhost:3000"])
    verdict = policy.check(request("PUT", origin="http://localhost:3000"))
    assert verdict.refusal is not None and verdict.refusal.status == 405
    assert (b"access-control-allow-origin", b"http://localhost:3000") in verdict.response_headers
