"""The `{name}` tool. Build it with ./build.sh, test its logic with
`python3 test_app.py`. To reach the network, `from toolcage import http` and
`http.get(url)`: requests go only where the operator grants (`--allow-net`,
or `[network] allow` in toolcage.toml).

Settings, the strings an operator writes for this component under
`[components.{file}.config]` in toolcage.toml, are read with `config.get`:
here `default_top`, the `top` of a call that gives none
(`default_top = "5"`).

To call another tool, use `toolcage.tools` (see the commented example at
the end). The operator grants which tools this component may call
(`calls = ["calc"]` under `[components.{file}]` in toolcage.toml, or
`--calls calc`); without a grant each call comes back refused."""

from typing import Optional

from toolcage import Tool, ToolError, config, tool

__all__ = ["Tool"]  # the component's export


@tool(name="{name}", read_only=True, idempotent=True)
def {function}(text: str, top: Optional[int] = None) -> dict:
    """Counts the words of `text` and lists the `top` most frequent."""
    if top is None:
        top = default_top(config.get("default_top"))
    if top < 1:
        raise ToolError("`top` must be at least 1")
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"words": sum(counts.values()), "top": ranked[:top]}


def default_top(setting: Optional[str]) -> int:
    """`top` when a call gives none: the `default_top` setting, else 3."""
    if setting is None:
        return 3
    try:
        top = int(setting)
    except ValueError:
        top = 0
    if top < 1:
        raise ToolError(
            f"the setting `default_top` is {setting!r}, not a whole number of at "
            "least 1: pass `top`, or ask the operator to fix it"
        )
    return top


# Calling another tool, once the operator granted it: a failed or refused
# call returns its result with `is_error` set; `raise_for_error()` turns it
# into a `ToolCallError`, which fails this tool's call with the callee's
# message.
#
#     from toolcage import tools
#
#     total = tools.call("calc", {"expression": "2 ^ 10"}).raise_for_error()
#     total.details  # {"expression": "2 ^ 10", "result": 1024.0}
#     # Several at once: results in the order asked.
#     a, b = tools.call_all([("calc", {"expression": "1 + 1"}),
#                            ("calc", {"expression": "2 + 2"})])
