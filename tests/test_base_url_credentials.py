"""Credentials in an upstream's base_url stop start-up (issue 20 item 16).

``http://user:pass@host/v1`` was accepted, its credentials never sent (proxai sends
``api_key`` or ``headers``) and the URL logged in clear at start-up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import proxai.service.server
from proxai.cli import main
from proxai.config import ConfigError
from proxai.config_file import load_config

SECRET = "hunter2-s3cret"


@pytest.mark.parametrize(
    "url",
    [
        f"http://admin:{SECRET}@127.0.0.1:8000/v1",
        f"https://{SECRET}@api.example.com/v1",  # a token as the user name
        f"https://admin:{SECRET}@[::1]:8443/v1",
        f"https://admin%40corp:{SECRET}@example.com/v1",
        f"ftp://admin:{SECRET}@example.com/v1",  # the scheme's error must not quote it either
    ],
)
def test_credentials_in_base_url_stop_start_up_naming_the_key_not_the_secret(url: str) -> None:
    for overrides, key in [
        ({"upstream": {"base_url": url}}, "upstream.base_url"),
        (
            {"upstream": {"base_url": "http://u/v1"}, "upstreams": {"local": {"base_url": url}}},
            "upstreams.local.base_url",
        ),
    ]:
        with pytest.raises(ConfigError) as info:
            load_config(None, overrides=overrides)
        message = str(info.value)
        assert f"{key}: " in message
        assert SECRET not in message and "admin" not in message


def test_the_error_says_where_credentials_go() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides={"upstream": {"base_url": f"http://a:{SECRET}@h/v1"}})
    assert str(info.value) == (
        "invalid configuration:\n  upstream.base_url: must not hold credentials "
        "(user:password@): proxai would not send them; set api_key, api_key_env or "
        "headers (e.g. Authorization) instead"
    )


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/v1", "https://example.com/v1/@models", "https://h/v1?x=a@b"],
)
def test_an_at_sign_outside_the_authority_is_no_credential(url: str) -> None:
    assert load_config(None, overrides={"upstream": {"base_url": url}}).upstream.base_url == url


def test_the_cli_refuses_it_without_printing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def serve(*args: object, **kwargs: object) -> None:
        raise AssertionError("proxai started with credentials in a base_url")

    monkeypatch.setattr(proxai.service.server, "serve", serve)
    config = tmp_path / "proxai.toml"
    config.write_text(f'[upstreams.local]\nbase_url = "http://me:{SECRET}@127.0.0.1:9/v1"\n')
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "upstreams.local.base_url: must not hold credentials" in err
    assert SECRET not in err
    assert main(["serve", "--upstream", f"http://me:{SECRET}@127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert "upstream.base_url: must not hold credentials" in err and SECRET not in err
