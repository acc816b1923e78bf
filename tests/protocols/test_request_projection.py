"""The typed projection of a Responses request: the seed's mapping, and 400s that name the path."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxai.errors import ProxyError
from proxai.protocols.responses.request import (
    CodeInterpreterTool,
    ConversationRef,
    CustomTool,
    FileSearchTool,
    FunctionTool,
    McpTool,
    NamespaceTool,
    RawTool,
    WebSearchFilters,
    WebSearchTool,
    project_responses,
)
from proxai.testing import Script
from proxai.testing.seed import TURN1_REQUEST, TURN2_REQUEST


def test_seed_turn1_projects_as_the_seed_describes() -> None:
    p = project_responses(json.loads(json.dumps(TURN1_REQUEST)))
    assert p.model == "gpt-5.4"
    assert p.stream is True
    assert p.parallel_tool_calls is False
    assert p.tool_choice == "auto"
    assert p.tools == [
        FunctionTool(
            name="get_weather",
            description="查询指定城市的天气和空气质量摘要。",
            parameters=TURN1_REQUEST["tools"][0]["parameters"],
            strict=True,
        ),
        WebSearchTool(
            filters=WebSearchFilters(allowed_domains=["www.cma.gov.cn", "www.mee.gov.cn"]),
            search_context_size="low",
        ),
    ]
    assert not hasattr(p, "input")  # deliberately not kept
    assert p.tool_names() == ["get_weather", "web_search"]


def test_seed_turn2_projects_previous_response_id() -> None:
    p = project_responses(TURN2_REQUEST)
    assert p.previous_response_id == "resp_01"
    assert p.tools is None


def test_every_tool_type() -> None:
    tools = [
        {"type": "function", "name": "f", "parameters": {}, "strict": False},
        {
            "type": "custom",
            "name": "c",
            "format": {"type": "grammar", "syntax": "lark", "definition": "x"},
        },
        {"type": "web_search_preview_2025_03_11", "search_context_size": "high"},
        {"type": "web_search_2025_08_26"},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 3},
        {
            "type": "mcp",
            "server_label": "dice",
            "server_url": "https://x",
            "require_approval": "never",
            "headers": {"Authorization": "Bearer secret"},
        },
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation", "quality": "low", "partial_images": 2},
        {
            "type": "computer_use_preview",
            "display_width": 1024,
            "display_height": 768,
            "environment": "browser",
        },
        {"type": "local_shell"},
        {"type": "shell", "environment": {"type": "container_auto"}},
        {"type": "apply_patch"},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "inner"}]},
        {"type": "tool_search", "execution": "server"},
        {"type": "programmatic_tool_calling", "anything": [1, 2]},
    ]
    p = project_responses({"model": "m", "tools": tools, "future_field": {"x": 1}})
    assert p.tools is not None
    kinds = [type(t).__name__ for t in p.tools]
    assert kinds == [
        "FunctionTool", "CustomTool", "WebSearchTool", "WebSearchTool", "FileSearchTool", "McpTool",
        "CodeInterpreterTool", "ImageGenerationTool", "ComputerUsePreviewTool", "LocalShellTool",
        "ShellTool", "ApplyPatchTool", "NamespaceTool", "ToolSearchTool", "RawTool",
    ]  # fmt: skip
    assert isinstance(p.tools[1], CustomTool) and p.tools[1].format == tools[1]["format"]
    assert (
        isinstance(p.tools[2], WebSearchTool) and p.tools[2].type == "web_search_preview_2025_03_11"
    )
    assert isinstance(p.tools[4], FileSearchTool) and p.tools[4].vector_store_ids == ["vs_1"]
    assert isinstance(p.tools[5], McpTool) and "secret" not in repr(p.tools[5])
    assert isinstance(p.tools[6], CodeInterpreterTool) and p.tools[6].container == {"type": "auto"}
    assert isinstance(p.tools[12], NamespaceTool) and p.tools[12].tools == [
        FunctionTool(name="inner")
    ]
    assert p.tools[14] == RawTool("programmatic_tool_calling", tools[14])


def test_blank_ids_become_none() -> None:
    p = project_responses(
        {"previous_response_id": " ", "conversation": "", "prompt": {"id": "", "version": "2"}}
    )
    assert p.previous_response_id is None
    assert p.conversation is None
    assert p.prompt is not None and p.prompt.id is None and p.prompt.version == "2"
    assert project_responses({"conversation": {"id": ""}}).conversation == ConversationRef(None)
    assert project_responses({"conversation": "conv_1"}).conversation == "conv_1"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": "get_weather"}, "tools"),
        (
            {"tools": [{"type": "function", "name": "ok"}, {"type": "function", "name": 5}]},
            "tools[1].name",
        ),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tools": [{"name": "no type"}]}, "tools[0]"),
        (
            {"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]},
            "tools[0].tools[0].name",
        ),
        ({"model": 4}, "model"),
        ({"stream": "yes"}, "stream"),
        ({"temperature": True}, "temperature"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
        ({"metadata": {"k": 1}}, "metadata.k"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"reasoning": {"effort": 3}}, "reasoning.effort"),
        ({"tool_choice": 1}, "tool_choice"),
        ({"conversation": 7}, "conversation"),
    ],
)
def test_malformed_bodies_name_the_offending_path(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ProxyError) as info:
        project_responses(body)
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    assert info.value.param == param
    assert param in info.value.message


async def test_projection_failure_is_400_before_any_upstream_call(
    start_upstream: Any, proxai_for: Any
) -> None:
    upstream = await start_upstream([Script.json({})])
    async with proxai_for(upstream) as px, httpx.AsyncClient() as client:
        response = await client.post(px.base_url + "/responses", json={"model": "m", "tools": {}})
        (outcome,) = await px.wait_for_outcomes(1)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "invalid request: tools: expected an array, got an object",
            "type": "invalid_request_error",
            "param": "tools",
            "code": "invalid_value",
        }
    }
    assert upstream.requests == []
    assert outcome.status == 400
