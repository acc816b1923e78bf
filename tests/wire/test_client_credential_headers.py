"""Client credentials in Azure API Management's and OpenStack-style headers stay at
proxai (issue 20 item 18b).

``ocp-apim-subscription-key`` and ``x-auth-token`` were redacted in captures, as
credentials, but forwarded upstream, as no other client credential is. Now neither is;
an upstream that wants one gets proxai's own, from the upstream's ``headers``.
"""

from __future__ import annotations

from typing import Any

import pytest
from trio.testing import MockClock

from proxai.protocols.table import CLIENT_KEY_HEADERS
from proxai.testing import Script
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from proxai.wire.headers import request_headers_for_upstream

CLIENT_HEADERS = [
    (b"ocp-apim-subscription-key", b"client-subscription"),
    (b"Ocp-Apim-Subscription-Key", b"client-subscription-2"),
    (b"x-auth-token", b"client-token"),
    (b"idempotency-key", b"idem-1"),  # looks like a credential to captures, but is not one
    (b"openai-organization", b"org-1"),
]


def test_the_client_credential_headers_are_not_forwarded() -> None:
    up = request_headers_for_upstream(CLIENT_HEADERS, credentials=CLIENT_KEY_HEADERS)
    names = [n.lower() for n, _ in up]
    assert b"ocp-apim-subscription-key" not in names and b"x-auth-token" not in names
    assert (b"idempotency-key", b"idem-1") in up and (b"openai-organization", b"org-1") in up


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [
        ({"api_key": "sk-proxai-own"}, None),
        ({}, None),  # no key of proxai's: still no client credential goes up
        ({"headers": {"Ocp-Apim-Subscription-Key": "proxai-subscription"}}, "proxai-subscription"),
    ],
)
async def test_an_upstream_gets_proxais_subscription_key_or_none(
    autojump_clock: MockClock, upstream: dict[str, Any], expected: str | None
) -> None:
    upstreams = {"azure": {"base_url": "http://azure.test/v1", **upstream}}
    routes = [{"model": "*", "upstreams": ["azure"]}]
    answer = Script.sse([turn_bytes(TURN1_EVENTS)])
    async with MemoryProxy([answer], upstreams=upstreams, routes=routes) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, headers=CLIENT_HEADERS)
    assert exchange.status == 200
    (sent,) = proxy.transport.requests
    assert sent.header("ocp-apim-subscription-key") == expected
    assert [v for n, v in sent.headers if n.lower() == b"ocp-apim-subscription-key"] == (
        [] if expected is None else [expected.encode()]
    )
    assert sent.header("x-auth-token") is None
    assert sent.header("idempotency-key") == "idem-1"
