"""Code mode (`run_code`, `search_tools`, `describe_tool`) over MCP, through
the official Python SDK on stdio, with the bundled tools and the echo and
misbehave fixtures:

- `run_code`'s description shows the callable tools as Python stubs that
  CPython parses and runs, and so does `describe_tool` for every callable
  tool; a tool the operator's `[permissions]` deny is neither shown, nor
  found by `search_tools`, nor callable from a script (NameError);
- `serve --code-mode-only` lists only code mode's tools, whose scripts still
  reach the others; `--no-code-mode` removes code mode's tools;
- a chain of nested calls (glob, read_file of each file at once, grep)
  returns only the script's summary, and its `calls` log lists each call;
- a script's `ask` call is put to the user with elicitation, once per call
  (declined, the script gets PermissionError), on 2026-07-28 and on the
  older revisions; a client without elicitation gets a refusal saying why;
- cancelling a script stops it and the call it waits on, freeing their
  sandbox slots at once;
- hostile scripts (an endless loop, a syntax error, a script running a
  script, endless recursion, printing or allocation) end as error results
  saying why, and the server keeps serving.
"""

import ast
import inspect
import json
import re
import time
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

import httpx2
from mcp.client.streamable_http import streamable_http_client

from conftest import BIN, TOKEN, TOOLS, launch_http

# `mode` (conftest.py): the older revisions' handshake, or 2026-07-28.
pytestmark = pytest.mark.anyio

META = "dev.toolcage/call"
CODE_MODE_TOOLS = {"run_code", "search_tools", "describe_tool"}
STUBS_HEADER = "The tools a script can call:"
ALLOW_ALL = '[permissions]\ndefault = "allow"\n'
# Few enough tools for `run_code`'s description to show their whole stubs
# (it shows one line per tool past 8 KiB of stubs).
FEW_TOOLS = '[code_mode]\ntools = ["read_file", "write_file", "glob", "calc", "echo", "misbehave"]\n'


def toolcage_args(tmp_path, config=ALLOW_ALL, flags=(), serve=()):
    """`toolcage` arguments serving the bundled tools (so code mode is on)
    and the fixtures of TOOLS under `config` (a toolcage.toml's text),
    with global `flags` and `serve` flags."""
    path = tmp_path / "toolcage.toml"
    path.write_text(config)
    return ["--tools", TOOLS, "--config", str(path), *flags, "serve", *serve]


@asynccontextmanager
async def serving(args, mode="legacy", **options):
    """A Client connected over stdio to `toolcage ARGS`."""
    server = StdioServerParameters(command=BIN, args=args)
    async with Client(server, mode=mode, **options) as client:
        yield client


async def tool_names(client):
    return {tool.name for tool in (await client.list_tools()).tools}


async def run(client, code):
    """`run_code` of `code`: the CallToolResult."""
    return await client.call_tool("run_code", {"code": code})


def text(result):
    return result.content[0].text


def result_of(result):
    """A successful `run_code`'s details: {"result", "calls"}."""
    assert not result.is_error, f"the script failed: {text(result)}"
    details = result.structured_content
    assert details is not None and "calls" in details, f"no details: {result}"
    return details


def error_kind(result):
    """The error kind toolcage reports for a call in `_meta`."""
    return result.meta[META]["error_kind"]


def script_error(result):
    """The `error` of a failed `run_code`'s details, when the client got them.

    Error results carry no `structuredContent` over MCP (host/src/mcp/
    mapping.rs: clients check it against the output schema even when
    `isError` is set), so this is None today; should toolcage send it, it
    is checked too."""
    details = result.structured_content
    return None if details is None else details.get("error")


def python_block(description):
    """The ```python block of `run_code`'s description, after STUBS_HEADER."""
    assert STUBS_HEADER in description, f"no stubs in run_code's description:\n{description}"
    found = re.search(r"```python\n(.*)```\s*\Z", description.split(STUBS_HEADER, 1)[1], re.S)
    assert found, f"no ```python block after {STUBS_HEADER!r}:\n{description}"
    return found.group(1)


def stub_functions(source):
    """Parses and runs `source` (Python stubs) with CPython; returns the
    names of the async functions it defines, checking that each takes
    keyword arguments only, as scripts must call them."""
    tree = ast.parse(source)
    functions = [node for node in tree.body if isinstance(node, ast.AsyncFunctionDef)]
    for function in functions:
        arguments = function.args
        assert not arguments.posonlyargs and not arguments.args and not arguments.vararg, (
            f"{function.name} takes positional arguments:\n{ast.unparse(function)}"
        )
    namespace = {}
    exec(compile(tree, "<stubs>", "exec"), namespace)
    names = [function.name for function in functions]
    for name in names:
        assert inspect.iscoroutinefunction(namespace[name]), f"{name} is not async"
    return names


def callable_names(message):
    """The names after "Callable tools:" in a refusal's message."""
    found = re.search(r"Callable tools: ([^.]*)\.", message)
    assert found, f"no list of callable tools in: {message}"
    return set(found.group(1).split(", "))


# --- Stubs, search and the operator's rules ----------------------------------


async def test_run_code_shows_the_callable_tools_as_stubs_python_runs(tmp_path):
    async with serving(toolcage_args(tmp_path, ALLOW_ALL + FEW_TOOLS)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert CODE_MODE_TOOLS <= tools.keys(), sorted(tools)
        run_code = tools["run_code"]
        assert run_code.input_schema["required"] == ["code"], run_code.input_schema
        assert run_code.output_schema["required"] == ["calls"], run_code.output_schema
        names = stub_functions(python_block(run_code.description))
        # The code mode patterns, in load order; never code mode's own tools.
        assert names == ["read_file", "write_file", "glob", "calc", "echo", "misbehave"], names
        # The stubs are what scripts call: keyword arguments, awaited.
        result = await run(client, "r = await calc(expression='6 * 7')\nr['result']")
        assert result_of(result)["result"] == 42, text(result)


async def test_describe_tool_gives_every_callable_tool_a_stub_python_runs(tmp_path):
    async with serving(toolcage_args(tmp_path)) as client:
        # By default a script may call every tool but code mode's own.
        expected = await tool_names(client) - CODE_MODE_TOOLS
        assert {"read_file", "calc", "echo", "misbehave", "counter"} <= expected, expected
        unknown = await client.call_tool("describe_tool", {"name": "no_such_tool"})
        assert unknown.is_error, text(unknown)
        assert callable_names(text(unknown)) == expected, text(unknown)
        for name in sorted(expected):
            described = await client.call_tool("describe_tool", {"name": name})
            assert not described.is_error, f"describe_tool({name}): {text(described)}"
            assert stub_functions(text(described)) == [name], text(described)
        # Whether run_code's description holds whole stubs or one line each
        # (past 8 KiB of stubs), every callable tool is shown there.
        description = next(
            tool.description for tool in (await client.list_tools()).tools
            if tool.name == "run_code"
        )
        if "```python" in description:
            assert set(stub_functions(python_block(description))) == expected
        else:
            shown = set(re.findall(r"^(\w+)\(", description, re.M))
            assert shown == expected, description


async def test_a_denied_tool_is_neither_shown_nor_found_nor_callable(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    config = '[permissions]\ndefault = "allow"\n"write_*" = "deny"\n\n' + FEW_TOOLS
    args = toolcage_args(tmp_path, config, ["--mount", f"{workspace}:/workspace:rw"])
    async with serving(args) as client:
        run_code = next(t for t in (await client.list_tools()).tools if t.name == "run_code")
        names = stub_functions(python_block(run_code.description))
        assert "write_file" not in names and "read_file" in names, names
        # search_tools, over MCP and from a script.
        found = await client.call_tool("search_tools", {"query": "file"})
        assert not found.is_error and "read_file(" in text(found), text(found)
        assert "write_file" not in text(found), text(found)
        result = await run(client, '[t["name"] for t in await search_tools(query="file")]')
        found_in_script = result_of(result)["result"]
        assert "read_file" in found_in_script and "write_file" not in found_in_script, found_in_script
        described = await client.call_tool("describe_tool", {"name": "write_file"})
        assert described.is_error and "No tool a script can call" in text(described), text(described)
        # Calling it is a NameError listing what is callable.
        result = await run(client, 'await write_file(path="/workspace/b.txt", content="x")')
        assert result.is_error, text(result)
        assert "NameError: name 'write_file' is not defined" in text(result), text(result)
        listed = callable_names(text(result))
        assert "read_file" in listed and "write_file" not in listed, listed
        assert not (workspace / "b.txt").exists(), "the denied write happened"
        assert "nested" not in result.meta[META], "a denied tool was called"


# --- Which tools are listed ---------------------------------------------------


async def test_code_mode_only_lists_code_modes_tools_whose_scripts_reach_the_rest(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "note.txt").write_text("hello from the mount\n")
    args = toolcage_args(
        tmp_path, flags=["--mount", f"{workspace}:/workspace"], serve=["--code-mode-only"]
    )
    async with serving(args) as client:
        assert await tool_names(client) == CODE_MODE_TOOLS
        run_code = next(t for t in (await client.list_tools()).tools if t.name == "run_code")
        assert "read_file" in run_code.description, "the hidden tools are not shown as stubs"
        result = await run(client, 'r = await read_file(path="/workspace/note.txt")\nr["output"]')
        details = result_of(result)
        assert details["result"] == "hello from the mount\n", details
        assert [(c["tool"], c["ok"]) for c in details["calls"]] == [("read_file", True)], details
        # Unlisted is not uncallable: the same rules apply to a direct call.
        direct = await client.call_tool("read_file", {"path": "/workspace/note.txt"})
        assert not direct.is_error and text(direct) == "hello from the mount\n", text(direct)


async def test_no_code_mode_removes_code_modes_tools(tmp_path):
    async with serving(toolcage_args(tmp_path, flags=["--no-code-mode"])) as client:
        names = await tool_names(client)
        assert not names & CODE_MODE_TOOLS, sorted(names)
        assert {"read_file", "calc", "echo"} <= names, sorted(names)


# --- A chain of nested calls --------------------------------------------------

# Lines only the files hold: none may reach the client.
SECRETS = ["BODY-ALPHA-7731", "BODY-BETA-1402", "BODY-GAMMA-5518"]

CHAIN = """
import asyncio
found = await glob(pattern="**/*.py", path="/workspace")
files = [path for path in found["matches"] if not path.endswith("/")]
texts = await asyncio.gather(*[read_file(path=path) for path in files])
lines = sum([t["total_lines"] for t in texts])
longest = max([len(line) for t in texts for line in t["output"].splitlines()])
todos = await grep(pattern="TODO", path="/workspace", glob="*.py")
print(f"read {len(files)} files")
{"files": len(files), "lines": lines, "longest": longest, "todos": todos["match_count"]}
"""


async def test_a_chain_returns_only_the_summary_and_logs_each_call(tmp_path):
    workspace = tmp_path / "workspace"
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "docs").mkdir()
    (workspace / "src" / "main.py").write_text(f"# {SECRETS[0]}\n# TODO: tidy\nx = 1\n")
    (workspace / "src" / "pkg" / "util.py").write_text(f"# {SECRETS[1]}\ny = 2  # TODO\n")
    (workspace / "src" / "pkg" / "data.py").write_text(f"# {SECRETS[2]}\n")
    (workspace / "docs" / "notes.md").write_text("TODO: not Python\n")
    args = toolcage_args(tmp_path, flags=["--mount", f"{workspace}:/workspace"])
    async with serving(args) as client:
        result = await run(client, CHAIN)
        details = result_of(result)
        summary = {"files": 3, "lines": 6, "longest": len(f"# {SECRETS[0]}"), "todos": 2}
        assert details["result"] == summary, details
        assert text(result) == "read 3 files\n" + json.dumps(summary, separators=(",", ":"))
        everything = json.dumps([block.text for block in result.content])
        for secret in SECRETS:
            assert secret not in everything, f"a file's content reached the client: {everything}"
        calls = details["calls"]
        assert [c["tool"] for c in calls] == ["glob"] + ["read_file"] * 3 + ["grep"], calls
        assert all(c["ok"] and c["error_kind"] is None for c in calls), calls
        assert all(c["arguments_bytes"] > 0 and c["ms"] >= 0 for c in calls), calls
        # The log's calls are the nested calls toolcage ran and reports.
        nested = result.meta[META]["nested"]
        assert {c["call_id"] for c in calls} == {n["call_id"] for n in nested}, (calls, nested)
        assert len({c["call_id"] for c in calls}) == 5, calls
        assert all(n["depth"] == 1 and not n["is_error"] for n in nested), nested


async def test_the_model_reads_what_the_script_printed_then_its_result_once(tmp_path, mode):
    """One text block: the printed text, then the result; the log is in
    `structuredContent` and the host's record in `_meta`, not in the text."""
    script = 'print("counting")\nr = await calc(expression="6 * 7")\nr["result"]'
    async with serving(toolcage_args(tmp_path), mode) as client:
        result = await run(client, script)
    assert [block.type for block in result.content] == ["text"], result.content
    assert text(result).startswith("counting\n"), text(result)
    assert text(result) == "counting\n42.0", text(result)
    assert '"calls"' not in text(result) and "call_id" not in text(result), text(result)
    assert result_of(result)["result"] == 42.0
    assert [c["tool"] for c in result_of(result)["calls"]] == ["calc"]
    assert recorded_tools(result) == ["calc"]


# --- Approval of a script's calls ---------------------------------------------

ASK_WRITES = '[permissions]\ndefault = "allow"\nwrite_file = "ask"\n'

WRITE_TWO = """
done = []
for name in ["a.txt", "b.txt"]:
    try:
        await write_file(path="/rw/" + name, content="from " + name)
        done.append("wrote " + name)
    except PermissionError as e:
        done.append("refused " + name + ": " + str(e))
done
"""


def answering(approve):
    """An elicitation callback answering each question with
    `approve(question)` (True, False, or None to decline the form), and the
    questions it got. On 2026-07-28 the questions a run comes to arrive
    together, in no set order, so a user's answer depends on the question."""
    asked = []

    async def answer(context, params):
        asked.append(params.message)
        approved = approve(params.message)
        if approved is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"approve": approved})

    return answer, asked


def read_write_mount(tmp_path):
    directory = tmp_path / "rw"
    directory.mkdir()
    return directory, ["--mount", f"{directory}:/rw:rw"]


async def test_a_scripts_ask_is_put_to_the_user_and_a_refusal_raises(tmp_path, mode):
    directory, flags = read_write_mount(tmp_path)
    # Yes to a.txt; the form declined for b.txt.
    answer, asked = answering(lambda question: True if "a.txt" in question else None)
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, WRITE_TWO)
    details = result_of(result)
    assert len(asked) == 2, asked
    for name in ["a.txt", "b.txt"]:
        [question] = [q for q in asked if f'"path": "/rw/{name}"' in q]
        assert "`write_file`" in question and "as the tool `run_code` asks" in question, question
        assert f'"content": "from {name}"' in question, question
    done = details["result"]
    assert done[0] == "wrote a.txt", done
    assert done[1].startswith("refused b.txt: ") and "declined" in done[1], done
    assert (directory / "a.txt").read_text() == "from a.txt"
    assert not (directory / "b.txt").exists(), "a declined write happened"
    outcomes = [(c["tool"], c["ok"], c["error_kind"]) for c in details["calls"]]
    assert outcomes == [
        ("write_file", True, None), ("write_file", False, "permission_denied")
    ], details["calls"]


async def test_one_approval_covers_one_call_of_a_script(tmp_path, mode):
    """The same write twice: asked about twice, each answer for one call."""
    directory, flags = read_write_mount(tmp_path)
    answer, asked = answering(lambda question: True)
    script = """
for i in range(2):
    await write_file(path="/rw/same.txt", content="same\\n")
(await read_file(path="/rw/same.txt"))["output"]
"""
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, script)
    details = result_of(result)
    assert len(asked) == 2, f"one approval covered {3 - len(asked)} calls: {asked}"
    assert asked[0] == asked[1], asked
    assert details["result"] == "same\n", details
    assert (directory / "same.txt").read_text() == "same\n"
    assert [(c["tool"], c["ok"]) for c in details["calls"]] == [
        ("write_file", True), ("write_file", True), ("read_file", True)
    ], details["calls"]


async def test_an_approval_does_not_repeat_what_the_script_did_before_it(tmp_path, mode):
    """On 2026-07-28 the server cannot ask while the script runs: the run
    stops at the question and the client retries with the answer. The
    retry answers the calls with effects made before the question from the
    first run's record, so the edit happens once, as on the older
    revisions, where the script waits for the answer."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    answer, asked = answering(lambda question: True)
    script = """
await edit_file(path="/rw/log.txt", old_text="END", new_text="step\\nEND")
await write_file(path="/rw/after.txt", content="after")
(await read_file(path="/rw/log.txt"))["output"]
"""
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, script)
    details = result_of(result)
    assert len(asked) == 1, asked
    assert (directory / "log.txt").read_text() == "step\nEND\n", "the edit ran twice"
    assert (directory / "after.txt").read_text() == "after"
    assert details["result"] == "step\nEND\n", details
    assert [(c["tool"], c["ok"]) for c in details["calls"]] == [
        ("edit_file", True), ("write_file", True), ("read_file", True)
    ], details["calls"]


# Appends, asks, appends, asks, appends: two approvals, three appends.
APPEND_ASK = """
for step in ["one", "two"]:
    await edit_file(path="/rw/log.txt", old_text="END", new_text=step + "\\nEND")
    await write_file(path="/rw/asked-" + step + ".txt", content=step)
await edit_file(path="/rw/log.txt", old_text="END", new_text="three\\nEND")
(await read_file(path="/rw/log.txt"))["output"]
"""
APPENDED = "one\ntwo\nthree\nEND\n"
RUN_OF_APPEND_ASK = ["edit_file", "write_file", "edit_file", "write_file", "edit_file", "read_file"]


def recorded_tools(result):
    """The tools of the host's record (`_meta` `nested`) of an answer."""
    return [call["tool"] for call in result.meta[META]["nested"]]


async def test_a_run_paused_twice_makes_each_call_once_and_records_them_all(tmp_path, mode):
    """However many times the run pauses for an answer (2026-07-28) or
    waits for one (the older revisions), each call runs once, and the
    final answer's record lists every call of the run, each once."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    answer, asked = answering(lambda question: True)
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, APPEND_ASK)
    details = result_of(result)
    assert len(asked) == 2, asked
    assert (directory / "log.txt").read_text() == APPENDED, "an append ran twice"
    assert details["result"] == APPENDED, details
    assert [c["tool"] for c in details["calls"]] == RUN_OF_APPEND_ASK, details["calls"]
    assert recorded_tools(result) == RUN_OF_APPEND_ASK, result.meta[META]["nested"]
    ids = [call["call_id"] for call in result.meta[META]["nested"]]
    assert len(set(ids)) == len(ids), ids
    assert {c["call_id"] for c in details["calls"]} == set(ids), (details["calls"], ids)
    assert result.meta[META]["nested_usage"]["calls"] == 6, result.meta[META]


async def test_each_pause_answers_with_the_record_of_the_run_so_far(tmp_path):
    """On 2026-07-28, driven by hand: each input-required answer's `_meta`
    lists every call the run made up to its question, the one asked about
    refused, pending; the retry that brings the answer makes it."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    answer, asked = answering(lambda question: True)
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    records = []
    async with serving(args, "2026-07-28", elicitation_callback=answer) as client:
        responses, state = None, None
        while True:
            result = await client.session.call_tool(
                "run_code",
                {"code": APPEND_ASK},
                allow_input_required=True,
                input_responses=responses,
                request_state=state,
            )
            if not isinstance(result, types.InputRequiredResult):
                break
            records.append(result.meta[META])
            [(key, _)] = result.input_requests.items()
            responses = {key: types.ElicitResult(action="accept", content={"approve": True})}
            state = result.request_state
    assert len(records) == 2, records
    pending = [(c["tool"], c["error_kind"]) for c in records[0]["nested"]]
    assert pending == [("edit_file", None), ("write_file", "permission_denied")], records[0]
    second = [(c["tool"], c["error_kind"]) for c in records[1]["nested"]]
    assert second == [
        ("edit_file", None),
        ("write_file", None),
        ("edit_file", None),
        ("write_file", "permission_denied"),
    ], records[1]
    assert records[1]["nested_usage"]["calls"] == 4, records[1]
    assert recorded_tools(result) == RUN_OF_APPEND_ASK
    assert (directory / "log.txt").read_text() == APPENDED


async def test_a_paused_run_keeps_one_budget(tmp_path, mode):
    """`nested_calls = 4`: three appends, an approved write, three more
    appends. The budget is the run's, however many times it pauses: the
    fifth call is refused, and the appends before it ran once each."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    answer, asked = answering(lambda question: True)
    config = ASK_WRITES + "\n[components.code.limits]\nnested_calls = 4\n"
    script = """
for i in range(3):
    await edit_file(path="/rw/log.txt", old_text="END", new_text="before\\nEND")
await write_file(path="/rw/asked.txt", content="yes")
for i in range(3):
    await edit_file(path="/rw/log.txt", old_text="END", new_text="after\\nEND")
"""
    args = toolcage_args(tmp_path, config, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, script)
    assert result.is_error, text(result)
    assert error_kind(result) == "tool_error", result.meta
    assert "nested_calls" in text(result), text(result)
    assert (directory / "log.txt").read_text() == "before\n" * 3 + "END\n"
    assert (directory / "asked.txt").read_text() == "yes"
    assert result.meta[META]["nested_usage"]["calls"] == 4, result.meta[META]
    effectful = [c for c in result.meta[META]["nested"] if c["error_kind"] is None]
    assert len(effectful) == 4, result.meta[META]["nested"]


async def test_a_paused_run_keeps_one_time_limit(tmp_path, mode):
    """A 2.5 s script: 1.5 s of a tool, an approved write, 1.5 s more. The
    time is the run's, however many times it pauses: the second sleep runs
    past the script's limit (not counting the time the user took)."""
    directory, flags = read_write_mount(tmp_path)
    answer, asked = answering(lambda question: True)
    config = ASK_WRITES + "\n[components.code.limits]\ntimeout_ms = 2500\n"
    script = """
await misbehave(mode="sleep", amount=1500)
await write_file(path="/rw/asked.txt", content="yes")
await misbehave(mode="sleep", amount=1500)
"done"
"""
    args = toolcage_args(tmp_path, config, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, script)
    assert len(asked) == 1, asked
    assert result.is_error, text(result)
    assert "done" not in text(result)
    assert (directory / "asked.txt").read_text() == "yes"
    assert error_kind(result) == "timeout", result.meta[META]
    assert "its run's earlier attempts" in text(result) or mode == "legacy", text(result)


# --- Sealed state (2026-07-28, driven by hand) -------------------------------

# What WRITE_ONCE's run answers: its result, as text.
DONE = '"done"'
WRITE_ONCE = 'await edit_file(path="/rw/log.txt", old_text="END", new_text="x\\nEND")\nawait write_file(path="/rw/asked.txt", content="yes")\n"done"'


async def pause(client, code=WRITE_ONCE):
    """`run_code` of `code` up to its first question: the input-required result."""
    result = await client.session.call_tool("run_code", {"code": code}, allow_input_required=True)
    assert isinstance(result, types.InputRequiredResult), result
    return result


async def retry(client, paused, state=None, code=WRITE_ONCE):
    """The retry of `paused` with a yes to each question, bringing back
    `state` (the paused run's own by default)."""
    yes = types.ElicitResult(action="accept", content={"approve": True})
    return await client.session.call_tool(
        "run_code",
        {"code": code},
        allow_input_required=True,
        input_responses={key: yes for key in paused.input_requests},
        request_state=paused.request_state if state is None else state,
    )


def refused_state(result, why):
    """Asserts `result` is the refusal of its request state, saying `why`."""
    assert isinstance(result, types.CallToolResult), result
    assert result.is_error, text(result)
    said = text(result)
    assert "The request state this retry of `run_code` brought back was refused: " in said, said
    assert why in said and "Nothing ran." in said, said


@asynccontextmanager
async def sealing(tmp_path, state_config=""):
    """A 2026-07-28 client of a server asking before writes, with a
    read-write /rw holding log.txt; yields (client, directory)."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    answer, _ = answering(lambda question: True)
    args = toolcage_args(tmp_path, ASK_WRITES + state_config, flags)
    async with serving(args, "2026-07-28", elicitation_callback=answer) as client:
        yield client, directory


async def test_a_state_is_sealed_and_answers_one_retry(tmp_path):
    async with sealing(tmp_path) as (client, directory):
        paused = await pause(client)
        assert "asked.txt" not in paused.request_state and "edit_file" not in paused.request_state
        done = await retry(client, paused)
        assert text(done) == DONE, text(done)
        # The same state again: refused, and nothing ran again.
        refused_state(await retry(client, paused), "it was used already: a state answers one retry")
    assert (directory / "log.txt").read_text() == "x\nEND\n"


async def test_an_altered_state_or_one_for_other_arguments_is_refused_and_nothing_runs(tmp_path):
    async with sealing(tmp_path) as (client, directory):
        paused = await pause(client)
        state = paused.request_state
        middle = len(state) // 2
        flipped = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1:]
        refused_state(await retry(client, paused, flipped), "it was altered")
        refused_state(await retry(client, paused, "forged"), "it is not a state this server made")
        other = WRITE_ONCE.replace("yes", "no")
        refused_state(
            await retry(client, paused, code=other), "it is for another call (another tool, or other arguments)"
        )
        # None of it used the state up.
        assert text(await retry(client, paused)) == DONE
    assert (directory / "log.txt").read_text() == "x\nEND\n"
    assert (directory / "asked.txt").read_text() == "yes"


async def test_an_expired_state_is_refused(tmp_path):
    async with sealing(tmp_path, "\n[state]\nexpiry_ms = 300\n") as (client, directory):
        paused = await pause(client)
        await anyio.sleep(0.6)
        refused_state(await retry(client, paused), "it expired")
    assert not (directory / "asked.txt").exists()


@asynccontextmanager
async def over_http(tmp_path, state_config="", tokens=None):
    """A `toolcage serve --http` asking before writes (with a token file, if
    `tokens`), with a read-write /rw holding log.txt; yields a function
    opening a 2026-07-28 client of it with a token (or none)."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    serve = ["--http", "127.0.0.1:0"]
    if tokens:
        (tmp_path / "tokens").write_text("\n".join(tokens) + "\n")
        serve += ["--token-file", str(tmp_path / "tokens")]
    process, url = launch_http(toolcage_args(tmp_path, ASK_WRITES + state_config, flags, serve))
    answer, _ = answering(lambda question: True)

    @asynccontextmanager
    async def client_of(token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="2026-07-28", elicitation_callback=answer) as client:
                yield client

    try:
        yield client_of
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


async def test_a_large_state_stays_on_the_server_and_a_handle_it_lost_is_refused(tmp_path):
    """`inline_kib = 0`: every state stays in the store, the client holding
    a handle. A second server with the same key (over HTTP without tokens,
    where a state is anyone's) opens the seal but has no such handle: its
    store is its own."""
    key = tmp_path / "state.key"
    key.write_text("ab" * 32 + "\n")
    config = f'\n[state]\ninline_kib = 0\nkey_file = "{key}"\n'
    (tmp_path / "first").mkdir()
    async with over_http(tmp_path / "first", config) as client_of:
        async with client_of() as client:
            paused = await pause(client)
            assert len(paused.request_state) < 400, paused.request_state
    (tmp_path / "second").mkdir()
    async with over_http(tmp_path / "second", config) as client_of:
        async with client_of() as client:
            refused_state(await retry(client, paused), "the server no longer holds it")
            # Its own states it holds.
            assert text(await retry(client, await pause(client))) == DONE
    assert (tmp_path / "second" / "rw" / "asked.txt").read_text() == "yes"


async def test_another_tokens_state_is_refused(tmp_path):
    """Over HTTP with two tokens: a state is its token's."""
    other = "second-token-5be1"
    async with over_http(tmp_path, tokens=[TOKEN, other]) as client_of:
        async with client_of(TOKEN) as mine, client_of(other) as theirs:
            paused = await pause(mine)
            refused_state(await retry(theirs, paused), "it belongs to another caller")
            assert text(await retry(mine, paused)) == DONE
    assert (tmp_path / "rw" / "log.txt").read_text() == "x\nEND\n"


async def test_an_uncaught_refusal_ends_the_script_with_permission_error(tmp_path, mode):
    directory, flags = read_write_mount(tmp_path)
    answer, asked = answering(lambda question: False)
    script = 'await write_file(path="/rw/c.txt", content="c")\n"not reached"'
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    async with serving(args, mode, elicitation_callback=answer) as client:
        result = await run(client, script)
    assert len(asked) == 1, asked
    assert result.is_error, text(result)
    assert "PermissionError: write_file: The user refused this call" in text(result), text(result)
    assert "not reached" not in text(result)
    assert not (directory / "c.txt").exists()


async def test_a_scripts_ask_without_elicitation_is_refused_saying_why(tmp_path, mode):
    directory, flags = read_write_mount(tmp_path)
    async with serving(toolcage_args(tmp_path, ASK_WRITES, flags), mode) as client:
        result = await run(client, WRITE_TWO)
    done = result_of(result)["result"]
    for line in done:
        assert line.startswith("refused "), done
        assert "no one can approve them here" in line, done
        assert "does not support elicitation" in line, done
    assert list(directory.iterdir()) == [], "a write nobody approved happened"


# --- Cancellation -------------------------------------------------------------


async def test_cancelling_a_script_stops_it_and_the_call_it_waits_on(tmp_path, mode):
    """Two sandbox slots: the script and its sleeping call hold both. Once
    the client cancels, a script calling a tool (two slots again) runs at
    once, so neither kept its slot; uncancelled, it would wait until the
    sleep's 20 s timeout."""
    args = toolcage_args(
        tmp_path, flags=["--timeout-ms", "20000"], serve=["--max-concurrent-calls", "2"]
    )
    async with serving(args, mode) as client:
        started = time.monotonic()
        with anyio.move_on_after(0.5):
            # Sleeps until the 20 s timeout unless cancelled.
            await run(client, 'await misbehave(mode="sleep")\n"woke"')
            pytest.fail("the sleeping script returned")
        assert time.monotonic() - started < 2
        started = time.monotonic()
        direct = await client.call_tool("calc", {"expression": "1 + 1"})
        assert text(direct) == "2", text(direct)
        result = await run(client, '(await calc(expression="6 * 7"))["result"]')
        elapsed = time.monotonic() - started
        assert result_of(result)["result"] == 42, text(result)
        assert elapsed < 2, f"the next calls took {elapsed:.2f} s: a slot was still held"
        assert result.meta[META]["slot_wait_ms"] < 1000, result.meta[META]


# --- Hostile scripts ----------------------------------------------------------

# (script, toolcage's error kind, what the text says, the error's line)
HOSTILE = {
    "endless loop": (
        "while True:\n    pass\n", "timeout", ["time limit of 2 s"], None,
    ),
    "syntax error": (
        "total = 0\nfor i in range(3)\n    total += i\ntotal\n",
        "tool_error", ["SyntaxError", 'File "script.py", line 2'], 2,
    ),
    "run_code from a script": (
        'await run_code(code="1")\n',
        "tool_error", ["NameError: name 'run_code' is not defined", "cannot run a script"], 1,
    ),
    "endless recursion": (
        "def f(n):\n    return f(n + 1)\nf(0)\n",
        "tool_error", ["RecursionError"], None,
    ),
    "endless printing": (
        'while True:\n    print("x" * 1000)\n',
        "tool_error", ["MemoryError", "65536 bytes"], 2,
    ),
    "endless allocation": (
        'x = "a"\nwhile True:\n    x = x + x\n',
        "memory_limit", ["memory limit of 256 MiB"], None,
    ),
}


@pytest.mark.parametrize("case", HOSTILE)
async def test_a_hostile_script_is_an_error_saying_why_and_the_server_keeps_serving(
    tmp_path, case
):
    code, kind, says, line = HOSTILE[case]
    # Unlimited fuel: only the 2 s timeout ends the loop.
    args = toolcage_args(tmp_path, flags=["--fuel", "unlimited", "--timeout-ms", "2000"])
    async with serving(args) as client:
        started = time.monotonic()
        result = await run(client, code)
        elapsed = time.monotonic() - started
        assert result.is_error, f"{case} succeeded: {text(result)[:2000]}"
        assert error_kind(result) == kind, result.meta[META]
        for words in says:
            assert words in text(result), f"{words!r} not in: {text(result)[-2000:]}"
        assert elapsed < 6, f"{case} took {elapsed:.2f} s"
        # Printing is capped: the text is what was kept, then the error.
        assert len(text(result)) < 70_000, len(text(result))
        error = script_error(result)
        if error is not None:
            assert line is None or error["line"] == line, error
            if case == "syntax error":
                assert error["kind"] == "syntax_error", error
        # Still serving: a direct call, and a script.
        direct = await client.call_tool("calc", {"expression": "2 + 2"})
        assert text(direct) == "4", text(direct)
        again = await run(client, "(await calc(expression='3 * 3'))['result']")
        assert result_of(again)["result"] == 9, text(again)


# --- Sessions -----------------------------------------------------------------


async def in_session(client, code, session="s"):
    """`run_code` of `code` in `session`: the CallToolResult."""
    return await client.call_tool("run_code", {"code": code, "session": session})


def session_of(result):
    """A successful run's `session` details."""
    return result_of(result)["session"]


async def test_a_sessions_globals_last_to_its_next_run_and_only_there(tmp_path, mode):
    async with serving(toolcage_args(tmp_path), mode) as client:
        first = await in_session(client, 'rows = [1, 2, 3]\ndef total():\n    return sum(rows)\nlen(rows)')
        assert text(first) == "3", text(first)
        kept = session_of(first)
        assert (kept["name"], kept["restored"], kept["saved"]) == ("s", False, True), kept
        assert 0 < kept["bytes"] < 64 << 10, kept
        second = await in_session(client, "rows.append(4)\ntotal()")
        assert text(second) == "10", text(second)
        assert session_of(second)["restored"] is True
        # Another session, and a run without one, start empty.
        other = await in_session(client, "rows", session="t")
        assert other.is_error and "NameError" in text(other), text(other)
        alone = await run(client, "rows")
        assert alone.is_error and "NameError" in text(alone), text(alone)
        assert "session" not in (alone.structured_content or {})
        # A failed run keeps what it did before it raised.
        failed = await in_session(client, "rows.append(5)\nraise ValueError('late')")
        assert failed.is_error and "late" in text(failed), text(failed)
        assert text(await in_session(client, "total()")) == "15"


async def test_another_tokens_session_of_the_same_name_is_empty(tmp_path):
    other = "second-token-5be1"
    async with over_http(tmp_path, tokens=[TOKEN, other]) as client_of:
        async with client_of(TOKEN) as mine, client_of(other) as theirs:
            assert text(await in_session(mine, "secret = 'mine'\nsecret")) == '"mine"'
            theirs_run = await in_session(theirs, "secret")
            assert theirs_run.is_error and "NameError" in text(theirs_run), text(theirs_run)
            assert text(await in_session(mine, "secret")) == '"mine"'


async def test_a_session_over_its_bound_is_not_saved_and_the_run_says_why(tmp_path, mode):
    config = ALLOW_ALL + "\n[code_mode]\nsession_kib = 64\n"
    async with serving(toolcage_args(tmp_path, config), mode) as client:
        assert text(await in_session(client, "small = 1\nsmall")) == "1"
        big = await in_session(client, "blob = 'x' * 200000\nlen(blob)")
        said = text(big)
        assert not big.is_error and said.endswith("\n200000"), said
        assert "[session \"s\" was not saved: its state is " in said, said
        assert "more than a session keeps (65536 bytes)" in said, said
        assert session_of(big)["saved"] is False
        # The next run starts from what was saved before the big one.
        assert text(await in_session(client, "small")) == "1"
        gone = await in_session(client, "blob")
        assert gone.is_error and "NameError" in text(gone), text(gone)


async def test_a_session_expires_when_idle_and_a_caller_keeps_a_bounded_number(tmp_path, mode):
    config = ALLOW_ALL + "\n[code_mode]\nsession_idle_ms = 1500\nsessions_per_caller = 2\n"
    async with serving(toolcage_args(tmp_path, config), mode) as client:
        for name in ["a", "b"]:
            assert text(await in_session(client, f"v = '{name}'\nv", session=name)) == f'"{name}"'
        # A third session drops the one idle longest: `a`. (Each run of a
        # session saves it again, so `b` is checked first.)
        assert text(await in_session(client, "v = 'c'\nv", session="c")) == '"c"'
        assert text(await in_session(client, "v", session="b")) == '"b"'
        dropped = await in_session(client, "v", session="a")
        assert dropped.is_error and "NameError" in text(dropped), text(dropped)
        await anyio.sleep(2.0)
        expired = await in_session(client, "v", session="b")
        assert expired.is_error and "NameError" in text(expired), text(expired)
        assert '[session "b" started empty: nothing was kept under this name' in text(expired), text(expired)


async def test_a_session_run_paused_for_a_question_is_saved_once_when_it_ends(tmp_path):
    """A session's run that asks: the pause saves nothing, the retry
    replays from what the session held before, and its end is saved."""
    directory, flags = read_write_mount(tmp_path)
    (directory / "log.txt").write_text("END\n")
    answer, _ = answering(lambda question: True)
    args = toolcage_args(tmp_path, ASK_WRITES, flags)
    async with serving(args, "2026-07-28", elicitation_callback=answer) as client:
        arguments = {"code": "n = 10\nn", "session": "s"}
        assert text(await client.call_tool("run_code", arguments)) == "10"
        arguments = {"code": "n = n + 1\nawait write_file(path='/rw/asked.txt', content=str(n))\nn", "session": "s"}
        paused = await client.session.call_tool("run_code", arguments, allow_input_required=True)
        assert isinstance(paused, types.InputRequiredResult), paused
        yes = types.ElicitResult(action="accept", content={"approve": True})
        done = await client.session.call_tool(
            "run_code",
            arguments,
            allow_input_required=True,
            input_responses={key: yes for key in paused.input_requests},
            request_state=paused.request_state,
        )
        assert text(done) == "11", text(done)
        assert text(await client.call_tool("run_code", {"code": "n", "session": "s"})) == "11"
    assert (directory / "asked.txt").read_text() == "11"
