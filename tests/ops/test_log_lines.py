"""A request log line stays one line: no path, model or format character forges another."""

from __future__ import annotations

import json
import logging

import pytest

from proxai.ops.request_log import JsonFormatter, _human, log_fields
from proxai.outcome import Outcome


def test_a_path_or_model_cannot_forge_a_log_line() -> None:
    outcome = Outcome(
        "POST",
        "/v1/x\nPOST /v1/responses 200 completed request_id=req_forged",
        request_id="req_" + "0" * 24,
        model='gpt "5"\r\nfake',
    )
    line = _human(log_fields(outcome))
    assert "\n" not in line and "\r" not in line
    assert '"/v1/x\\nPOST /v1/responses 200 completed request_id=req_forged"' in line


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_no_line_break_in_a_model_name_starts_a_forged_log_line(brk: str) -> None:
    forged = f"gpt-5{brk}POST /v1/responses 200 completed request_id=req_forged"
    outcome = Outcome("POST", "/v1/responses", request_id="req_" + "0" * 24, model=forged)
    line = _human(log_fields(outcome))
    assert len(line.splitlines()) == 1
    assert "model=" + json.dumps(forged) in line  # escaped as JSON does, readable back
    record = logging.LogRecord("proxai.request", logging.INFO, "", 0, "%s", (line,), None)
    record.proxai_fields = log_fields(outcome)
    assert len(JsonFormatter().format(record).splitlines()) == 1


def test_invisible_format_characters_in_a_model_name_are_escaped() -> None:
    outcome = Outcome("POST", "/v1/responses", model="gpt\u202e5-\U000e0001x")
    line = _human(log_fields(outcome))
    assert 'model="gpt\\u202e5-\\udb40\\udc01x"' in line
    assert json.loads(line.split("model=", 1)[1].split(" ")[0]) == "gpt\u202e5-\U000e0001x"
