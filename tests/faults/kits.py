"""One kit per API of :data:`proxai.protocols.table.APIS`: the bytes an upstream has
sent at each stage of a stream, and how a client of that API recognises proxai's error.

The fault matrix plays each stage followed by each fault; the expectations live in
:mod:`tests.faults.cases` so the same table drives the tests and docs/reliability.md.
The kits are keyed by the table's :class:`WireApi` and each takes its path, its error
shape and its upstream's kind from the table's row; ``tests/faults/test_matrix.py``
fails while an API of the table has no kit. A kit's ``name`` is the label the matrix
shows in docs/reliability.md (``anthropic`` for the Messages API).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from proxai.errors import ErrorShape
from proxai.protocols.table import API_BY_WIRE, APIS, DEFAULT_KIND, Api, WireApi
from proxai.testing import chat_chunk, sse_event
from proxai.testing.seed import TURN1_EVENTS, TURN1_REQUEST
from proxai.testing.streams import data_frames

SSE_HEADERS = (("content-type", "text/event-stream; charset=utf-8"),)
STAGES = (
    "before_headers",
    "before_first_event",
    "mid_text",
    "mid_arguments",
    "mid_parallel_arguments",
    "before_terminal",
)


@attrs.frozen
class Kit:
    """What one API's streams look like, stage by stage."""

    wire: WireApi
    #: The matrix's label for it (docs/reliability.md's protocol column).
    name: str
    request: dict[str, Any]
    #: Bytes sent before the fault, for the stages after the headers.
    prefixes: dict[str, bytes]
    #: The in-stream error proxai appended, as ``(kind, message)``, read from the body.
    read_error: Callable[[bytes], tuple[str, str]]

    @property
    def api(self) -> Api:
        return API_BY_WIRE[self.wire]

    @property
    def path(self) -> str:
        """Where its requests go: the table's path (its fields from the request)."""
        return self.api.path.format(model=str(self.request["model"]))

    @property
    def error_shape(self) -> ErrorShape:
        """The error JSON its clients parse (what names the error: a code or a type)."""
        return self.api.sdk.error_shape

    @property
    def upstreams(self) -> dict[str, dict[str, Any]] | None:
        """An upstream of the kind that speaks it, when that is not the default upstream's."""
        if self.api.upstream is DEFAULT_KIND:
            return None
        name = self.api.upstream.value
        base_url = f"http://{name.replace('_', '-')}.test/v1"
        return {name: {"protocol": name, "base_url": base_url, "api_key": "sk-kit"}}


# --- Responses --------------------------------------------------------------------------------


def _responses_error(body: bytes) -> tuple[str, str]:
    error, failed = (json.loads(f.data) for f in data_frames(body)[-2:])
    assert error["type"] == "error" and failed["type"] == "response.failed"
    assert error["error"]["message"] == error["message"] == failed["response"]["error"]["message"]
    assert failed["response"]["status"] == "failed"
    assert failed["sequence_number"] == error["sequence_number"] + 1
    assert error["error"]["type"] == "server_error"
    assert error["code"] == error["error"]["code"] == failed["response"]["error"]["code"]
    return error["code"], error["message"]


def _item(kind: str, index: int, **fields: Any) -> dict[str, Any]:
    return {
        "type": "response.output_item.added",
        "output_index": index,
        "item": {"type": kind, **fields},
    }


def _fc(index: int) -> list[dict[str, Any]]:
    item_id = f"fc_{index}"
    return [
        _item(
            "function_call",
            index,
            id=item_id,
            call_id=f"call_{index}",
            name="get_weather",
            arguments="",
        ),
        {
            "type": "response.function_call_arguments.delta",
            "output_index": index,
            "item_id": item_id,
            "delta": '{"city":',
        },
    ]


def _responses_bytes(events: list[dict[str, Any]]) -> bytes:
    numbered = [{**e, "sequence_number": i} for i, e in enumerate(events)]
    return b"".join(sse_event(e) for e in numbered)


_CREATED = TURN1_EVENTS[0]
_MESSAGE = [
    _item("message", 0, id="msg_1", role="assistant", content=[]),
    {
        "type": "response.output_text.delta",
        "output_index": 0,
        "content_index": 0,
        "item_id": "msg_1",
        "delta": "今天",
    },
]

RESPONSES = Kit(
    WireApi.RESPONSES,
    name="responses",
    request=TURN1_REQUEST,
    prefixes={
        "mid_text": _responses_bytes([_CREATED, *_MESSAGE]),
        "mid_arguments": _responses_bytes([_CREATED, *_fc(0)]),
        "mid_parallel_arguments": _responses_bytes([_CREATED, *_fc(0), *_fc(1)]),
        "before_terminal": _responses_bytes(TURN1_EVENTS[:-1]),
    },
    read_error=_responses_error,
)


# --- Chat Completions -------------------------------------------------------------------------


def _chat(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return chat_chunk(delta, finish, model="m")


def _chat_call(index: int) -> bytes:
    return _chat(
        {
            "tool_calls": [
                {
                    "index": index,
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":'},
                }
            ]
        }
    )


def _chat_error(body: bytes) -> tuple[str, str]:
    frames = data_frames(body)
    assert frames[-1].data == b"[DONE]"
    error = json.loads(frames[-2].data)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "server_error"
    return error["code"], error["message"]


_ROLE = _chat({"role": "assistant", "content": None})

CHAT = Kit(
    WireApi.CHAT,
    name="chat",
    request={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    prefixes={
        "mid_text": _ROLE + _chat({"content": "今天"}),
        "mid_arguments": _ROLE + _chat_call(0),
        "mid_parallel_arguments": _ROLE + _chat_call(0) + _chat_call(1),
        "before_terminal": _ROLE + _chat_call(0) + _chat({}, finish="tool_calls"),
    },
    read_error=_chat_error,
)


# --- Messages (Anthropic's) -------------------------------------------------------------------


def _ant(kind: str, **fields: Any) -> bytes:
    payload = json.dumps({"type": kind, **fields}, ensure_ascii=False)
    return f"event: {kind}\ndata: {payload}\n\n".encode()


def _anthropic_error(body: bytes) -> tuple[str, str]:
    frame = data_frames(body)[-1]
    assert frame.event == "error"
    error = json.loads(frame.data)["error"]
    return error["type"], error["message"]


def _tool(index: int) -> bytes:
    return _ant(
        "content_block_start",
        index=index,
        content_block={
            "type": "tool_use",
            "id": f"toolu_{index}",
            "name": "get_weather",
            "input": {},
        },
    ) + _ant(
        "content_block_delta",
        index=index,
        delta={"type": "input_json_delta", "partial_json": '{"city":'},
    )


_START = _ant(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "m",
        "usage": {},
    },
)

MESSAGES = Kit(
    WireApi.MESSAGES,
    name="anthropic",
    request={
        "model": "m",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    },
    prefixes={
        "mid_text": _START
        + _ant("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + _ant("content_block_delta", index=0, delta={"type": "text_delta", "text": "今天"}),
        "mid_arguments": _START + _tool(0),
        # Anthropic streams blocks one after another: the first call done, the second open
        "mid_parallel_arguments": _START
        + _tool(0)
        + _ant("content_block_stop", index=0)
        + _tool(1),
        "before_terminal": _START
        + _tool(0)
        + _ant("content_block_stop", index=0)
        + _ant("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 3}),
    },
    read_error=_anthropic_error,
)

_KITS = {kit.wire: kit for kit in (RESPONSES, CHAT, MESSAGES)}
#: The kits of the table's APIs, in its order (an API without one is left out here, and
#: ``test_every_api_of_the_table_has_a_kit`` fails).
KITS = {api.wire: _KITS[api.wire] for api in APIS if api.wire in _KITS}
#: Kits of no API in the table (the same test fails on any).
STRAY_KITS = sorted(set(_KITS) - set(KITS))
