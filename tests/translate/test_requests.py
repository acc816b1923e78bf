"""Request translation: each pair field by field, real clients' request shapes, errors both ways.

Translated bodies are checked against the SDKs' own request TypedDicts
(``tests/sdk_types.py``); translated errors are fed to the SDKs, which must
raise the exception class the status means and read the upstream's words.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from anthropic.types.message_create_params import (
    MessageCreateParamsBase,
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsBase,
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming,
    ResponseCreateParamsStreaming,
)

from proxai.config import MaxTokensField, TranslationOptions
from proxai.errors import ProxyError
from proxai.protocols.messages.count_tokens import IMAGE_TOKENS, MESSAGE_TOKENS
from proxai.protocols.names import WireApi
from proxai.testing.seed import TURN1_REQUEST, TURN2_REQUEST, WEATHER_ARGUMENTS, WEATHER_RESULT
from proxai.translate.encoders.messages import MessagesEncoder
from proxai.translate.ir import (
    CUSTOM_TOOL_PARAMETER,
    TOOL_ID_ESCAPE,
    Finished,
    FinishReason,
    ItemDelta,
    ItemDone,
    ItemKind,
    ItemStarted,
    Started,
    TranslationContext,
    escape_tool_id,
    unescape_tool_id,
    wrap_reasoning,
)
from proxai.translate.requests import (
    TRANSLATORS,
    count_tokens_body,
    estimate_input_tokens,
    translate_error_body,
    translate_request,
)
from proxai.translate.requests.messages_to_chat import effort_of_budget
from tests.sdk_types import type_errors

RESPONSES, CHAT, MESSAGES = WireApi.RESPONSES, WireApi.CHAT, WireApi.MESSAGES
DEFAULT = TranslationOptions()
#: What a Chat body may carry beyond openai's types: DeepSeek's reasoning round trip.
CHAT_EXTENSIONS = frozenset({"reasoning_content"})

JSON = Any


def translate(
    client: WireApi, upstream: WireApi, body: dict[str, JSON], options: TranslationOptions = DEFAULT
) -> tuple[dict[str, JSON], TranslationContext]:
    """Translate, and check what every translation must hold: the client's body untouched,
    the upstream's body of the upstream's type."""
    before = copy.deepcopy(body)
    out, ctx = translate_request(client, upstream, body, options)
    assert body == before
    assert (ctx.client, ctx.upstream) == (client, upstream)
    json.dumps(out)  # plain JSON all the way down
    streaming = bool(out.get("stream"))
    types = {
        CHAT: (CompletionCreateParamsNonStreaming, CompletionCreateParamsStreaming),
        RESPONSES: (ResponseCreateParamsNonStreaming, ResponseCreateParamsStreaming),
        MESSAGES: (MessageCreateParamsNonStreaming, MessageCreateParamsStreaming),
    }
    extra = CHAT_EXTENSIONS if upstream is CHAT else frozenset()
    assert type_errors(out, types[upstream][streaming], extra=extra) == []
    return out, ctx


def compact(value: JSON) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def refused(
    client: WireApi, upstream: WireApi, body: dict[str, JSON], **options: Any
) -> ProxyError:
    with pytest.raises(ProxyError) as caught:
        translate_request(client, upstream, body, TranslationOptions(**options))
    error = caught.value
    assert (error.status, error.type) == (400, "invalid_request_error")
    return error


def test_the_type_checker_is_not_vacuous() -> None:
    bad = {"model": "m", "messages": [{"role": "user", "content": "hi", "extra": 1}], "n": "2"}
    assert type_errors(bad, CompletionCreateParamsBase) == [
        "$.messages[0]: ChatCompletionUserMessageParam has no key 'extra'",
        "$.n: expected an integer, got '2'",
    ]
    assert type_errors({"model": "m", "messages": []}, MessageCreateParamsBase) == [
        "$: MessageCreateParamsBase requires 'max_tokens'"
    ]


def test_every_pair_of_different_apis_has_a_translator() -> None:
    pairs = {(a, b) for a in WireApi for b in WireApi if a is not b}
    assert set(TRANSLATORS) == pairs


# --- Responses -> Chat --------------------------------------------------------------------


def test_seed_turn1_becomes_the_chat_request_a_chat_server_expects() -> None:
    out, ctx = translate(RESPONSES, CHAT, TURN1_REQUEST)
    assert out == {
        "model": "gpt-5.4",
        "messages": [{"role": "user", "content": TURN1_REQUEST["input"][0]["content"][0]["text"]}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "查询指定城市的天气和空气质量摘要。",
                    "parameters": TURN1_REQUEST["tools"][0]["parameters"],
                    "strict": True,
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert ctx.dropped == ["tools.web_search"]
    assert ctx.stream is True and ctx.model == "gpt-5.4"
    assert ctx.echo == {
        "tools": TURN1_REQUEST["tools"],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
    }


def test_seed_turn1_hosted_web_search_is_refused_when_the_upstream_is_strict() -> None:
    error = refused(RESPONSES, CHAT, TURN1_REQUEST, strict=True)
    assert error.param == "tools[1]"
    assert "web_search" in error.message


def test_seed_turn2_previous_response_id_is_refused_with_its_param() -> None:
    error = refused(RESPONSES, CHAT, TURN2_REQUEST)
    assert error.param == "previous_response_id"
    assert "send the whole conversation" in error.message


@pytest.mark.parametrize(
    ("field", "value"), [("conversation", "conv_1"), ("conversation", {"id": "conv_1"})]
)
def test_a_conversation_is_refused_with_its_param(field: str, value: JSON) -> None:
    assert refused(RESPONSES, CHAT, {"model": "m", "input": "hi", field: value}).param == field


def test_blank_ids_some_clients_send_for_none_are_not_state() -> None:
    body = {"model": "m", "input": "hi", "previous_response_id": "", "conversation": None}
    out, _ = translate(RESPONSES, CHAT, body)
    assert out["messages"] == [{"role": "user", "content": "hi"}]


def test_an_item_reference_is_refused_with_its_path() -> None:
    body = {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}
    assert refused(RESPONSES, CHAT, body).param == "input[0]"


def test_seed_turn2_as_codex_sends_it_whole_history_and_store_false() -> None:
    call = {
        "type": "function_call",
        "id": "fc_01",
        "call_id": "call_weather_01",
        "name": "get_weather",
        "arguments": WEATHER_ARGUMENTS,
        "status": "completed",
    }
    output = {
        "type": "function_call_output",
        "call_id": "call_weather_01",
        "output": WEATHER_RESULT,
    }
    turn2 = {k: v for k, v in TURN2_REQUEST.items() if k != "previous_response_id"}
    body = {
        **TURN1_REQUEST,
        **turn2,
        "store": False,
        "input": TURN1_REQUEST["input"] + [call, output],
    }
    out, ctx = translate(RESPONSES, CHAT, body)
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_weather_01",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": WEATHER_ARGUMENTS},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_weather_01", "content": WEATHER_RESULT},
    ]
    assert "store" not in out
    assert ctx.dropped == ["tools.web_search"]


CODEX_INSTRUCTIONS = "You are Codex, a coding agent running in the terminal."
CODEX_PERMISSIONS = (
    "<permissions instructions>sandbox_mode: workspace-write</permissions instructions>"
)
CODEX_ENVIRONMENT = "<environment_context><cwd>/repo</cwd></environment_context>"
APPLY_PATCH_GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF'
SHELL_PARAMETERS = {
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    "required": ["command"],
    "additionalProperties": False,
}


def codex_request(history: list[JSON]) -> dict[str, JSON]:
    """A request shaped as Codex sends it: instructions, a developer message, the
    environment, function + freeform + hosted tools, reasoning with its envelope."""
    return {
        "model": "gpt-5.4",
        "instructions": CODEX_INSTRUCTIONS,
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": CODEX_PERMISSIONS}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": CODEX_ENVIRONMENT}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Fix the failing test"}],
            },
            *history,
        ],
        "tools": [
            {
                "type": "function",
                "name": "shell",
                "description": "Runs a shell command and returns its output.",
                "strict": False,
                "parameters": SHELL_PARAMETERS,
            },
            {
                "type": "custom",
                "name": "apply_patch",
                "description": "Use the `apply_patch` tool to edit files.",
                "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
            },
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-session",
        "text": {"verbosity": "low"},
    }


def test_a_codex_first_turn_becomes_the_expected_chat_body() -> None:
    out, ctx = translate(RESPONSES, CHAT, codex_request([]))
    assert out == {
        "model": "gpt-5.4",
        "messages": [
            {"role": "system", "content": f"{CODEX_INSTRUCTIONS}\n\n{CODEX_PERMISSIONS}"},
            {"role": "user", "content": CODEX_ENVIRONMENT},
            {"role": "user", "content": "Fix the failing test"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "shell",
                    "description": "Runs a shell command and returns its output.",
                    "parameters": SHELL_PARAMETERS,
                    "strict": False,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "apply_patch",
                    "description": "Use the `apply_patch` tool to edit files.\n\n"
                    "The `input` must match this lark grammar:\n" + APPLY_PATCH_GRAMMAR,
                    "parameters": {
                        "type": "object",
                        "properties": {"input": {"type": "string"}},
                        "required": ["input"],
                        "additionalProperties": False,
                    },
                },
            },
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "verbosity": "low",
        "reasoning_effort": "medium",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert ctx.custom_tools == frozenset({"apply_patch"})
    assert ctx.reasoning_envelope is True
    assert ctx.dropped == ["tools.web_search", "reasoning.summary", "prompt_cache_key"]
    assert ctx.echo["instructions"] == CODEX_INSTRUCTIONS
    assert ctx.echo["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert ctx.echo["text"] == {"verbosity": "low"}
    assert ctx.echo["store"] is False


PATCH = "*** Begin Patch\n*** Update File: t.py\n-assert 1 == 2\n+assert 1 == 1\n*** End Patch"


def test_a_codex_second_turn_restores_reasoning_and_groups_its_calls() -> None:
    history = [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "encrypted_content": wrap_reasoning("The test compares 1 with 2."),
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Looking."}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"command":["pytest"]}',
        },
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": PATCH},
        {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done!"},
    ]
    out, ctx = translate(RESPONSES, CHAT, codex_request(history))
    assert out["messages"][3:] == [
        {
            "role": "assistant",
            "content": "Looking.",
            "reasoning_content": "The test compares 1 with 2.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"command":["pytest"]}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": compact({"input": PATCH})},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "1 failed"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Done!"},
    ]
    assert json.loads(out["messages"][3]["tool_calls"][1]["function"]["arguments"]) == {
        CUSTOM_TOOL_PARAMETER: PATCH
    }
    assert "input.reasoning" not in ctx.dropped


def test_reasoning_that_is_not_proxais_envelope_is_dropped_never_a_user_message() -> None:
    history = [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "encrypted_content": "gAAAAB-openai-blob",
        },
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
    ]
    out, ctx = translate(RESPONSES, CHAT, codex_request(history))
    assert [m["role"] for m in out["messages"]] == ["system", "user", "user", "assistant"]
    assert "reasoning_content" not in out["messages"][-1]
    assert "input.reasoning" in ctx.dropped
    assert "gAAAAB" not in json.dumps(out)


def _reasoning_then_call(reasoning: dict[str, JSON]) -> dict[str, JSON]:
    call = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
    return {"model": "m", "input": [{"role": "user", "content": "go"}, reasoning, call]}


@pytest.mark.parametrize(
    ("reasoning", "restored"),
    [
        # As proxai streamed it and the openai SDK hands it back (no envelope asked for).
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Check the tests."}],
            },
            "Check the tests.",
        ),
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [
                    {"type": "reasoning_text", "text": "Check "},
                    {"type": "reasoning_text", "text": "the tests."},
                ],
            },
            "Check the tests.",
        ),
        # Only a summary (an OpenAI turn before a fail-over): its parts, one per paragraph.
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [
                    {"type": "summary_text", "text": "**Plan** Run the tests."},
                    {"type": "summary_text", "text": "Then fix."},
                ],
                "encrypted_content": "gAAAAB-openai-blob",
            },
            "**Plan** Run the tests.\n\nThen fix.",
        ),
        # The item's own text wins over its summary; proxai's envelope over both.
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "short"}],
                "content": [{"type": "reasoning_text", "text": "long"}],
            },
            "long",
        ),
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "long"}],
                "encrypted_content": wrap_reasoning("long"),
            },
            "long",
        ),
    ],
)
def test_reasoning_comes_back_from_the_items_own_text_or_summary(
    reasoning: dict[str, JSON], restored: str
) -> None:
    out, ctx = translate(RESPONSES, CHAT, _reasoning_then_call(reasoning))
    assistant = out["messages"][-1]
    assert assistant["reasoning_content"] == restored
    assert assistant["tool_calls"][0]["id"] == "c1"
    assert "input.reasoning" not in ctx.dropped
    assert "gAAAAB" not in json.dumps(out)


@pytest.mark.parametrize(
    "reasoning",
    [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": []},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": ""}]},
        {"type": "reasoning", "summary": "not a list", "content": [{"type": "other"}, 7]},
    ],
)
def test_a_reasoning_item_with_no_text_is_dropped(reasoning: dict[str, JSON]) -> None:
    out, ctx = translate(RESPONSES, CHAT, _reasoning_then_call(reasoning))
    assert "reasoning_content" not in out["messages"][-1]
    assert ctx.dropped == ["input.reasoning"]


def test_restored_reasoning_with_no_assistant_message_after_it_is_dropped() -> None:
    body = {
        "model": "m",
        "input": [
            {"type": "reasoning", "summary": [], "encrypted_content": wrap_reasoning("hmm")},
            {"role": "user", "content": "next"},
        ],
    }
    out, ctx = translate(RESPONSES, CHAT, body)
    assert out["messages"] == [{"role": "user", "content": "next"}]
    assert ctx.dropped == ["input.reasoning"]


def test_instructions_become_the_system_message_and_a_string_input_one_user_message() -> None:
    out, _ = translate(RESPONSES, CHAT, {"model": "m", "instructions": "Be terse.", "input": "Hi"})
    assert out["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
    ]


def test_message_parts_become_chat_parts() -> None:
    content = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "high"},
        {"type": "input_file", "file_id": "file_1", "filename": "a.pdf"},
    ]
    history = [
        {"role": "user", "content": content},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A cat."}],
        },
    ]
    out, _ = translate(RESPONSES, CHAT, {"model": "m", "input": history})
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"},
                },
                {"type": "file", "file": {"file_id": "file_1", "filename": "a.pdf"}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
    ]


def test_an_image_known_only_by_file_id_is_refused_with_its_path() -> None:
    body = {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}],
    }
    assert refused(RESPONSES, CHAT, body).param == "input[0].content[0]"


def test_developer_messages_join_the_leading_system_message_later_ones_stay_in_place() -> None:
    body = {
        "model": "m",
        "instructions": "A",
        "input": [
            {"role": "developer", "content": "B"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": [{"type": "input_text", "text": "C"}]},
        ],
    }
    out, _ = translate(RESPONSES, CHAT, body)
    assert out["messages"] == [
        {"role": "system", "content": "A\n\nB"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "C"},
    ]


def test_a_list_tool_output_is_flattened_and_its_image_follows_the_tool_messages() -> None:
    image = {"type": "input_image", "image_url": "https://example.com/shot.png"}
    history = [
        {"type": "function_call", "call_id": "a", "name": "screenshot", "arguments": ""},
        {"type": "function_call", "call_id": "b", "name": "ls", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "a",
            "output": [
                {"type": "input_text", "text": "taken"},
                image,
                {"type": "input_text", "text": "ok"},
            ],
        },
        {"type": "function_call_output", "call_id": "b", "output": "a.txt"},
        {"role": "user", "content": "and?"},
    ]
    out, _ = translate(RESPONSES, CHAT, {"model": "m", "input": history})
    assert out["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "screenshot", "arguments": "{}"},
                },
                {"id": "b", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "taken\nok"},
        {"role": "tool", "tool_call_id": "b", "content": "a.txt"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}}
            ],
        },
        {"role": "user", "content": "and?"},
    ]


def test_hosted_tool_calls_in_the_history_are_dropped_and_listed() -> None:
    history = [
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search"},
        },
        {"type": "local_shell_call_output", "id": "x", "output": "ok"},
        {"role": "user", "content": "hi"},
    ]
    out, ctx = translate(RESPONSES, CHAT, {"model": "m", "input": history})
    assert out["messages"] == [{"role": "user", "content": "hi"}]
    assert ctx.dropped == ["input.web_search_call", "input.local_shell_call_output"]


@pytest.mark.parametrize(
    "hosted",
    [
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.example"},
        {"type": "image_generation"},
        {
            "type": "computer_use_preview",
            "display_width": 1,
            "display_height": 1,
            "environment": "linux",
        },
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "shell"},
        {"type": "local_shell"},
        {"type": "tool_search"},
    ],
)
def test_each_hosted_tool_is_dropped_and_listed_or_refused_when_strict(hosted: JSON) -> None:
    body = {"model": "m", "input": "hi", "tools": [hosted]}
    out, ctx = translate(RESPONSES, CHAT, body)
    assert "tools" not in out
    assert ctx.dropped == [f"tools.{hosted['type']}"]
    assert refused(RESPONSES, CHAT, body, strict=True).param == "tools[0]"


def test_function_parameters_are_forced_to_an_object_schema() -> None:
    tools = [
        {"type": "function", "name": "a"},
        {"type": "function", "name": "b", "parameters": {"properties": {"x": {"type": "integer"}}}},
        {"type": "function", "name": "c", "parameters": None, "defer_loading": True},
    ]
    out, ctx = translate(RESPONSES, CHAT, {"model": "m", "input": "hi", "tools": tools})
    assert [t["function"]["parameters"] for t in out["tools"]] == [
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"x": {"type": "integer"}}},
        {"type": "object", "properties": {}},
    ]
    assert ctx.dropped == ["tools.defer_loading"]


TOOLS = [
    {"type": "function", "name": "f", "parameters": {"type": "object"}},
    {"type": "custom", "name": "g"},
    {"type": "web_search"},
]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("required", "required"),
        ("none", "none"),
        ({"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
        ({"type": "custom", "name": "g"}, {"type": "function", "function": {"name": "g"}}),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}],
            },
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "f"}}],
                },
            },
        ),
        ({"type": "web_search_preview"}, None),
    ],
)
def test_tool_choice_maps_to_chat(choice: JSON, expected: JSON) -> None:
    out, ctx = translate(
        RESPONSES, CHAT, {"model": "m", "input": "hi", "tools": TOOLS, "tool_choice": choice}
    )
    assert out.get("tool_choice") == expected
    assert ("tool_choice" in ctx.dropped) is (expected is None)


def test_tool_choice_and_parallel_calls_are_not_sent_without_tools() -> None:
    body = {"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}
    out, _ = translate(
        RESPONSES, CHAT, {**body, "tool_choice": "required", "parallel_tool_calls": True}
    )
    assert "tool_choice" not in out and "parallel_tool_calls" not in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ({"format": {"type": "text"}}, {}),
        ({"format": {"type": "json_object"}}, {"response_format": {"type": "json_object"}}),
        (
            {
                "format": {
                    "type": "json_schema",
                    "name": "answer",
                    "schema": {"type": "object"},
                    "strict": True,
                    "description": "d",
                },
                "verbosity": "high",
            },
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "answer",
                        "schema": {"type": "object"},
                        "strict": True,
                        "description": "d",
                    },
                },
                "verbosity": "high",
            },
        ),
    ],
)
def test_text_format_and_verbosity_map_to_chat(text: JSON, expected: JSON) -> None:
    out, _ = translate(RESPONSES, CHAT, {"model": "m", "input": "hi", "text": text})
    assert {k: v for k, v in out.items() if k in ("response_format", "verbosity")} == expected


@pytest.mark.parametrize("field", list(MaxTokensField))
def test_max_output_tokens_goes_in_the_upstreams_field(field: MaxTokensField) -> None:
    body = {"model": "m", "input": "hi", "max_output_tokens": 300}
    out, _ = translate(RESPONSES, CHAT, body, TranslationOptions(max_tokens_field=field))
    assert out[field.value] == 300
    assert {"max_tokens", "max_completion_tokens"} - {field.value} <= set(MaxTokensField) - set(out)


def test_reasoning_effort_is_a_string_and_sampling_is_kept() -> None:
    body = {
        "model": "m",
        "input": "hi",
        "reasoning": {"effort": "high"},
        "temperature": 0.3,
        "top_p": 0.9,
        "user": "u",
        "metadata": {"k": "v"},
        "store": True,
    }
    out, ctx = translate(RESPONSES, CHAT, body)
    assert out == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning_effort": "high",
        "temperature": 0.3,
        "top_p": 0.9,
        "user": "u",
    }
    assert ctx.dropped == []
    assert ctx.echo["metadata"] == {"k": "v"}
    assert ctx.echo["store"] is False  # nothing was stored, whatever was asked


def test_a_request_that_does_not_stream_asks_for_no_stream_options() -> None:
    out, ctx = translate(RESPONSES, CHAT, {"model": "m", "input": "hi", "stream": False})
    assert "stream" not in out and "stream_options" not in out
    assert ctx.stream is False


@pytest.mark.parametrize(("field", "value"), [("background", True), ("prompt", {"id": "pmpt_1"})])
def test_stored_features_are_refused(field: str, value: JSON) -> None:
    assert refused(RESPONSES, CHAT, {"model": "m", "input": "hi", field: value}).param == field


# --- Anthropic Messages -> Chat -----------------------------------------------------------

LONG_TOOL = "mcp__github__create_pull_request_from_the_current_branch_with_a_generated_title"
CLAUDE_SIGNATURE = "EqQBCkYIBxgCKkBHxU1aWL3a7z6Tz+signed-by-anthropic"
BASH_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
    "required": ["command"],
    "additionalProperties": False,
}
EPHEMERAL = {"type": "ephemeral"}

#: ``POST /v1/messages?beta=true`` as Claude Code sends it (the query string is the relay's).
CLAUDE_CODE_REQUEST: dict[str, JSON] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "stream": True,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli"},
        {
            "type": "text",
            "text": "You are Claude Code, Anthropic's official CLI.",
            "cache_control": EPHEMERAL,
        },
        {
            "type": "text",
            "text": "Use the tools.",
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        },
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>Run make test.</system-reminder>"},
                {"type": "text", "text": "Fix the failing test", "cache_control": EPHEMERAL},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "Run the tests first.",
                    "signature": CLAUDE_SIGNATURE,
                },
                {"type": "text", "text": "I'll run the tests."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "Bash",
                    "input": {"command": "make test", "description": "Run tests"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "1 failed"}],
                    "is_error": True,
                    "cache_control": EPHEMERAL,
                }
            ],
        },
        {"role": "system", "content": "The user switched to plan mode."},
        {"role": "user", "content": "continue"},
    ],
    "tools": [
        {"name": "Bash", "description": "Run a shell command.", "input_schema": BASH_SCHEMA},
        {
            "name": LONG_TOOL,
            "description": "Open a pull request.",
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            "defer_loading": True,
            "cache_control": EPHEMERAL,
        },
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    ],
    "tool_choice": {"type": "auto"},
    "metadata": {"user_id": "user_2f6c_account_8d1e_session_47aa"},
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "high"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "temperature": 1,
}


def test_claude_codes_request_translates_with_everything_unknown_listed_and_no_400() -> None:
    assert len(LONG_TOOL) > 64
    out, ctx = translate(MESSAGES, CHAT, CLAUDE_CODE_REQUEST)
    (short,) = ctx.tool_names
    assert out == {
        "model": "claude-sonnet-4-5",
        "messages": [
            {
                "role": "system",
                "content": "x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli\n\n"
                "You are Claude Code, Anthropic's official CLI.\n\nUse the tools.",
            },
            {
                "role": "user",
                "content": "<system-reminder>Run make test.</system-reminder>\n"
                "Fix the failing test",
            },
            {
                "role": "assistant",
                "content": "I'll run the tests.",
                "tool_calls": [
                    {
                        "id": "toolu_01",
                        "type": "function",
                        "function": {
                            "name": "Bash",
                            "arguments": '{"command":"make test","description":"Run tests"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_01", "content": "Error: 1 failed"},
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "user", "content": "continue"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "description": "Run a shell command.",
                    "parameters": BASH_SCHEMA,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": short,
                    "description": "Open a pull request.",
                    "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
                },
            },
        ],
        "tool_choice": "auto",
        "max_tokens": 32000,
        "temperature": 1,
        "user": "user_2f6c_account_8d1e_session_47aa",
        "reasoning_effort": "high",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert ctx.dropped == [
        "tools.defer_loading",
        "tools.tool_search_tool_regex_20251119",
        "messages.thinking",  # signed by Anthropic: only Anthropic can read it
        "context_management",
    ]
    assert ctx.client_tool_name(short) == LONG_TOOL


def test_claude_codes_request_goes_to_a_responses_upstream_too() -> None:
    out, ctx = translate(MESSAGES, RESPONSES, CLAUDE_CODE_REQUEST)
    assert out["instructions"].startswith("x-anthropic-billing-header")
    assert [item.get("role", item["type"]) for item in out["input"]] == [
        "user",
        "assistant",
        "function_call",
        "function_call_output",
        "system",
        "user",
    ]
    assert out["reasoning"] == {"effort": "high"}
    assert out["max_output_tokens"] == 32000
    assert out["store"] is False
    assert [tool["strict"] for tool in out["tools"]] == [False, False]
    assert ctx.client_tool_name(out["tools"][1]["name"]) == LONG_TOOL
    assert ctx.include_usage is False


def test_long_tool_names_are_shortened_the_same_way_everywhere_and_come_back_whole() -> None:
    other = LONG_TOOL + "_and_more"
    body = {
        "model": "m",
        "max_tokens": 10,
        "tools": [
            {"name": LONG_TOOL, "input_schema": {"type": "object"}},
            {"name": other, "input_schema": {}},
        ],
        "tool_choice": {"type": "tool", "name": LONG_TOOL},
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": LONG_TOOL, "input": {}}],
            },
        ],
    }
    out, ctx = translate(MESSAGES, CHAT, body)
    names = [tool["function"]["name"] for tool in out["tools"]]
    assert all(len(name) == 64 for name in names) and len(set(names)) == 2
    assert out["tool_choice"] == {"type": "function", "function": {"name": names[0]}}
    assert out["messages"][1]["tool_calls"][0]["function"]["name"] == names[0]
    assert [ctx.client_tool_name(name) for name in names] == [LONG_TOOL, other]
    assert ctx.client_tool_name("Bash") == "Bash"
    again, _ = translate(MESSAGES, CHAT, body)
    assert [tool["function"]["name"] for tool in again["tools"]] == names  # stable across turns


def test_system_as_a_string_and_user_images_by_data_and_url() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": "Be kind.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/a.jpg"},
                    },
                    {"type": "text", "text": "Same?"},
                ],
            }
        ],
    }
    out, _ = translate(MESSAGES, CHAT, body)
    assert out["messages"] == [
        {"role": "system", "content": "Be kind."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
                {"type": "text", "text": "Same?"},
            ],
        },
    ]


def test_tool_results_come_first_and_their_images_move_to_the_user_message_after() -> None:
    shot = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "shot", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "ls", "input": {"dir": "."}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here you go"},
                    {"type": "tool_result", "tool_use_id": "a", "content": [shot]},
                    {"type": "tool_result", "tool_use_id": "b", "content": "x.txt"},
                ],
            },
        ],
    }
    out, _ = translate(MESSAGES, CHAT, body)
    assert out["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "shot", "arguments": "{}"}},
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"dir":"."}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "a",
            "content": "[1 image(s) attached in the next user message]",
        },
        {"role": "tool", "tool_call_id": "b", "content": "x.txt"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "Here you go"},
            ],
        },
    ]


#: Anthropic's pattern for tool ids: its API refuses a ``tool_use.id`` of any other shape.
ANTHROPIC_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")
#: Tool-call ids as upstreams issue them: Kimi K2's ``functions.NAME:N``, ids Anthropic
#: accepts as they are, ids that look like proxai's escaped ones, and anything at all.
UPSTREAM_TOOL_IDS = st.one_of(
    st.from_regex(r"functions\.[A-Za-z_][A-Za-z0-9_.-]{0,20}:[0-9]{1,3}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True),
    st.builds(lambda tail: TOOL_ID_ESCAPE + tail, st.text(max_size=12)),
    st.text(min_size=1),
)


def id_a_messages_client_gets(upstream_id: str) -> str:
    """The ``tool_use.id`` the Messages encoder gives a Chat upstream's call ``upstream_id``."""
    encoder = MessagesEncoder(TranslationContext(client=MESSAGES, upstream=CHAT, stream=False))
    events = [
        Started(),
        ItemStarted(0, ItemKind.TOOL_CALL, call_id=upstream_id, name="get_weather"),
        ItemDelta(0, "{}"),
        ItemDone(0),
        Finished(FinishReason.TOOL_CALLS),
    ]
    for event in events:
        encoder.feed(event)
    (block,) = json.loads(encoder.body())["content"]
    assert block["type"] == "tool_use"
    return str(block["id"])


def messages_tool_turns(tool_id: str) -> dict[str, JSON]:
    """A Messages request answering the call ``tool_id``."""
    call = {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": "22°C"}
    return {
        "model": "m",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ],
    }


@settings(max_examples=300, deadline=None)
@given(UPSTREAM_TOOL_IDS)
def test_a_tool_id_goes_back_to_the_chat_upstream_as_it_issued_it(upstream_id: str) -> None:
    client_id = id_a_messages_client_gets(upstream_id)
    assert ANTHROPIC_TOOL_ID.fullmatch(client_id)
    out, _ = translate(MESSAGES, CHAT, messages_tool_turns(client_id))
    assistant, tool = out["messages"][1:]
    assert assistant["tool_calls"][0]["id"] == upstream_id
    assert tool["tool_call_id"] == upstream_id


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True))
def test_a_tool_id_anthropic_accepts_is_left_as_it_is(upstream_id: str) -> None:
    assume(not upstream_id.startswith(TOOL_ID_ESCAPE))
    assert id_a_messages_client_gets(upstream_id) == upstream_id
    out, _ = translate(MESSAGES, CHAT, messages_tool_turns(upstream_id))
    assert out["messages"][1]["tool_calls"][0]["id"] == upstream_id


@settings(max_examples=500, deadline=None)
@given(st.one_of(UPSTREAM_TOOL_IDS, st.text()))
def test_the_tool_id_escape_is_reversible_and_fits_anthropics_pattern(value: str) -> None:
    escaped = escape_tool_id(value)
    assert ANTHROPIC_TOOL_ID.fullmatch(escaped)
    assert unescape_tool_id(escaped) == value
    assert escape_tool_id(escaped) != escaped or escaped == value  # escaped once, stays one


@pytest.mark.parametrize(
    ("upstream_id", "escaped"),
    [
        ("functions.get_weather:0", "proxai-id-functions-2eget_weather-3a0"),
        ("call_abc-123", "call_abc-123"),
        ("toolu_01A", "toolu_01A"),
        ("proxai-id-x", "proxai-id-proxai-2did-2dx"),
        ("été", "proxai-id--c3-a9t-c3-a9"),
    ],
)
def test_tool_ids_are_escaped_readably(upstream_id: str, escaped: str) -> None:
    assert escape_tool_id(upstream_id) == escaped
    assert unescape_tool_id(escaped) == upstream_id


@pytest.mark.parametrize(
    "client_id", ["proxai-id-bad-zz", "proxai-id-cut-2", "proxai-id-A-2E", "proxai-id--ff"]
)
def test_an_id_that_only_looks_escaped_goes_upstream_as_it_is(client_id: str) -> None:
    assert unescape_tool_id(client_id) == client_id


@settings(max_examples=200, deadline=None)
@given(st.lists(UPSTREAM_TOOL_IDS, min_size=1, max_size=4, unique=True))
def test_tool_ids_of_a_chat_history_fit_anthropics_pattern_and_stay_apart(ids: list[str]) -> None:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    messages: list[JSON] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    messages += [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
    out, _ = translate(CHAT, MESSAGES, {"model": "m", "messages": messages})
    uses = [block["id"] for block in out["messages"][1]["content"]]
    results = [block["tool_use_id"] for block in out["messages"][2]["content"]]
    assert uses == results
    assert all(ANTHROPIC_TOOL_ID.fullmatch(value) for value in uses)
    assert len(set(uses)) == len(ids)


def test_a_responses_history_with_kimi_ids_can_fail_over_to_anthropic() -> None:
    history = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "functions.get_weather:0", "name": "get_weather"},
        {"type": "function_call_output", "call_id": "functions.get_weather:0", "output": "22°C"},
    ]
    out, _ = translate(RESPONSES, MESSAGES, {"model": "m", "input": history})
    (use,) = out["messages"][1]["content"]
    (result,) = out["messages"][2]["content"]
    assert use["id"] == result["tool_use_id"] == escape_tool_id("functions.get_weather:0")


def test_thinking_proxai_wrote_goes_back_as_reasoning_content() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Four.", "signature": wrap_reasoning("Four.")},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "4"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "Sure.", "signature": ""}],
            },
        ],
    }
    out, ctx = translate(MESSAGES, CHAT, body)
    assert out["messages"][1:] == [
        {"role": "assistant", "content": "4", "reasoning_content": "Four."},
        {"role": "assistant", "content": "", "reasoning_content": "Sure."},
    ]
    assert ctx.dropped == ["messages.redacted_thinking"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "f"},
            {"tool_choice": {"type": "function", "function": {"name": "f"}}},
        ),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            {"tool_choice": "required", "parallel_tool_calls": False},
        ),
    ],
)
def test_anthropic_tool_choice_maps_to_chat(choice: JSON, expected: JSON) -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": choice,
    }
    out, _ = translate(MESSAGES, CHAT, body)
    assert {k: v for k, v in out.items() if k in ("tool_choice", "parallel_tool_calls")} == expected


@pytest.mark.parametrize(
    ("thinking", "output_config", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, None, "low"),
        ({"type": "enabled", "budget_tokens": 2048}, None, "low"),
        ({"type": "enabled", "budget_tokens": 8192}, None, "medium"),
        ({"type": "enabled", "budget_tokens": 32000}, None, "high"),
        ({"type": "adaptive"}, {"effort": "low"}, "low"),
        ({"type": "adaptive"}, None, None),
        ({"type": "disabled"}, None, None),
        (None, {"effort": "max"}, "max"),
        (None, None, None),
    ],
)
def test_thinking_becomes_a_reasoning_effort(
    thinking: JSON, output_config: JSON, effort: str | None
) -> None:
    body = {
        "model": "m",
        "max_tokens": 64000,
        "messages": [],
        "thinking": thinking,
        "output_config": output_config,
    }
    out, ctx = translate(MESSAGES, CHAT, {k: v for k, v in body.items() if v is not None})
    assert out.get("reasoning_effort") == effort
    assert ctx.dropped == []


def test_budget_buckets_are_documented_bounds() -> None:
    assert [effort_of_budget(b) for b in (1024, 2048, 2049, 8192, 8193)] == [
        "low",
        "low",
        "medium",
        "medium",
        "high",
    ]


def test_sampling_limits_user_and_stream_map_to_chat() -> None:
    body = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "stop_sequences": ["\n\nHuman:"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "metadata": {"user_id": "u1"},
        "stream": True,
        "service_tier": "auto",
        "cache_control": EPHEMERAL,
    }
    out, ctx = translate(
        MESSAGES, CHAT, body, TranslationOptions(MaxTokensField.MAX_COMPLETION_TOKENS)
    )
    assert out == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 100,
        "stop": ["\n\nHuman:"],
        "temperature": 0.5,
        "top_p": 0.9,
        "user": "u1",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert ctx.dropped == ["top_k", "service_tier"]  # cache_control: dropped without a note


def test_output_config_format_becomes_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [],
        "output_config": {"format": {"type": "json_schema", "schema": schema}, "task_budget": 5},
    }
    out, ctx = translate(MESSAGES, CHAT, body)
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }
    assert ctx.dropped == ["output_config.task_budget"]


def test_server_tools_are_dropped_or_refused_when_strict() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "tool_choice": {"type": "auto"},
    }
    out, ctx = translate(MESSAGES, CHAT, body)
    assert "tools" not in out and "tool_choice" not in out
    assert ctx.dropped == ["tools.web_search_20250305", "tool_choice"]
    assert refused(MESSAGES, CHAT, body, strict=True).param == "tools[0]"


def test_a_pdf_document_becomes_a_file_part() -> None:
    document = {
        "type": "document",
        "title": "spec.pdf",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
    }
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [document]}]}
    out, _ = translate(MESSAGES, CHAT, body)
    assert out["messages"][0]["content"] == [
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "spec.pdf"},
        }
    ]


def test_an_image_by_file_id_is_refused_with_its_path() -> None:
    image = {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [image]}]}
    assert refused(MESSAGES, CHAT, body).param == "messages[0].content[0]"


# --- Chat -> Responses --------------------------------------------------------------------

WEATHER_TOOL: dict[str, JSON] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CHAT_REQUEST: dict[str, JSON] = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Paris?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/sky.png", "detail": "low"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "assistant", "content": "18C and sunny."},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [WEATHER_TOOL],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": True,
    "max_completion_tokens": 500,
    "temperature": 0.2,
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True},
    },
    "reasoning_effort": "low",
    "verbosity": "low",
    "stream": True,
    "stream_options": {"include_usage": True},
    "stop": ["END"],
    "seed": 7,
    "logprobs": True,
    "user": "u1",
    "n": 1,
}


def test_a_chat_request_becomes_the_expected_responses_body() -> None:
    out, ctx = translate(CHAT, RESPONSES, CHAT_REQUEST)
    assert out == {
        "model": "gpt-4.1",
        "temperature": 0.2,
        "parallel_tool_calls": True,
        "user": "u1",
        "instructions": "Be brief.\n\nUse metric units.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Weather in Paris?"},
                    {
                        "type": "input_image",
                        "image_url": "https://example.com/sky.png",
                        "detail": "low",
                    },
                ],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"type": "message", "role": "assistant", "content": "18C and sunny."},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Thanks"}],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": WEATHER_TOOL["function"]["parameters"],
                "strict": False,  # Responses would default to strict
            }
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 500,
        "text": {
            "format": {
                "type": "json_schema",
                "name": "w",
                "schema": {"type": "object"},
                "strict": True,
            },
            "verbosity": "low",
        },
        "reasoning": {"effort": "low"},
        "store": False,
        "stream": True,
    }
    assert ctx.include_usage is True
    assert ctx.dropped == ["stop", "seed", "logprobs"]


def test_custom_tools_and_their_calls_go_to_responses_as_custom() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "patch it"},
            {
                "role": "assistant",
                "content": "ok",
                "tool_calls": [
                    {"id": "c", "type": "custom", "custom": {"name": "apply_patch", "input": PATCH}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "Done!"}]},
        ],
        "tools": [
            {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files."}}
        ],
        "tool_choice": {"type": "custom", "custom": {"name": "apply_patch"}},
    }
    out, _ = translate(CHAT, RESPONSES, body)
    assert out["input"][1:] == [
        {"type": "message", "role": "assistant", "content": "ok"},
        {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "c", "output": "Done!"},
    ]
    assert out["tools"] == [{"type": "custom", "name": "apply_patch", "description": "Edit files."}]
    assert out["tool_choice"] == {"type": "custom", "name": "apply_patch"}


def test_allowed_tools_and_web_search_options_go_to_responses() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "news?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "auto",
                "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            },
        },
        "web_search_options": {
            "search_context_size": "low",
            "user_location": {
                "type": "approximate",
                "approximate": {"city": "Paris", "country": "FR"},
            },
        },
    }
    out, _ = translate(CHAT, RESPONSES, body)
    assert out["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    assert out["tools"][1] == {
        "type": "web_search",
        "search_context_size": "low",
        "user_location": {"type": "approximate", "city": "Paris", "country": "FR"},
    }


def test_a_tiny_chat_limit_is_raised_to_the_smallest_responses_accepts() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    out, _ = translate(CHAT, RESPONSES, body)
    assert out["max_output_tokens"] == 16


@pytest.mark.parametrize("upstream", [RESPONSES, MESSAGES])
def test_several_choices_are_refused(upstream: WireApi) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}
    assert refused(CHAT, upstream, body).param == "n"


@pytest.mark.parametrize("upstream", [RESPONSES, MESSAGES])
def test_legacy_functions_are_refused(upstream: WireApi) -> None:
    body = {"model": "m", "messages": [], "functions": [{"name": "f"}]}
    assert refused(CHAT, upstream, body).param == "functions"


def test_reasoning_content_in_chat_history_cannot_go_to_responses() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "assistant", "content": "4", "reasoning_content": "2+2"}],
        "stream": True,
    }
    out, ctx = translate(CHAT, RESPONSES, body)
    assert out["input"] == [{"type": "message", "role": "assistant", "content": "4"}]
    assert ctx.dropped == ["messages.reasoning_content"]
    assert ctx.include_usage is False


# --- Chat -> Anthropic Messages -----------------------------------------------------------


def test_a_chat_request_becomes_the_expected_messages_body() -> None:
    out, ctx = translate(CHAT, MESSAGES, CHAT_REQUEST)
    assert out == {
        "model": "gpt-4.1",
        "system": "Be brief.\n\nUse metric units.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather in Paris?"},
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/sky.png"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "18C"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "18C and sunny."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather for a city.",
                "input_schema": WEATHER_TOOL["function"]["parameters"],
            }
        ],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "max_tokens": 500,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "stream": True,
    }
    assert ctx.include_usage is True
    # A forced tool excludes thinking on Anthropic: the forced tool wins.
    assert ctx.dropped == ["reasoning_effort", "temperature", "verbosity", "seed", "logprobs"]


def test_parallel_tool_results_and_the_next_user_text_share_one_user_message() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "both"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": ""}},
                    {
                        "id": "b",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x": 1}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "user", "content": "thanks"},
        ],
    }
    out, _ = translate(CHAT, MESSAGES, body)
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "f", "input": {"x": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "b", "content": "B"},
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    assert out["max_tokens"] == 8192


def test_reasoning_effort_becomes_a_thinking_budget_that_fits_in_max_tokens() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    out, _ = translate(CHAT, MESSAGES, {**base, "reasoning_effort": "medium"})
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert out["max_tokens"] == 8192 + 8192

    out, _ = translate(CHAT, MESSAGES, {**base, "reasoning_effort": "high", "max_tokens": 4096})
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert out["max_tokens"] == 4096

    out, ctx = translate(CHAT, MESSAGES, {**base, "reasoning_effort": "high", "max_tokens": 1000})
    assert "thinking" not in out and ctx.dropped == ["reasoning_effort"]

    out, _ = translate(CHAT, MESSAGES, {**base, "reasoning_effort": "none"})
    assert out["thinking"] == {"type": "disabled"}


def test_sampling_parameters_anthropic_no_longer_takes_are_dropped_and_listed() -> None:
    body = {"model": "m", "messages": [], "temperature": 0.2, "top_p": 0.9}
    out, ctx = translate(CHAT, MESSAGES, body)
    assert "temperature" not in out and "top_p" not in out
    assert ctx.dropped == ["temperature", "top_p"]


def test_parallel_tool_calls_false_disables_parallel_tool_use() -> None:
    body = {"model": "m", "messages": [], "tools": [WEATHER_TOOL], "parallel_tool_calls": False}
    out, _ = translate(CHAT, MESSAGES, body)
    assert out["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    out, _ = translate(CHAT, MESSAGES, {**body, "tool_choice": "required"})
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


def test_allowed_tools_leave_only_the_allowed_tools_offered() -> None:
    other = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
    }
    body = {"model": "m", "messages": [], "tools": [WEATHER_TOOL, other], "tool_choice": choice}
    out, _ = translate(CHAT, MESSAGES, body)
    assert [tool["name"] for tool in out["tools"]] == ["get_weather"]
    assert out["tool_choice"] == {"type": "any"}


def test_data_url_images_become_base64_sources_and_pdfs_documents() -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/"}},
                    {
                        "type": "file",
                        "file": {
                            "file_data": "data:application/pdf;base64,JVBE",
                            "filename": "a.pdf",
                        },
                    },
                ],
            }
        ],
    }
    out, _ = translate(CHAT, MESSAGES, body)
    assert out["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
            "title": "a.pdf",
        },
    ]


def test_tool_arguments_that_are_not_a_json_object_are_refused_with_their_path() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1, 2"}}
    body = {
        "model": "m",
        "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}],
    }
    assert refused(CHAT, MESSAGES, body).param == "messages[0].tool_calls[0].function.arguments"


def test_a_json_object_response_format_has_no_anthropic_equivalent() -> None:
    body = {"model": "m", "messages": [], "response_format": {"type": "json_object"}}
    out, ctx = translate(CHAT, MESSAGES, body)
    assert "output_config" not in out and ctx.dropped == ["response_format"]


# --- Composed pairs -----------------------------------------------------------------------


def test_codex_on_an_anthropic_upstream_goes_through_chat() -> None:
    history = [
        {"type": "reasoning", "summary": [], "encrypted_content": wrap_reasoning("think")},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done!"},
    ]
    out, ctx = translate(RESPONSES, MESSAGES, codex_request(history))
    assert out["system"] == f"{CODEX_INSTRUCTIONS}\n\n{CODEX_PERMISSIONS}"
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "apply_patch",
                    "input": {"input": PATCH},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_2", "content": "Done!"}],
        },
    ]
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": CODEX_ENVIRONMENT},
        {"type": "text", "text": "Fix the failing test"},
    ]
    assert out["tools"][1]["input_schema"]["properties"] == {"input": {"type": "string"}}
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert ctx.custom_tools == frozenset({"apply_patch"})
    assert ctx.reasoning_envelope is True
    assert ctx.echo["instructions"] == CODEX_INSTRUCTIONS
    assert ctx.include_usage is False  # only a Chat client reads it
    assert ctx.dropped == [
        "tools.web_search",
        "reasoning.summary",
        "prompt_cache_key",
        "messages.reasoning_content",  # Anthropic reads only its own signed thinking
        "verbosity",
    ]


# --- Properties over histories ------------------------------------------------------------

_texts = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)


@st.composite
def anthropic_histories(draw: st.DrawFn) -> list[JSON]:
    """A user/assistant tool loop: assistant text, thinking and calls; users answer every call,
    sometimes with an image or an error, sometimes with text too."""
    messages: list[JSON] = [{"role": "user", "content": draw(_texts)}]
    for turn in range(draw(st.integers(0, 4))):
        blocks: list[JSON] = []
        if draw(st.booleans()):
            blocks.append(
                {"type": "thinking", "thinking": draw(_texts), "signature": wrap_reasoning("")}
            )
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(_texts)})
        ids = [f"toolu_{turn}_{i}" for i in range(draw(st.integers(0 if blocks else 1, 3)))]
        blocks += [
            {"type": "tool_use", "id": i, "name": "f", "input": {"q": draw(_texts)}} for i in ids
        ]
        messages.append({"role": "assistant", "content": blocks})
        answer: list[JSON] = []
        for call_id in draw(st.permutations(ids)):
            content: JSON = draw(_texts)
            if draw(st.booleans()):
                source = {"type": "base64", "media_type": "image/png", "data": "AAAA"}
                content = [{"type": "text", "text": content}, {"type": "image", "source": source}]
            answer.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                    "is_error": draw(st.booleans()),
                }
            )
        if draw(st.booleans()) or not answer:
            answer.insert(draw(st.integers(0, len(answer))), {"type": "text", "text": draw(_texts)})
        messages.append({"role": "user", "content": answer})
    return messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anthropic_histories())
def test_every_tool_message_directly_follows_the_assistant_that_called_it(
    history: list[JSON],
) -> None:
    out, _ = translate(MESSAGES, CHAT, {"model": "m", "max_tokens": 10, "messages": history})
    pending: set[str] = set()
    for message in out["messages"]:
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending
            pending.discard(message["tool_call_id"])
            continue
        assert not pending, "a call was left unanswered before the next message"
        pending = {call["id"] for call in message.get("tool_calls", ())}
    calls = sum(len(m.get("tool_calls", ())) for m in out["messages"])
    results = sum(
        1
        for m in history
        if m["role"] == "user"
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_result"
    )
    assert calls == results == sum(1 for m in out["messages"] if m["role"] == "tool")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anthropic_histories())
def test_a_history_through_chat_and_back_to_anthropic_keeps_roles_alternating(
    history: list[JSON],
) -> None:
    chat, _ = translate(MESSAGES, CHAT, {"model": "m", "max_tokens": 10, "messages": history})
    back, _ = translate(CHAT, MESSAGES, chat)
    roles = [m["role"] for m in back["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    previous: list[str] = []
    for message in back["messages"]:
        blocks = message["content"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        assert sorted(results) == sorted(previous) if message["role"] == "user" else not results
        assert [b["type"] for b in blocks][: len(results)] == ["tool_result"] * len(results)
        previous = [b["id"] for b in blocks if b["type"] == "tool_use"]


@st.composite
def responses_histories(draw: st.DrawFn) -> tuple[list[JSON], list[str]]:
    """A Codex-like history: user turns, then model turns of reasoning (proxai's envelope or
    an opaque blob), commentary and function or freeform calls, each call answered; and the
    reasoning that must come back (proxai's, in a turn with a message or a call)."""
    items: list[JSON] = [{"role": "user", "content": draw(_texts)}]
    restored: list[str] = []
    for turn in range(draw(st.integers(0, 4))):
        thought = draw(_texts)
        ours = draw(st.booleans())
        thought_of = draw(st.booleans())
        if thought_of:
            blob = wrap_reasoning(thought) if ours else "gAAAA-opaque"
            items.append({"type": "reasoning", "summary": [], "encrypted_content": blob})
        else:
            ours = False
        calls = [f"call_{turn}_{i}" for i in range(draw(st.integers(0, 3)))]
        # A model turn never ends on its reasoning: a message or a call follows it.
        said = draw(st.booleans()) or (thought_of and not calls)
        if said:
            text = [{"type": "output_text", "text": draw(_texts)}]
            items.append({"role": "assistant", "content": text})
        for call_id in calls:
            if draw(st.booleans()):
                patch = draw(_texts)
                items.append(
                    {
                        "type": "custom_tool_call",
                        "call_id": call_id,
                        "name": "apply_patch",
                        "input": patch,
                    }
                )
            else:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": "shell",
                        "arguments": "{}",
                    }
                )
        for call_id in calls:
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": draw(_texts)}
            )
        if ours and (said or calls):
            restored.append(thought)
        # A turn that calls no tool hands the floor back: the user speaks next.
        if draw(st.booleans()) or not calls:
            items.append({"role": "user", "content": draw(_texts)})
    return items, restored


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_histories())
def test_a_responses_history_keeps_calls_answered_in_order_and_reasoning_out_of_user_turns(
    case: tuple[list[JSON], list[str]],
) -> None:
    history, restored = case
    out, _ = translate(RESPONSES, CHAT, codex_request(history))
    pending: list[str] = []
    for message in out["messages"]:
        if message["role"] == "tool":
            assert message["tool_call_id"] == pending.pop(0)
            continue
        assert not pending
        pending = [call["id"] for call in message.get("tool_calls", ())]
        if message["role"] == "user":
            assert "gAAAA" not in json.dumps(message) and "proxai-reasoning" not in json.dumps(
                message
            )
    kept = [m["reasoning_content"] for m in out["messages"] if "reasoning_content" in m]
    assert kept == restored
    # No call and no answer lost on the way (an empty translation would pass the rest).
    answers = [i["call_id"] for i in history if i.get("type") == "function_call_output"]
    calls = [c["id"] for m in out["messages"] for c in m.get("tool_calls", ())]
    assert calls == answers
    assert [m["tool_call_id"] for m in out["messages"] if m["role"] == "tool"] == answers


def test_empty_system_prompts_leave_no_empty_system_message() -> None:
    body: dict[str, JSON] = {
        "model": "m",
        "instructions": "",
        "input": [{"role": "developer", "content": []}, {"role": "user", "content": "hi"}],
    }
    assert translate(RESPONSES, CHAT, body)[0]["messages"] == [{"role": "user", "content": "hi"}]
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": [],
        "messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}],
    }
    assert translate(MESSAGES, CHAT, body)[0]["messages"] == [{"role": "user", "content": "hi"}]


# --- Errors -------------------------------------------------------------------------------


def sdk_error(client: WireApi, status: int, body: bytes) -> Exception:
    """What the client's own SDK raises on an HTTP error with ``body``."""

    def answer(request: Any) -> Any:
        module = httpx2 if client is MESSAGES else httpx  # anthropic's SDK runs on httpx2
        return module.Response(status, content=body, headers={"content-type": "application/json"})

    if client is MESSAGES:
        http: Any = httpx2.Client(transport=httpx2.MockTransport(answer))
    else:
        http = httpx.Client(transport=httpx.MockTransport(answer))
    try:
        if client is MESSAGES:
            anthropic.Anthropic(
                api_key="k", base_url="http://up", http_client=http, max_retries=0
            ).messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
        elif client is CHAT:
            openai.OpenAI(
                api_key="k", base_url="http://up", http_client=http, max_retries=0
            ).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        else:
            openai.OpenAI(
                api_key="k", base_url="http://up", http_client=http, max_retries=0
            ).responses.create(model="m", input="hi")
    except Exception as exc:
        return exc
    raise AssertionError("the SDK did not raise")


OPENAI_RATE_LIMIT = json.dumps(
    {
        "error": {
            "message": "Rate limit reached for gpt-4.1: try again in 2s.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
).encode()
ANTHROPIC_OVERLOADED = json.dumps(
    {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_1",
    }
).encode()


@pytest.mark.parametrize("upstream", [CHAT, RESPONSES])
def test_an_openai_error_reaches_an_anthropic_client_as_anthropics_error(upstream: WireApi) -> None:
    body = translate_error_body(429, OPENAI_RATE_LIMIT, upstream, MESSAGES)
    assert json.loads(body) == {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "Rate limit reached for gpt-4.1: try again in 2s.",
        },
    }
    error = sdk_error(MESSAGES, 429, body)
    assert isinstance(error, anthropic.RateLimitError)
    assert error.body == json.loads(body)


@pytest.mark.parametrize("client", [CHAT, RESPONSES])
def test_an_anthropic_error_reaches_an_openai_client_as_openais_error(client: WireApi) -> None:
    body = translate_error_body(529, ANTHROPIC_OVERLOADED, MESSAGES, client)
    assert json.loads(body) == {
        "error": {"message": "Overloaded", "type": "overloaded_error", "param": None, "code": None}
    }
    error = sdk_error(client, 529, body)
    assert isinstance(error, openai.InternalServerError)
    assert (error.type, error.code) == ("overloaded_error", None)


def test_openai_errors_keep_message_type_param_and_code_between_openai_apis() -> None:
    upstream_body = json.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    ).encode()
    body = translate_error_body(400, upstream_body, CHAT, RESPONSES)
    error = sdk_error(RESPONSES, 400, body)
    assert isinstance(error, openai.BadRequestError)
    assert (error.type, error.param, error.code) == (
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
    )
    assert error.body == json.loads(upstream_body)["error"]


@pytest.mark.parametrize(
    ("status", "upstream_body", "message", "kind", "code"),
    [
        # vLLM: flat, with the status as a number in "code"
        (
            400,
            b'{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}',
            "bad",
            "BadRequestError",
            None,
        ),
        # Ollama: a string
        (
            404,
            b'{"error":"model \\"x\\" not found"}',
            'model "x" not found',
            "invalid_request_error",
            None,
        ),
        # FastAPI: detail
        (
            422,
            b'{"detail":[{"loc":["body"],"msg":"field required"}]}',
            '[{"loc":["body"],"msg":"field required"}]',
            "invalid_request_error",
            None,
        ),
        # llama.cpp: a numeric code inside error
        (
            503,
            b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}',
            "Loading model",
            "unavailable_error",
            None,
        ),
        # a proxy's HTML page
        (
            502,
            b"<html><body>502 Bad Gateway</body></html>",
            "<html><body>502 Bad Gateway</body></html>",
            "server_error",
            None,
        ),
        (500, b"", "the upstream answered HTTP 500 with no details", "server_error", None),
    ],
)
def test_other_servers_error_bodies_become_openai_errors(
    status: int, upstream_body: bytes, message: str, kind: str, code: str | None
) -> None:
    body = translate_error_body(status, upstream_body, CHAT, RESPONSES)
    assert json.loads(body) == {
        "error": {"message": message, "type": kind, "param": None, "code": code}
    }


def test_a_non_json_error_becomes_an_anthropic_message_by_its_status() -> None:
    body = translate_error_body(504, b"upstream timed out\n", CHAT, MESSAGES)
    assert json.loads(body) == {
        "type": "error",
        "error": {"type": "timeout_error", "message": "upstream timed out"},
    }
    assert isinstance(sdk_error(MESSAGES, 504, body), anthropic.APIStatusError)


def test_an_error_between_the_same_api_is_left_alone() -> None:
    assert translate_error_body(429, OPENAI_RATE_LIMIT, CHAT, CHAT) == OPENAI_RATE_LIMIT


# --- count_tokens -------------------------------------------------------------------------


def test_count_tokens_is_a_quarter_token_per_character_plus_framing() -> None:
    body = {"model": "m", "system": "a" * 40, "messages": [{"role": "user", "content": "b" * 9}]}
    assert estimate_input_tokens(body) == 13 + MESSAGE_TOKENS  # ceil(49 / 4) + framing
    assert count_tokens_body(body) == {"input_tokens": 13 + MESSAGE_TOKENS}


def test_count_tokens_counts_images_flat_and_ignores_cache_hints_and_binary_data() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000},
    }
    text = {"type": "text", "text": "abcd"}
    plain = {"model": "m", "messages": [{"role": "user", "content": [text]}]}
    with_image = {"model": "m", "messages": [{"role": "user", "content": [text, image]}]}
    cached = {
        "model": "m",
        "messages": [{"role": "user", "content": [{**text, "cache_control": EPHEMERAL}]}],
    }
    assert estimate_input_tokens(with_image) == estimate_input_tokens(plain) + IMAGE_TOKENS
    assert estimate_input_tokens(cached) == estimate_input_tokens(plain)


def test_count_tokens_grows_with_tools_tool_calls_and_thinking() -> None:
    assert estimate_input_tokens({}) == 1
    base = estimate_input_tokens(CLAUDE_CODE_REQUEST)
    no_tools = estimate_input_tokens({k: v for k, v in CLAUDE_CODE_REQUEST.items() if k != "tools"})
    assert base > no_tools > 50
