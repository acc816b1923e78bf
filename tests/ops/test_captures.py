"""Captures on disk: what pruning may touch, what is redacted, who may read them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from proxai.config import CaptureConfig
from proxai.ops.capture import Captures
from proxai.outcome import Outcome
from proxai.testing import Script


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_pruning_never_touches_folders_proxai_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "my-notes").mkdir()
    (tmp_path / "20250101T000000.000000-not-a-request").mkdir()
    captures = Captures(CaptureConfig(enabled=True, dir=str(tmp_path), keep=1))
    for n in range(3):
        outcome = Outcome("POST", "/v1/responses", request_id=f"req_{n:024x}")
        captures._write(captures.start(), outcome)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "my-notes" in names and "20250101T000000.000000-not-a-request" in names
    assert len([n for n in names if "req_" in n]) == 1


async def test_captures_redact_every_credential_looking_header_and_query_parameter(
    start_upstream: Any, proxai_for: Any, tmp_path: Path
) -> None:
    answer = Script.json(
        {"data": []},
        headers=(("x-ratelimit-remaining-tokens", "999"), ("x-upstream-token", "tok-up")),
    )
    upstream = await start_upstream([answer])
    captures = tmp_path / "captures"
    secrets = {
        "x-goog-api-key": "goog-secret",
        "ocp-apim-subscription-key": "apim-secret",
        "x-auth-token": "auth-token-secret",
        "x-client-secret": "cs-value-1",
        "x-amz-signature": "sig-secret",
        "cookie": "session=cookie-secret",
    }
    query = "limit=2&key=q-key-secret&api_key=q-apikey-secret&access_token=q-at-secret&Sig=q-sig"
    async with (
        proxai_for(upstream, capture={"enabled": True, "dir": str(captures)}) as px,
        httpx.AsyncClient() as client,
    ):
        await client.get(px.base_url + "/models?" + query, headers={**secrets, "x-trace": "t-1"})
        with trio.fail_after(5):
            (folder,) = await px.wait_for_captures(1)  # written by a thread after the request
        assert list(captures.iterdir()) == [folder]
        request = (folder / "request.http").read_bytes()
        upstream_head = (folder / "upstream.bin").read_bytes()
        everything = b"".join(p.read_bytes() for p in folder.iterdir())
    assert request.startswith(
        b"GET /v1/models?limit=2&key=[redacted]&api_key=[redacted]"
        b"&access_token=[redacted]&Sig=[redacted] HTTP/1.1\r\n"
    )
    for name in secrets:
        assert name.encode() + b": [redacted]\r\n" in request
    assert b"x-trace: t-1\r\n" in request
    assert b"x-upstream-token: [redacted]\r\n" in upstream_head
    assert b"x-ratelimit-remaining-tokens: 999\r\n" in upstream_head  # a count, not a key
    for secret in [*secrets.values(), "q-key-secret", "q-apikey-secret", "q-at-secret", "tok-up"]:
        assert secret.encode() not in everything, secret


@pytest.mark.usefixtures("permissive_umask")
def test_capture_folders_and_files_are_for_proxais_user_only(tmp_path: Path) -> None:
    root = tmp_path / "captures"
    captures = Captures(CaptureConfig(enabled=True, dir=str(root)))
    captures._write(captures.start(), Outcome("GET", "/v1/models", request_id="req_" + "1" * 24))
    (folder,) = root.iterdir()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["client.bin", "outcome.json", "request.http", "upstream.bin"]
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file.name
