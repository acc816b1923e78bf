"""Compaction for upstreams that do not compact, sans-io: the envelope, the summarizing
request, and a compaction item coming back (issue 23)."""

from __future__ import annotations

import base64

import orjson
import pytest

from proxai.errors import ProxyError
from proxai.protocols.responses.compaction import (
    CompactionForm,
    EnvelopeError,
    Summary,
    compaction_form,
    expand_compactions,
    seal,
    summarizing_request,
    unseal,
)

SUMMARY = Summary("The user wants the weather in 北京: sunny.", "gpt-5.4", 1767225600)
TRIGGER = {"type": "compaction_trigger"}
USER = {"type": "message", "role": "user", "content": "Weather in 北京?"}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city":"北京"}',
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def test_an_envelope_round_trips_and_says_what_it_is() -> None:
    sealed = seal(SUMMARY)
    assert sealed.startswith("proxai-compaction-v1.")
    assert unseal(sealed) == SUMMARY
    # Self-describing: the payload is base64url JSON anyone can read.
    payload = sealed.split(".")[1]
    decoded = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert decoded == {"summary": SUMMARY.text, "model": "gpt-5.4", "created_at": 1767225600}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("gAAAAABoOpenAIsOwnBlob", "not made by proxai"),
        (None, "not made by proxai"),
        (seal(SUMMARY).replace("-v1.", "-v2.", 1), "version 'v2'"),
        (seal(SUMMARY)[:-3] + "AAA", "damaged or was edited"),
        (seal(SUMMARY)[:40] + "x" + seal(SUMMARY)[41:], "damaged or was edited"),
        (seal(SUMMARY).rpartition(".")[0], "damaged or was edited"),  # no digest
    ],
)
def test_an_envelope_proxai_cannot_read_says_why(value: object, why: str) -> None:
    with pytest.raises(EnvelopeError, match=why):
        unseal(value)


def test_the_form_of_a_compaction_request() -> None:
    assert compaction_form({"input": [USER, TRIGGER]}, endpoint=False) is CompactionForm.TRIGGER
    assert compaction_form({"input": [USER]}, endpoint=False) is None
    assert compaction_form({"input": "hi"}, endpoint=False) is None
    assert compaction_form({"input": [USER]}, endpoint=True) is CompactionForm.ENDPOINT


def test_the_summarizing_request_asks_for_a_summary_of_the_conversation() -> None:
    earlier = {"type": "compaction", "encrypted_content": seal(SUMMARY), "id": "cmp_1"}
    data = {
        "model": "gpt-5.4",
        "instructions": "You are Codex.",
        "input": [earlier, USER, CALL, OUTPUT, TRIGGER],
        "tools": [TOOL],
        "tool_choice": "required",
        "text": {"format": {"type": "json_object"}},
        "max_output_tokens": 10,
        "store": True,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "client_metadata": {"x-codex-window-id": "w"},
    }
    request, answer = summarizing_request(
        data, CompactionForm.TRIGGER, prompt="Summarize.", summary_prefix="Before:"
    )
    assert request["model"] == "gpt-5.4" and request["instructions"] == "You are Codex."
    items = request["input"]
    assert items[0] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": f"Before:\n\n{SUMMARY.text}"}],
    }
    assert items[1:4] == [USER, CALL, OUTPUT]  # the trigger is gone
    assert items[4]["content"][0]["text"] == "Summarize."
    assert request["tools"] == [TOOL] and request["tool_choice"] == "none"
    assert request["store"] is False and request["stream"] is True
    assert not {"text", "max_output_tokens", "include", "client_metadata"} & request.keys()
    assert answer.form is CompactionForm.TRIGGER and answer.user_messages == ()
    assert data["input"][-1] == TRIGGER  # the client's request is not changed


def test_the_compact_endpoint_keeps_the_user_messages_for_its_output() -> None:
    data = {"model": "m", "input": [USER, CALL, OUTPUT, {"role": "user", "content": "again"}]}
    request, answer = summarizing_request(
        data, CompactionForm.ENDPOINT, prompt="Summarize.", summary_prefix=""
    )
    assert "stream" not in request and "tool_choice" not in request
    assert [orjson.loads(m) for m in answer.user_messages] == [
        USER,
        {"role": "user", "content": "again"},
    ]
    assert len(request["input"]) == 5


def test_a_compaction_item_comes_back_as_its_summary_message() -> None:
    data = {"input": [{"type": "compaction", "encrypted_content": seal(SUMMARY)}, USER]}
    expanded = expand_compactions(data, summary_prefix="Earlier:", upstream_compacts=False)
    assert expanded is not None
    assert expanded["input"][0]["role"] == "user"
    assert expanded["input"][0]["content"][0]["text"] == f"Earlier:\n\n{SUMMARY.text}"
    assert expanded["input"][1] == USER
    assert expand_compactions({"input": [USER]}, summary_prefix="", upstream_compacts=False) is None


def test_a_compaction_item_proxai_did_not_make_is_a_400_for_an_upstream_that_does_not_compact() -> (
    None
):
    openai_item = {"type": "compaction", "encrypted_content": "gAAAAABopaque"}
    data = {"input": [USER, openai_item]}
    with pytest.raises(ProxyError) as refused:
        expand_compactions(data, summary_prefix="", upstream_compacts=False)
    assert refused.value.status == 400
    assert refused.value.param == "input[1].encrypted_content"
    assert "not made by proxai" in refused.value.message
    # An upstream that compacts reads its own; proxai's alone become summaries for it.
    ours = {"type": "compaction", "encrypted_content": seal(SUMMARY)}
    mixed = expand_compactions(
        {"input": [openai_item, ours]}, summary_prefix="", upstream_compacts=True
    )
    assert mixed is not None
    assert mixed["input"][0] == openai_item and mixed["input"][1]["role"] == "user"


def test_a_trigger_that_is_not_last_is_a_400() -> None:
    with pytest.raises(ProxyError) as refused:
        expand_compactions({"input": [TRIGGER, USER]}, summary_prefix="", upstream_compacts=False)
    assert refused.value.param == "input[0]"


def test_a_trigger_answered_earlier_in_the_history_is_left_out() -> None:
    """A request chained onto a compaction response holds that response's input (with its
    trigger) and then its output (the compaction item)."""
    compaction = {"type": "compaction", "encrypted_content": seal(SUMMARY)}
    data = {"input": [USER, TRIGGER, compaction, {"role": "user", "content": "Go on."}]}
    expanded = expand_compactions(data, summary_prefix="", upstream_compacts=False)
    assert expanded is not None
    kinds = [i.get("type", "message") for i in expanded["input"]]
    assert kinds == ["message", "message", "message"]
    assert expanded["input"][1]["content"][0]["text"] == SUMMARY.text
