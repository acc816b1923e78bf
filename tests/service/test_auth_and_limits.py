"""Client keys ([auth]) and server.max_concurrent_streams, in memory on a virtual clock."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from proxai.config import AuthConfig, ConfigError
from proxai.errors import ProxyError
from proxai.outcome import OutcomeKind
from proxai.policy.auth import ClientKeys
from proxai.protocols.table import ANTHROPIC_SDK, OPENAI_SDK
from proxai.testing import Script, Sleep
from proxai.testing.memory_proxy import MemoryProxy
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes
from tests.helpers import ANTHROPIC_UPSTREAM, MESSAGES, REQUEST, WHOLE

TURN1 = turn_bytes(TURN1_EVENTS)
CUT = len(turn_bytes(TURN1_EVENTS[:3]))  # after three whole events
KEYS = {"keys": ["sk-client-alpha", "sha256:" + hashlib.sha256(b"sk-client-beta").hexdigest()]}


def bearer(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {key}".encode())]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([], "Missing API key"),
        (bearer("sk-wrong"), "Incorrect API key"),
        ([(b"authorization", b"Basic c2stY2xpZW50LWFscGhh")], "Missing API key"),
        ([(b"x-api-key", b"sk-client-alpha")], "Missing API key"),  # not on OpenAI routes
    ],
)
async def test_requests_without_a_valid_key_get_401_before_anything_happens(
    autojump_clock: MockClock, headers: list[tuple[bytes, bytes]], message: str
) -> None:
    async with MemoryProxy([Script.sse([TURN1])], auth=KEYS) as proxy:
        # The body never arrives: had proxai waited for it, the answer would be a 408.
        exchange = await proxy.request(TURN1_REQUEST, headers=headers, body_stalls=True)
    assert exchange.status == 401
    assert exchange.elapsed == 0
    error = exchange.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
    assert error["message"].startswith(message)
    assert (b"www-authenticate", b"Bearer") in exchange.headers
    assert proxy.transport.requests == []  # nothing went upstream
    assert exchange.outcome is not None
    assert exchange.outcome.kind is OutcomeKind.UNAUTHORIZED


@pytest.mark.parametrize("key", ["sk-client-alpha", "sk-client-beta"])
async def test_a_valid_key_passes_and_never_reaches_the_upstream(
    autojump_clock: MockClock, key: str
) -> None:
    async with MemoryProxy([Script.sse([TURN1])], auth=KEYS) as proxy:
        exchange = await proxy.request(TURN1_REQUEST, headers=bearer(key))
    assert (exchange.status, exchange.body) == (200, TURN1)
    (sent,) = proxy.transport.requests
    assert sent.header("authorization") == "Bearer sk-up"  # proxai's upstream key instead


async def test_anthropic_routes_take_x_api_key_and_answer_in_their_shape(
    autojump_clock: MockClock,
) -> None:
    from proxai.testing import sse_event  # noqa: F401  (the stream below is raw bytes)

    body = b"".join(WHOLE)
    async with MemoryProxy([Script.sse([body])], upstreams=ANTHROPIC_UPSTREAM, auth=KEYS) as proxy:
        ok = await proxy.request(
            REQUEST, path=MESSAGES, headers=[(b"x-api-key", b"sk-client-beta")]
        )
        refused = await proxy.request(
            REQUEST, path=MESSAGES, headers=[(b"x-api-key", b"sk-client-gamma")]
        )
    assert ok.status == 200
    (sent,) = proxy.transport.requests
    assert sent.header("x-api-key") == "sk-ant-upstream"
    assert refused.status == 401
    assert refused.json() == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "Incorrect API key provided to proxai",
        },
    }


async def test_health_needs_no_key(autojump_clock: MockClock) -> None:
    async with MemoryProxy([Script.sse([TURN1])], auth=KEYS) as proxy:
        health = await proxy.request(b"", path="/healthz", method="GET")
        ready = await proxy.request(b"", path="/readyz", method="GET")
    assert (health.status, ready.status) == (200, 200)


def test_keys_file_with_plain_and_hashed_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    digest = hashlib.sha256(b"sk-two").hexdigest().upper()
    path.write_text(f"# team keys\nsk-one\n\n  sha256:{digest}  \n")
    keys = ClientKeys.from_config(AuthConfig(keys_file=str(path)))
    assert keys is not None
    assert keys.accepts("sk-one") and keys.accepts("sk-two")
    assert not keys.accepts("sk-three") and not keys.accepts("")
    keys.check(bearer("sk-two"), OPENAI_SDK)
    with pytest.raises(ProxyError):
        keys.check([(b"x-api-key", b"sk-two")], OPENAI_SDK)
    keys.check([(b"x-api-key", b"sk-two")], ANTHROPIC_SDK)


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        (AuthConfig(keys=["sha256:abc"]), "auth.keys[0]: a hashed key is sha256: and 64 hex"),
        (AuthConfig(keys=[]), None),
    ],
)
def test_bad_keys_stop_start_up(auth: AuthConfig, message: str | None) -> None:
    if message is None:
        assert ClientKeys.from_config(auth) is None  # no keys: auth is off
        return
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ClientKeys.from_config(auth)


def test_an_empty_keys_file_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# nobody yet\n")
    with pytest.raises(ConfigError, match="no client keys configured"):
        ClientKeys.from_config(AuthConfig(keys_file=str(path)))


async def test_a_flood_over_max_concurrent_streams_gets_503(autojump_clock: MockClock) -> None:
    """12 clients at once against a limit of 4: 4 streams byte-exact, 8 refused at once."""
    script = Script.sse([TURN1[:100], TURN1[100:]], delay=5.0)
    async with MemoryProxy([script], server={"max_concurrent_streams": 4}) as proxy:
        exchanges = []

        async def one() -> None:
            exchanges.append(await proxy.request(TURN1_REQUEST))

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(one)
        assert proxy.app.in_flight == 0
        after = await proxy.request(TURN1_REQUEST)  # the slots are free again
    accepted = [e for e in exchanges if e.status == 200]
    refused = [e for e in exchanges if e.status == 503]
    assert len(accepted) == 4 and len(refused) == 8
    assert all(e.body == TURN1 for e in accepted)
    for e in refused:
        assert e.elapsed == 0
        assert e.json()["error"]["code"] == "proxy_overloaded"
        assert (b"retry-after", b"1") in e.headers
        assert e.outcome is not None and e.outcome.kind is OutcomeKind.OVERLOADED
    assert len(proxy.transport.requests) == 5
    assert after.status == 200


async def test_drain_lets_streams_finish_then_ends_the_rest(autojump_clock: MockClock) -> None:
    """drain_timeout 10 s: a stream done in 4 s completes; one that would take 60 s gets
    its protocol's error at 10 s; a request arriving meanwhile gets 503."""
    short = Script.sse([TURN1[:CUT], TURN1[CUT:]], delay=4.0)
    long = Script.sse([TURN1[:CUT], TURN1[CUT:]], delay=60.0)
    async with MemoryProxy([short, long], server={"drain_timeout": 10.0}) as proxy:
        results: dict[str, object] = {}

        async def run(name: str) -> None:
            results[name] = await proxy.request(TURN1_REQUEST)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "short")
            await trio.sleep(0.1)
            nursery.start_soon(run, "long")
            await trio.sleep(0.1)
            drained_at = trio.current_time()
            nursery.start_soon(proxy.app.drain)
            await trio.sleep(1.0)
            assert not proxy.app.ready
            late = await proxy.request(TURN1_REQUEST)
            ready = await proxy.request(b"", path="/readyz", method="GET")
    short_ex, long_ex = results["short"], results["long"]
    assert short_ex.body == TURN1  # type: ignore[attr-defined]
    assert short_ex.outcome.kind is OutcomeKind.COMPLETED  # type: ignore[attr-defined]
    events = long_ex.events()  # type: ignore[attr-defined]
    assert long_ex.ended_at - drained_at == pytest.approx(10.0, abs=0.01)  # type: ignore[attr-defined]
    assert len(events) == 5 and long_ex.body.startswith(TURN1[:CUT])  # type: ignore[attr-defined]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert "shutting down" in events[-2]["message"]
    assert long_ex.outcome.kind is OutcomeKind.SHUTDOWN  # type: ignore[attr-defined]
    assert late.status == 503 and late.json()["error"]["code"] == "proxy_shutting_down"
    assert ready.status == 503 and ready.json() == {"status": "draining"}
    assert len(proxy.transport.requests) == 2


async def test_drain_before_the_first_byte_is_a_503(autojump_clock: MockClock) -> None:
    from proxai.testing import Stall

    async with MemoryProxy(
        [Script(before_head=[Sleep(50.0)])], server={"drain_timeout": 5.0}, first_byte=100.0
    ) as proxy:
        async with trio.open_nursery() as nursery:
            results = []

            async def run() -> None:
                results.append(await proxy.request(TURN1_REQUEST))

            nursery.start_soon(run)
            await trio.sleep(1.0)
            nursery.start_soon(proxy.app.drain)
        (exchange,) = results
        closed_at = await proxy.transport.requests[0].wait_closed()
    assert exchange.status == 503
    assert exchange.elapsed == pytest.approx(6.0)
    assert (b"retry-after", b"1") in exchange.headers
    assert closed_at - exchange.started_at == pytest.approx(6.0)
    del Stall


async def test_anthropic_routes_get_overloaded_error_when_over_the_limit(
    autojump_clock: MockClock,
) -> None:
    body = b"".join(WHOLE)
    slow = Script.sse([body[:10], body[10:]], delay=5.0)
    async with MemoryProxy(
        [slow], upstreams=ANTHROPIC_UPSTREAM, server={"max_concurrent_streams": 1}
    ) as proxy:
        results = []

        async def one() -> None:
            results.append(await proxy.request(REQUEST, path=MESSAGES))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            await trio.sleep(1)
            nursery.start_soon(one)
    refused = next(r for r in results if r.status == 503)
    assert refused.json()["error"]["type"] == "overloaded_error"
