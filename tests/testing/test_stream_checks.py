"""The stream checks catch what real clients reject and pass what real servers send.

Each rule is shown broken once (where the SDK alone would let it through, that
is said), and every recorded upstream transcript goes through the checks and
the SDK oracles: a check that failed real OpenAI streams would prove nothing.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import openai
import orjson
import pytest

from proxai.testing import stream_checks as checks
from proxai.testing.stream_checks import StreamViolation
from tests.fixtures import CHAT_TRANSCRIPTS, Transcript, transcript_params


def sse(*events: dict[str, Any], named: bool = True) -> bytes:
    out = b""
    for event in events:
        line = b"event: " + event["type"].encode() + b"\n" if named else b""
        out += line + b"data: " + orjson.dumps(event) + b"\n\n"
    return out


# -- Messages ------------------------------------------------------------------------------

START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    },
}
END = [
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 2},
    },
    {"type": "message_stop"},
]


def block(index: int, kind: str, *deltas: dict[str, Any]) -> list[dict[str, Any]]:
    content: dict[str, Any] = {"type": kind, "text": ""} if kind == "text" else {}
    if kind == "thinking":
        content = {"type": "thinking", "thinking": "", "signature": ""}
    return [
        {"type": "content_block_start", "index": index, "content_block": content},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


TEXT = {"type": "text_delta", "text": "hi"}
THINKING = {"type": "thinking_delta", "thinking": "hm"}
SIGNATURE = {"type": "signature_delta", "signature": "s"}


def test_a_well_formed_messages_stream_passes() -> None:
    body = sse(START, *block(0, "thinking", THINKING, SIGNATURE), *block(1, "text", TEXT), *END)
    assert [e["type"] for e in checks.check_messages_stream(body)][-2:] == [
        "message_delta",
        "message_stop",
    ]
    assert checks.messages_final(body).content[1].type == "text"


def test_thinking_delta_into_a_text_block_is_caught_though_the_sdk_lets_it_through() -> None:
    body = sse(START, *block(0, "text", TEXT, THINKING), *END)
    assert checks.messages_final(body).content[0].type == "text"  # the SDK says nothing
    with pytest.raises(StreamViolation, match="thinking_delta into a text block"):
        checks.check_messages_stream(body)


def test_a_thinking_block_without_signature_is_caught() -> None:
    body = sse(START, *block(0, "thinking", THINKING), *END)
    with pytest.raises(StreamViolation, match="without a signature_delta"):
        checks.check_messages_stream(body)


def test_two_blocks_open_at_once_are_caught() -> None:
    first, *rest = block(1, "text", TEXT)
    body = sse(START, *block(0, "text", TEXT)[:2], first, *rest, *END)
    with pytest.raises(StreamViolation, match="opens while 0 is open"):
        checks.check_messages_stream(body)


def test_blocks_out_of_opening_order_are_caught() -> None:
    body = sse(START, *block(1, "text", TEXT), *END)
    with pytest.raises(StreamViolation, match="out of order"):
        checks.check_messages_stream(body)


def test_a_messages_stream_without_event_lines_is_caught() -> None:
    body = sse(START, *block(0, "text", TEXT), *END, named=False)
    with pytest.raises(StreamViolation, match="no event: line"):
        checks.check_messages_stream(body)


def test_a_messages_stream_cut_before_message_stop_is_caught() -> None:
    body = sse(START, *block(0, "text", TEXT))
    checks.messages_final(body)  # the SDK returns what it has
    with pytest.raises(StreamViolation, match="does not end in message_stop"):
        checks.check_messages_stream(body)


# -- Responses -----------------------------------------------------------------------------


def responses_stream(*middle: dict[str, Any], terminal: str = "response.completed") -> bytes:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    events = [
        {"type": "response.created", "response": response},
        *middle,
        {"type": terminal, "response": response | {"status": "completed"}},
    ]
    return sse(*({"sequence_number": n} | e for n, e in enumerate(events)))


ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress"}


def test_an_output_index_out_of_order_is_caught() -> None:
    body = responses_stream({"type": "response.output_item.added", "output_index": 1, "item": ITEM})
    with pytest.raises(StreamViolation, match="output_index out of order"):
        checks.check_responses_stream(body)


def test_text_before_its_content_part_is_caught() -> None:
    added = {"type": "response.output_item.added", "output_index": 0, "item": ITEM}
    delta = {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "hi",
    }
    with pytest.raises(StreamViolation, match=r"before its content_part\.added"):
        checks.check_responses_stream(responses_stream(added, delta))


def test_completing_with_an_item_open_is_caught() -> None:
    added = {"type": "response.output_item.added", "output_index": 0, "item": ITEM}
    with pytest.raises(StreamViolation, match="items still open"):
        checks.check_responses_stream(responses_stream(added))


def test_a_gap_in_sequence_numbers_is_caught() -> None:
    body = responses_stream().replace(b'"sequence_number":1', b'"sequence_number":2')
    with pytest.raises(StreamViolation, match="sequence_number"):
        checks.check_responses_stream(body)


def test_an_event_line_that_differs_from_the_type_is_caught() -> None:
    body = responses_stream().replace(b"event: response.completed", b"event: done")
    with pytest.raises(StreamViolation, match=r"carries type response\.completed"):
        checks.check_responses_stream(body)


def test_anything_after_the_terminal_is_caught() -> None:
    body = responses_stream() + sse({"type": "response.in_progress", "sequence_number": 2})
    with pytest.raises(StreamViolation, match="not where a terminal goes"):
        checks.check_responses_stream(body)


#: Recorded before sequence_number existed (fixtures README): the check demands it.
UNNUMBERED = {"responses_function_call_then_text.1.sse", "responses_function_call_then_text.2.sse"}


# openai-python warns while copying a web_search action type newer than its types ("api").
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("transcript", transcript_params())
def test_recorded_responses_streams_pass_the_checks_and_the_sdk(transcript: Transcript) -> None:
    if transcript.name in UNNUMBERED:
        with pytest.raises(StreamViolation, match="sequence_number"):
            checks.check_responses_stream(transcript.body)
    else:
        checks.check_responses_stream(transcript.body)
    if b"response.failed" in transcript.body:
        with pytest.raises(openai.APIError):
            checks.responses_final(transcript.body, strict=False)
    else:
        assert checks.responses_final(transcript.body, strict=False).status == "completed"


# -- Chat Completions ----------------------------------------------------------------------


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
    }


def chat_stream(*chunks: dict[str, Any]) -> bytes:
    return sse(*chunks, named=False) + b"data: [DONE]\n\n"


def call(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


def test_a_tool_call_opening_out_of_order_is_caught() -> None:
    opening = call(1, id="call_1", type="function", function={"name": "f", "arguments": ""})
    with pytest.raises(StreamViolation, match="opens out of order"):
        checks.check_chat_stream(chat_stream(chunk(opening)))


def test_arguments_before_their_call_opened_are_caught() -> None:
    arguments = call(0, function={"arguments": "{}"})
    with pytest.raises(StreamViolation, match="arguments for tool call 0 first"):
        checks.check_chat_stream(chat_stream(chunk(arguments)))


def test_a_chunk_after_the_finish_reason_is_caught() -> None:
    body = chat_stream(chunk({}, "stop"), chunk({"content": "more"}))
    with pytest.raises(StreamViolation, match="after finish_reason"):
        checks.check_chat_stream(body)


@pytest.mark.parametrize("transcript", transcript_params(CHAT_TRANSCRIPTS))
def test_recorded_chat_streams_pass_the_checks_and_the_sdk(transcript: Transcript) -> None:
    if transcript.name == "chat_groq_inband_error.1.sse":  # Groq ends an error without [DONE]
        with pytest.raises(StreamViolation, match=r"does not end in \[DONE\]"):
            checks.check_chat_stream(transcript.body)
        with pytest.raises(openai.APIError):
            checks.chat_final(transcript.body)
        return
    chunks = checks.check_chat_stream(transcript.body)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    final = checks.chat_final(transcript.body)
    assert [r for r in reasons if r] == [final.choices[0].finish_reason]


def test_the_checks_import_and_run_without_the_sdks() -> None:
    """Only the oracles need openai and anthropic: code behind proxai can check streams with
    proxai alone (an import of a blocked module raises ImportError)."""
    code = (
        "import sys\n"
        "for name in ('openai', 'anthropic', 'httpx2'):\n"
        "    sys.modules[name] = None\n"
        "from proxai.testing import stream_checks as checks\n"
        'body = b\'data: {"id":"c","object":"chat.completion.chunk","created":1,\'\n'
        'body += b\'"model":"m","choices":[{"index":0,"delta":{"content":"hi"},\'\n'
        'body += b\'"finish_reason":"stop"}]}\\n\\ndata: [DONE]\\n\\n\'\n'
        "print(len(checks.check_chat_stream(body)))\n"
        "try:\n"
        "    checks.chat_final(body)\n"
        "except ImportError:\n"
        "    print('oracle needs the sdk')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["1", "oracle needs the sdk"]
