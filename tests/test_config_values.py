"""Values start-up refuses or cleans: a key file's newline, header values HTTP cannot carry."""

from __future__ import annotations

from typing import Any

import pytest

from proxai.config import ConfigError
from proxai.config_file import load_config


def test_a_key_read_from_a_file_loses_its_newline() -> None:
    config = load_config(
        None,
        overrides={"upstream": {"base_url": "http://u/v1", "api_key_env": "PROXAI_K"}},
        environ={"PROXAI_K": "sk-from-a-secret-file\n"},
    )
    assert config.upstream.resolved_api_key({"PROXAI_K": "sk-from-a-secret-file\n"}) == (
        "sk-from-a-secret-file"
    )


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        ({"headers": {"X-Team": "a\r\nX-Evil: 1"}}, "upstream.headers.X-Team: the value contains"),
        ({"headers": {"Bad Name": "x"}}, "upstream.headers: 'Bad Name' is not a valid header name"),
        ({"headers": {"X-Org": "组织"}}, "upstream.headers.X-Org: the value has characters"),
        ({"api_key": "sk-secret\nmore"}, "upstream.api_key: the key contains a line break"),
    ],
)
def test_header_values_that_http_cannot_carry_stop_start_up(
    upstream: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides={"upstream": {"base_url": "http://u/v1", **upstream}})
    assert message in str(info.value)
    assert "sk-secret" not in str(info.value)  # the message never quotes a key
