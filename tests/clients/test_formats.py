"""The provider formats as the official SDKs see them: `toolcage definitions`
and `toolcage run-calls`, checked against the types of the `openai`,
`anthropic` and `mcp` Python packages.

Model responses are built with the SDKs' own models and serialized as an SDK
user would (`model_dump(mode="json")`); what toolcage prints is validated
with the SDKs' request types. The request types are TypedDicts, which
pydantic validates leniently (unknown keys are dropped, not refused), so each
check also compares the validated value with the original: a misspelt or
extra key shows up as a difference.

Runs with TOOLCAGE_BIN, TOOLCAGE_TOOLS (the `echo` and `misbehave` fixtures)
and TOOLCAGE_FIXTURES (holding `echo_twin.wasm`, whose `twin_only` tool has
a schema OpenAI's strict mode accepts as it is).
"""

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
from anthropic.types import (
    ContentBlockParam,
    Message,
    MessageParam,
    ToolParam,
    ToolResultBlockParam,
)
from mcp import types as mcp_types
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseCustomToolCallOutputParam,
    ResponseInputItemParam,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import TypeAdapter

BIN = os.environ["TOOLCAGE_BIN"]
TOOLS = os.environ["TOOLCAGE_TOOLS"]
TWIN = Path(os.environ["TOOLCAGE_FIXTURES"]) / "echo_twin.wasm"


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """A tools directory: echo, misbehave and the twin (whose `echo` is shadowed)."""
    directory = tmp_path_factory.mktemp("tools")
    for name in os.listdir(TOOLS):
        shutil.copy(os.path.join(TOOLS, name), directory / name)
    shutil.copy(TWIN, directory / "twin.wasm")
    return str(directory)


def toolcage(tools, *args, stdin=None):
    env = {key: value for key, value in os.environ.items() if key != "RUST_LOG"}
    return subprocess.run(
        [BIN, "--no-bundled", "--tools", tools, "--fuel", "50000000", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def run_calls(tools, document, *args, status):
    """`toolcage run-calls` on `document`; checks the exit status, returns the JSON printed."""
    done = toolcage(tools, "run-calls", "-", *args, stdin=json.dumps(document))
    assert done.returncode == status, done.stderr
    return json.loads(done.stdout)


def check_typed(typ, value):
    """Validates `value` as the TypedDict (or union of them) `typ`, strictly,
    and checks that no key was dropped or changed on the way."""
    validated = TypeAdapter(typ).validate_python(value, strict=True)
    assert validated == value, f"{typ}: {json.dumps(value)}"


def check_anthropic_reply(reply):
    """Validates a user message of tool results as `MessageParam`. Its
    `content` is an `Iterable` there, which pydantic validates lazily (and
    pydantic-core cannot consume for this type), so the blocks are validated
    as a list of `ContentBlockParam`."""
    TypeAdapter(MessageParam).validate_python(reply, strict=True)
    assert set(reply) == {"role", "content"}
    check_typed(List[ContentBlockParam], reply["content"])


def check_model(model, value):
    """Validates `value` as the pydantic model `model`, strictly, and checks
    that it serializes back to the same JSON (no key ignored or renamed)."""
    validated = model.model_validate(value, strict=True)
    dumped = validated.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == value, f"{model.__name__}: {json.dumps(value)}"


# ---------------------------------------------------------------------------
# Definitions


def definitions(tools, format):
    done = toolcage(tools, "definitions", "--format", format)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


NAMES = {"echo", "counter", "fail", "bad_details", "misbehave", "twin_only"}


def test_openai_chat_definitions(tools):
    tools_ = definitions(tools, "openai")
    assert {tool["function"]["name"] for tool in tools_} == NAMES
    for tool in tools_:
        check_typed(ChatCompletionToolParam, tool)
        assert set(tool["function"]) == {"name", "description", "parameters", "strict"}
        assert tool["function"]["strict"] is (tool["function"]["name"] == "twin_only")


def test_openai_responses_definitions(tools):
    tools_ = definitions(tools, "openai-responses")
    assert {tool["name"] for tool in tools_} == NAMES
    for tool in tools_:
        check_typed(FunctionToolParam, tool)
        # The SDK requires `strict`: the API takes a missing one as true.
        assert set(tool) == {"type", "name", "description", "parameters", "strict"}
        assert tool["strict"] is (tool["name"] == "twin_only")


def test_strict_schemas_need_no_rewriting_by_the_sdk(tools):
    """The SDK rewrites a schema for strict mode (closing objects, requiring
    every property); one toolcage marks strict needs none of it, and the
    others with optional arguments or open objects would be rewritten."""
    rewritten = set()
    for tool in definitions(tools, "openai-responses"):
        schema = tool["parameters"]
        strict_form = _ensure_strict_json_schema(copy.deepcopy(schema), path=(), root=schema)
        if tool["strict"]:
            assert strict_form == schema, tool["name"]
        elif strict_form != schema:
            rewritten.add(tool["name"])
    # echo and misbehave have optional arguments; the rest accept any object.
    assert rewritten == NAMES - {"twin_only"}


def test_anthropic_definitions(tools):
    tools_ = definitions(tools, "anthropic")
    assert {tool["name"] for tool in tools_} == NAMES
    for tool in tools_:
        check_typed(ToolParam, tool)
        assert set(tool) == {"name", "description", "input_schema"}


def test_mcp_definitions(tools):
    tools_ = definitions(tools, "mcp")
    assert {tool["name"] for tool in tools_} == NAMES
    for tool in tools_:
        check_model(mcp_types.Tool, tool)
    echo = next(tool for tool in tools_ if tool["name"] == "echo")
    assert echo["annotations"]["readOnlyHint"] is True


def test_code_modes_definitions_in_every_format(tmp_path):
    """With the bundled tools (code mode on), `run_code` and its helpers are
    valid definitions for each SDK, `run_code`'s description carrying the
    callable tools' stubs."""
    env = {key: value for key, value in os.environ.items() if key != "RUST_LOG"}

    def bundled(format):
        done = subprocess.run(
            [BIN, "definitions", "--format", format],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return {tool.get("name") or tool["function"]["name"]: tool for tool in json.loads(done.stdout)}

    checks = {
        "openai": lambda tool: check_typed(ChatCompletionToolParam, tool),
        "openai-responses": lambda tool: check_typed(FunctionToolParam, tool),
        "anthropic": lambda tool: check_typed(ToolParam, tool),
        "mcp": lambda tool: check_model(mcp_types.Tool, tool),
    }
    for format, check in checks.items():
        tools_ = bundled(format)
        for name in ["run_code", "search_tools", "describe_tool"]:
            check(tools_[name])
        run_code = tools_["run_code"]
        description = run_code.get("description") or run_code["function"]["description"]
        assert "async def read_file(" in description, format


# ---------------------------------------------------------------------------
# OpenAI Chat Completions


def chat_completion(message):
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1741570283,
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", **message},
                    "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                    "logprobs": None,
                }
            ],
        }
    ).model_dump(mode="json")


def test_openai_chat_calls_and_results(tools):
    completion = chat_completion(
        {
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "echo", "arguments": '{"text": "hi"}'}},
                {"id": "call_2", "type": "custom",
                 "custom": {"name": "echo", "input": "free text"}},
                {"id": "call_3", "type": "function",
                 "function": {"name": "fail", "arguments": "{}"}},
            ],
        }
    )
    messages = run_calls(tools, completion, status=1)
    assert [m["tool_call_id"] for m in messages] == ["call_1", "call_2", "call_3"]
    for message in messages:
        check_typed(ChatCompletionToolMessageParam, message)
    assert messages[0]["content"] == "hi"
    assert "custom tool" in messages[1]["content"]

    report = run_calls(tools, completion, "--format", "openai", status=1)
    assert report == messages


def test_openai_chat_final_answer_has_no_results(tools):
    completion = chat_completion({"content": "All done."})
    assert completion["choices"][0]["message"]["tool_calls"] is None
    assert run_calls(tools, completion, status=0) == []


# ---------------------------------------------------------------------------
# OpenAI Responses


def response(output):
    return Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1741476542,
            "model": "gpt-4.1-2025-04-14",
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    ).model_dump(mode="json")


def test_openai_responses_calls_and_results(tools):
    document = response(
        [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1",
             "name": "echo", "arguments": '{"text": "hi"}', "status": "completed"},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2",
             "name": "patch", "input": "*** Begin Patch"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_3",
             "name": "echo", "arguments": "not json", "status": "completed"},
        ]
    )
    items = run_calls(tools, document, status=1)
    assert [item["call_id"] for item in items] == ["call_1", "call_2", "call_3"]
    for item in items:
        check_typed(ResponseInputItemParam, item)
    check_typed(FunctionCallOutput, items[0])
    assert items[0]["type"] == "function_call_output" and items[0]["output"] == "hi"
    check_typed(ResponseCustomToolCallOutputParam, items[1])
    assert items[1]["type"] == "custom_tool_call_output"
    assert items[2]["type"] == "function_call_output"
    assert "not valid JSON" in items[2]["output"]

    report = run_calls(tools, document, "--format", "openai-responses", status=1)
    assert report == items


def test_openai_responses_final_answer_has_no_results(tools):
    document = response(
        [
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "All done.", "annotations": []}]},
        ]
    )
    assert run_calls(tools, document, status=0) == []


# ---------------------------------------------------------------------------
# Anthropic Messages


def message(content, stop_reason):
    return Message.model_validate(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }
    ).model_dump(mode="json")


def test_anthropic_calls_and_results(tools):
    document = message(
        [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}},
            {"type": "tool_use", "id": "toolu_2", "name": "fail", "input": {}},
        ],
        "tool_use",
    )
    reply = run_calls(tools, document, status=1)
    check_anthropic_reply(reply)
    assert reply["role"] == "user"
    for block in reply["content"]:
        check_typed(ToolResultBlockParam, block)
    assert [b["tool_use_id"] for b in reply["content"]] == ["toolu_1", "toolu_2"]
    assert [b["is_error"] for b in reply["content"]] == [False, True]

    assert run_calls(tools, document, "--format", "anthropic", status=1) == reply


def test_anthropic_final_answer_has_no_results(tools):
    document = message([{"type": "text", "text": "All done."}], "end_turn")
    reply = run_calls(tools, document, status=0)
    assert reply == {"role": "user", "content": []}
    check_anthropic_reply(reply)


# ---------------------------------------------------------------------------
# MCP


def tools_call(id, name, arguments):
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=name, arguments=arguments)
    )
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    return mcp_types.JSONRPCRequest.model_validate(
        {"jsonrpc": "2.0", "id": id, **body}
    ).model_dump(mode="json", by_alias=True, exclude_none=True)


def test_mcp_calls_and_results(tools):
    requests = [
        tools_call(1, "echo", {"text": "hi"}),
        tools_call("two", "fail", {}),
    ]
    assert requests[0]["method"] == "tools/call"
    results = run_calls(tools, requests, status=1)
    assert len(results) == 2
    for result in results:
        check_model(mcp_types.CallToolResult, result)
    assert results[0]["content"] == [{"type": "text", "text": "hi"}]
    assert results[0]["structuredContent"] == {"length": 2}
    assert results[1]["isError"] is True

    single = run_calls(tools, requests[0], "--format", "mcp", status=0)
    assert single == results[:1]


def test_mcp_no_requests_have_no_results(tools):
    assert run_calls(tools, [], "--format", "mcp", status=0) == []
