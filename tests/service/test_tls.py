"""TLS: proxai terminating https (HTTP/1.1 and HTTP/2 through ALPN, client
certificates), and verifying its upstream's certificate. Certificates by trustme."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme

from proxai.outcome import OutcomeKind
from proxai.testing import Script, ScriptedUpstream, open_proxai
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST, turn_bytes

TURN1 = turn_bytes(TURN1_EVENTS)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def server_files(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    certfile, keyfile, cafile = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    ca.cert_pem.write_to_path(str(cafile))
    return {"certfile": str(certfile), "keyfile": str(keyfile), "ca": str(cafile)}


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.mark.parametrize(("http2", "version"), [(False, "HTTP/1.1"), (True, "HTTP/2")])
async def test_proxai_serves_https_with_alpn(
    start_upstream: Any, ca: trustme.CA, server_files: dict[str, str], http2: bool, version: str
) -> None:
    upstream = await start_upstream([Script.sse([TURN1])])
    tls = {"certfile": server_files["certfile"], "keyfile": server_files["keyfile"]}
    async with open_proxai(upstream.base_url, server=tls) as px:
        assert px.url.startswith("https://127.0.0.1:")
        async with httpx.AsyncClient(verify=client_context(ca), http2=http2) as client:
            response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
            (outcome,) = await px.wait_for_outcomes(1)
    assert response.http_version == version
    assert (response.status_code, response.content) == (200, TURN1)
    assert outcome.kind is OutcomeKind.COMPLETED


async def test_client_certificates_are_required_when_ca_certs_is_set(
    start_upstream: Any, ca: trustme.CA, server_files: dict[str, str], tmp_path: Path
) -> None:
    upstream = await start_upstream([Script.sse([TURN1])])
    tls = {
        "certfile": server_files["certfile"],
        "keyfile": server_files["keyfile"],
        "ca_certs": server_files["ca"],
    }
    async with open_proxai(upstream.base_url, server=tls) as px:
        anonymous = client_context(ca)
        async with httpx.AsyncClient(verify=anonymous) as client:
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
        identified = client_context(ca)
        ca.issue_cert("client@example.test").configure_cert(identified)
        async with httpx.AsyncClient(verify=identified) as client:
            response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
    assert (response.status_code, response.content) == (200, TURN1)
    assert len(upstream.requests) == 1  # the anonymous client never got a request through


@pytest.mark.parametrize(
    ("upstream_table", "status"),
    [
        ({"ca_bundle": "CA"}, 200),  # verified against the configured CA
        ({}, 502),  # verified against the public CAs: refused
        ({"verify": False}, 200),  # verification off
    ],
)
async def test_upstream_tls_is_verified(
    ca: trustme.CA,
    server_files: dict[str, str],
    upstream_table: dict[str, Any],
    status: int,
) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    upstream = ScriptedUpstream([Script.sse([TURN1])], ssl_context=server_context)
    table = {k: (server_files["ca"] if v == "CA" else v) for k, v in upstream_table.items()}
    async with trio.open_nursery() as nursery:
        url = await nursery.start(upstream.serve)
        assert url.startswith("https://")
        async with open_proxai(url, upstream=table) as px, httpx.AsyncClient() as client:
            response = await client.post(px.base_url + "/responses", json=TURN1_REQUEST)
            (outcome,) = await px.wait_for_outcomes(1)
        nursery.cancel_scope.cancel()
    assert response.status_code == status
    if status == 200:
        assert response.content == TURN1
    else:
        error = response.json()["error"]
        assert error["code"] == "upstream_unreachable"
        assert "CERTIFICATE_VERIFY_FAILED" in error["message"]
        assert outcome.kind is OutcomeKind.UPSTREAM_UNREACHABLE


def test_tls_settings_are_checked_at_start_up(tmp_path: Path) -> None:
    from proxai.config import ConfigError
    from proxai.config_file import load_config

    config = tmp_path / "p.toml"
    config.write_text(
        '[server]\ncertfile = "missing.pem"\n[upstream]\nbase_url = "http://u/v1"\n'
        'ca_bundle = "nope.pem"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(config)
    message = str(info.value)
    assert "server.certfile and server.keyfile: set both" in message
    assert f"server.certfile: no such file: {tmp_path / 'missing.pem'}" in message
    assert f"upstream.ca_bundle: no such file: {tmp_path / 'nope.pem'}" in message
