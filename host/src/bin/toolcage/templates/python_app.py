"""The `{name}` tool. Build it with ./build.sh, test its logic with
`python3 test_app.py`. To reach the network, `from toolcage import http` and
`http.get(url)`: requests go only where the operator grants (`--allow-net`,
or `[network] allow` in toolcage.toml)."""

from toolcage import Tool, ToolError, tool

__all__ = ["Tool"]  # the component's export


@tool(name="{name}", read_only=True, idempotent=True)
def {function}(text: str, top: int = 3) -> dict:
    """Counts the words of `text` and lists the `top` most frequent."""
    if top < 1:
        raise ToolError("`top` must be at least 1")
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"words": sum(counts.values()), "top": ranked[:top]}
