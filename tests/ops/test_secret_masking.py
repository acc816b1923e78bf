"""Secrets in upstream text are masked in proxai's records (issue 20 item 15).

An upstream's in-band error that echoes the request's ``Authorization`` used to reach
the log line's ``detail`` and the capture's ``outcome.json`` verbatim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from proxai.config import LoggingConfig
from proxai.config_file import load_config
from proxai.ops.masking import MASK, SecretMask
from proxai.ops.request_log import MAX_LOG_TEXT, RequestLog
from proxai.outcome import Outcome, OutcomeKind
from proxai.testing import Script, chat_chunk

KEY = "sk-proj-Abc123SECRETxyz789"  # proxai's key for the upstream
HEADER_SECRET = "subscr-0f9e8d7c6b5a"  # a credential among the upstream's headers
THEIRS = "tok_upstream_only_4242424242"  # a token proxai does not know


def test_known_keys_and_key_looking_strings_are_masked() -> None:
    mask = SecretMask([KEY, "short"])
    assert mask(f"invalid: Bearer {KEY}") == f"invalid: Bearer {MASK}"
    assert mask(f"key {KEY}, again {KEY}.") == f"key {MASK}, again {MASK}."
    assert mask(f"bearer {THEIRS}!") == f"bearer {MASK}!"
    assert mask("got x-api-key: abcdefgh12345678") == f"got x-api-key: {MASK}"
    assert mask('{"api_key": "abcdefgh12345678"}') == f'{{"api_key": "{MASK}"}}'
    assert mask("access_token=abcdefgh12345678&x=1") == f"access_token={MASK}&x=1"
    assert mask("an sk-0123456789abcdefghij key") == f"an {MASK} key"
    # Short known secrets would mask common words; ordinary text stays as it is.
    assert mask("short answer, max_tokens: 4096, Bearer abc") == (
        "short answer, max_tokens: 4096, Bearer abc"
    )
    assert mask.mask_bytes(f"x {KEY} Bearer {THEIRS}".encode()) == (
        f"x {MASK} Bearer {THEIRS}".encode()  # raw bytes: only the known secrets
    )


def test_the_mask_of_a_config_knows_every_upstreams_keys() -> None:
    config = load_config(
        None,
        overrides={
            "upstream": {"base_url": "http://a/v1", "api_key": KEY},
            "upstreams": {
                "azure": {
                    "base_url": "http://b/v1",
                    "api_key_env": "AZ_KEY",
                    "headers": {
                        "Ocp-Apim-Subscription-Key": HEADER_SECRET,
                        "OpenAI-Organization": "org-1234567890",
                    },
                }
            },
        },
        environ={"AZ_KEY": "azure-key-from-env-123"},
    )
    mask = SecretMask.from_config(config, {"AZ_KEY": "azure-key-from-env-123"})
    text = f"{KEY} azure-key-from-env-123 {HEADER_SECRET} org-1234567890"
    assert mask(text) == f"{MASK} {MASK} {MASK} org-1234567890"


def test_masking_is_linear_in_the_text() -> None:
    mask = SecretMask([KEY])
    text = ("Bearer " * 50_000) + " " + "sk- " * 100_000 + "api_key: " * 50_000 + ". " + "a" * 10**6
    assert mask(text) == text  # nothing to mask, and no backtracking blow-up


def _echoing_error(request: Any) -> Script:
    auth = request.header("authorization")
    chunk = {"error": {"message": f"upstream auth failed for {auth} (also tried Bearer {THEIRS})"}}
    events = [chat_chunk({"role": "assistant", "content": ""}), json.dumps(chunk).encode()]
    return Script.sse([e if e.startswith(b"data") else b"data: " + e + b"\n\n" for e in events])


async def test_an_upstream_error_echoing_the_key_is_masked_in_the_log_and_the_capture(
    start_upstream: Any, proxai_for: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = await start_upstream(_echoing_error)
    capture = {"enabled": True, "dir": str(tmp_path / "captures")}
    caplog.set_level("INFO", logger="proxai.request")
    headers = {"headers": {"Ocp-Apim-Subscription-Key": HEADER_SECRET}}
    async with (
        proxai_for(upstream, upstream={"api_key": KEY, **headers}, capture=capture) as px,
        httpx.AsyncClient() as client,
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        response = await client.post(px.base_url + "/chat/completions", json=body)
        assert response.status_code == 200
        with trio.fail_after(5):
            (outcome,) = await px.wait_for_outcomes(1)
            (folder,) = await px.wait_for_captures(1)  # written by a thread after the outcome
        assert list((tmp_path / "captures").iterdir()) == [folder]
        for name in ("outcome.json", "upstream.bin", "client.bin", "request.http"):
            data = (folder / name).read_bytes()
            assert KEY.encode() not in data and HEADER_SECRET.encode() not in data, name
        saved = json.loads((folder / "outcome.json").read_bytes())
        assert THEIRS not in saved["detail"] and f"Bearer {MASK}" in saved["detail"]
        assert MASK.encode() in (folder / "upstream.bin").read_bytes()
    assert upstream.requests[0].header("authorization") == f"Bearer {KEY}"
    assert outcome.detail is not None and KEY in outcome.detail  # the record itself: raw
    (record,) = [r for r in caplog.records if r.name == "proxai.request"]
    for logged in (record.getMessage(), json.dumps(record.__dict__["proxai_fields"])):
        assert KEY not in logged and THEIRS not in logged
        assert f"Bearer {MASK}" in logged


def test_a_secret_at_the_log_lines_cut_is_masked_whole_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The log keeps MAX_LOG_TEXT characters of a detail: a key straddling the cut would
    # leave its first characters, too few to look like a key, if it were cut first.
    caplog.set_level("INFO", logger="proxai.request")
    detail = "x" * (MAX_LOG_TEXT - 12) + f"Bearer {KEY} and more"
    outcome = Outcome("POST", "/v1/responses", kind=OutcomeKind.FAILED, detail=detail)
    RequestLog(LoggingConfig(), SecretMask([KEY]))(outcome)
    (record,) = [r for r in caplog.records if r.name == "proxai.request"]
    logged = record.__dict__["proxai_fields"]["detail"]
    assert KEY[:5] not in logged and "Bearer [reda" in logged
