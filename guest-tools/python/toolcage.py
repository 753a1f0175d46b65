"""Write toolcage tools in Python.

A toolcage tool is a WebAssembly component exporting the `toolcage:tool/tool`
interface of `wit/toolcage.wit`. This module turns plain functions into such
tools: decorate each with `@tool`, export `Tool` from your app module, and
build with componentize-py.

A complete tool (`app.py`)::

    from toolcage import Tool, ToolError, tool

    @tool(read_only=True, idempotent=True)
    def word_count(text: str, top: int = 3) -> dict:
        \"\"\"Counts the words of `text` and lists the `top` most frequent.\"\"\"
        if top < 1:
            raise ToolError("`top` must be at least 1")
        counts: dict[str, int] = {}
        for word in text.lower().split():
            counts[word] = counts.get(word, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return {"words": sum(counts.values()), "top": ranked[:top]}

    __all__ = ["Tool"]  # the component's export; every @tool is in it

Build it (with this directory and `toolcage.py` on the path)::

    python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1
    .venv/bin/componentize-py -d wit -w toolset-http componentize app \\
        -p . -p path/to/guest-tools/python -o word_count.wasm
    toolcage --tools . call word_count '{"text": "a b a"}'

What the module does for you:

- The input schema is derived from the signature when every parameter is
  annotated with `str`, `int`, `float`, `bool`, `list[...]` of those, or
  `Optional[...]`/`... | None` of those. A parameter with a default is not
  required. Anything else (a `dict`, a class, `Any`, `*args`) is refused when
  the module is imported, so pass `schema=` explicitly: a derived schema is
  always exact. `additionalProperties` is false.
- The name is the function's name, the description its docstring, unless
  given.
- The return value becomes the outcome: a `str` is the output; anything else
  JSON-serialisable is both the output (as compact JSON) and `details`;
  `Result(output, details)` sets them separately.
- `raise ToolError("what to do instead")` fails the call with that message.
  Any other exception fails it too, as `tool_error` with
  `ExceptionType: message`: an exception never traps the component. A
  `MemoryError` says the tool ran out of memory; the host adds which limit
  was hit.
- `log(level, message)` and `progress(message, fraction)` reach the host.
- `config.get(key)` is the setting `key` the operator wrote for the
  component (`[components.NAME.config]` in toolcage.toml), or None;
  `config.get_all()` is a dict of every one. There are none unless the
  operator wrote some, so give each a default.

The host calls each tool in a fresh instance, with only the mounted
directories visible (`open()` works under them) and an empty environment.
`http.get(url)` and `http.request(method, url, headers=..., body=...)`
make HTTP requests through `wasi:http` (build against the `toolset-http`
world); the host sends them only where the operator granted, and a refusal
raises `HttpError` saying so.

A tool may call other tools, the ones its operator granted it
(`[components.NAME] calls = ["fetch", "grep*"]` in toolcage.toml)::

    from toolcage import tools

    page = tools.call("fetch", {"url": url}).raise_for_error()
    first, second = tools.call_all([("grep", {"pattern": "a"}),
                                    ("grep", {"pattern": "b"})])

- `tools.call(name, arguments)` calls tool `name`; `arguments` is a dict
  (sent as JSON), a str of JSON, or None for `{}`. It returns a
  `CallResult`: `output` (the text), `details` (parsed from JSON, or None),
  `is_error`, `error_kind` (`permission_denied`, `invalid_arguments`,
  `tool_error`, `nested_limit`, `timeout`..., or None), `call_id` and
  `name`.
- A call that fails or is refused *returns* its result, with `is_error`
  set and `output` saying why: it never raises, so check `is_error`, or
  call `result.raise_for_error()`, which raises `ToolCallError` (a
  `ToolError`: uncaught, it fails your tool's call with the callee's
  message) and otherwise returns the result.
- `tools.call_all([(name, arguments), ...])` makes several calls and
  returns their results in the same order; the host runs them together
  when every tool named is read-only, else one at a time in that order.
- Each call takes the host's one path: the callee is validated, checked
  against the operator's rules and runs with its own grants, never yours.
  Outside a component (a native test) there is no host: `tools.call`
  raises `RuntimeError`, so replace `tools.call` in such a test.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = [
    "Tool", "ToolError", "Result", "tool", "log", "progress", "config", "ConfigError", "http",
    "HttpError", "tools", "CallResult", "ToolCallError",
]


class ToolError(Exception):
    """Fails the call with `message`, which the model reads: say what to do
    instead. `details` (JSON-serialisable) goes to programs."""

    def __init__(self, message: str, details: Any = None):
        super().__init__(message)
        self.message = message
        self.details = details


@dataclass
class Result:
    """A successful outcome with its `output` text and `details` set apart."""

    output: str
    details: Any = None


@dataclass
class _Spec:
    name: str
    title: Optional[str]
    description: str
    schema: dict
    output_schema: Optional[dict]
    hints: tuple
    func: Callable[..., Any]


_TOOLS: dict[str, _Spec] = {}

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_of(annotation: Any, where: str) -> tuple[dict, bool]:
    """The JSON Schema of one annotation, and whether it admits None."""
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}, False
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner, _ = _schema_of(rest[0], where)
            return {"anyOf": [inner, {"type": "null"}]}, True
    if origin is list and len(args) == 1:
        inner, _ = _schema_of(args[0], where)
        return {"type": "array", "items": inner}, False
    raise TypeError(
        f"{where}: cannot derive an exact JSON Schema from {annotation!r}; "
        "annotate with str, int, float, bool, list[...] or Optional[...] of "
        "those, or pass schema= to @tool"
    )


def derive_schema(func: Callable[..., Any]) -> dict:
    """The input schema of `func` from its type hints (see the module docs)."""
    hints = typing.get_type_hints(func)
    properties: dict[str, dict] = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        where = f"{func.__name__}({param.name})"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"{where}: only named parameters map to a schema")
        if param.name not in hints:
            raise TypeError(f"{where}: the parameter has no type annotation")
        schema, _ = _schema_of(hints[param.name], where)
        if param.default is not param.empty:
            try:
                json.dumps(param.default)
            except TypeError:
                raise TypeError(f"{where}: the default is not JSON") from None
            schema["default"] = param.default
        else:
            # Optional[...] without a default is required but may be null.
            required.append(param.name)
        properties[param.name] = schema
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def tool(
    func: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    title: Optional[str] = None,
    description: Optional[str] = None,
    schema: Optional[dict] = None,
    output_schema: Optional[dict] = None,
    read_only: bool = False,
    idempotent: bool = False,
    destructive: bool = False,
    open_world: bool = False,
):
    """Registers `func` as a tool of this component; usable bare (`@tool`) or
    with options. Hints default to none: the host then treats the tool as
    one that may write."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = name or func.__name__
        text = description or inspect.getdoc(func)
        if not text:
            raise TypeError(f"{tool_name}: give a description or a docstring")
        if tool_name in _TOOLS:
            raise TypeError(f"{tool_name}: two tools have this name")
        _TOOLS[tool_name] = _Spec(
            name=tool_name,
            title=title,
            description=text,
            schema=schema if schema is not None else derive_schema(func),
            output_schema=output_schema,
            hints=(read_only, idempotent, destructive, open_world),
            func=func,
        )
        return func

    return register(func) if func is not None else register


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _message(error: BaseException) -> str:
    if isinstance(error, MemoryError):
        return "MemoryError: the tool ran out of memory" + (
            f" ({error})" if str(error) else ""
        )
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def log(level: str, message: str) -> None:
    """Writes a line into the host's log: level is trace, debug, info, warn
    or error."""
    from wit_world.imports import host

    host.log(host.Level[level.upper()], message)


def progress(message: str, fraction: Optional[float] = None) -> None:
    """Reports progress of the current call; `fraction` in 0.0..=1.0."""
    from wit_world.imports import host

    host.progress(message, fraction)


# Imported here, once, for componentize-py to keep (see the `http` bindings
# below). Natively, in a test of the tool's logic, there are none.
try:
    from wit_world.imports import store as _store
except ImportError:
    _store = None


class ConfigError(Exception):
    """The settings could not be read. toolcage always answers; other hosts
    of `wasi:config` may fail. `kind` is `upstream` (where the settings come
    from failed) or `io`."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class config:
    """The tool's settings: strings the operator wrote for its component
    (`[components.NAME.config]` in toolcage.toml, NAME being the
    component's file stem), read-only. A call reads its own component's
    only. Settings are not secrets: the host refuses to make a secret one.
    Outside a component (running the tool's logic natively) there are
    none."""

    @staticmethod
    def get(key: str) -> Optional[str]:
        """The setting `key`, or None when the operator did not write it.
        Raises `ConfigError`."""
        if _store is None:
            return None
        return config._read(lambda: _store.get(key))

    @staticmethod
    def get_all() -> dict[str, str]:
        """Every setting of the component: empty when the operator wrote
        none. Raises `ConfigError`."""
        if _store is None:
            return {}
        return dict(config._read(_store.get_all))

    @staticmethod
    def _read(read: Callable[[], Any]) -> Any:
        from componentize_py_types import Err

        try:
            return read()
        except Err as error:
            kind = "io" if type(error.value).__name__ == "Error_Io" else "upstream"
            raise ConfigError(
                f"the tool's settings could not be read: {error.value.value}", kind
            ) from None


class HttpError(Exception):
    """An HTTP request failed: refused by the host (no grant, a special
    address, a budget spent) or by the network. `code` is the `wasi:http`
    error code's name, such as `HttpRequestDenied`."""

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.code = code


class Response:
    """A response: `status`, `headers` (lowercase names, in order) and the
    body, read with `text()`, `json()` or `read()`."""

    def __init__(self, status: int, headers: list, body: bytes, truncated: bool):
        self.status = status
        self.headers = headers
        self.body = body
        self.truncated = truncated

    def header(self, name: str) -> Optional[str]:
        """The first value of header `name` (lowercase), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def read(self) -> bytes:
        return self.body

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


_DENIED = {
    "HttpRequestDenied": "the operator has not granted this destination (see the call's log)",
    "DestinationIpProhibited": "the destination is a loopback, private or otherwise special address, which the operator has not granted",
}


def _code_name(code: Any) -> str:
    return type(code).__name__.removeprefix("ErrorCode_")


# componentize-py keeps the bindings a module imports when it is built, so
# they are imported here, once; a tool built against `toolset` (no
# `wasi:http`) has none.
try:
    from wit_world.imports import outgoing_handler as _outgoing_handler
    from wit_world.imports import streams as _streams
    from wit_world.imports import types as _http
except ImportError:
    _outgoing_handler = _streams = _http = None


class http:
    """HTTP requests from a tool, sent by the host within the operator's
    grants. Redirects are not followed: a `3xx` comes back as it is."""

    MAX_BODY = 16 << 20

    @staticmethod
    def get(url: str, headers: Optional[dict] = None, timeout_ms: Optional[int] = None,
            max_bytes: int = MAX_BODY) -> Response:
        """GETs `url`."""
        return http.request("GET", url, headers=headers, timeout_ms=timeout_ms, max_bytes=max_bytes)

    @staticmethod
    def request(method: str, url: str, headers: Optional[dict] = None, body: Optional[bytes] = None,
                timeout_ms: Optional[int] = None, max_bytes: int = MAX_BODY) -> Response:
        """Sends `method` to `url` with `headers` and `body`; reads at most
        `max_bytes` of the response body (`truncated` says if there was
        more). Raises `HttpError`."""
        from componentize_py_types import Err

        if _http is None:
            raise HttpError("this tool was built without wasi:http: build it with -w toolset-http")
        outgoing_handler, streams, t = _outgoing_handler, _streams, _http

        scheme_text, sep, rest = url.partition("://")
        if not sep or scheme_text.lower() not in ("http", "https"):
            raise HttpError(f"invalid URL {url!r}: it must start with http:// or https://")
        rest = rest.split("#", 1)[0]
        cut = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
        authority, path = rest[:cut], rest[cut:] or "/"
        if not path.startswith("/"):
            path = "/" + path
        if not authority:
            raise HttpError(f"invalid URL {url!r}: it has no host")
        try:
            fields = t.Fields.from_list(
                [(k.lower(), str(v).encode()) for k, v in (headers or {}).items()]
            )
        except Err as error:
            raise HttpError(f"invalid header: {error.value}") from None
        request = t.OutgoingRequest(fields)
        methods = {
            "GET": t.Method_Get(), "HEAD": t.Method_Head(), "POST": t.Method_Post(),
            "PUT": t.Method_Put(), "DELETE": t.Method_Delete(), "PATCH": t.Method_Patch(),
            "OPTIONS": t.Method_Options(),
        }
        try:
            request.set_method(methods.get(method.upper()) or t.Method_Other(method.upper()))
            request.set_scheme(t.Scheme_Https() if scheme_text.lower() == "https" else t.Scheme_Http())
            request.set_authority(authority)
            request.set_path_with_query(path)
        except Err:
            raise HttpError(f"invalid URL {url!r}") from None
        options = None
        if timeout_ms is not None:
            options = t.RequestOptions()
            options.set_first_byte_timeout(timeout_ms * 1_000_000)
        outgoing = request.body()
        try:
            future = outgoing_handler.handle(request, options)
        except Err as error:
            raise http._error(error.value) from None
        if body:
            stream = outgoing.write()
            try:
                for i in range(0, len(body), 4096):
                    stream.blocking_write_and_flush(body[i:i + 4096])
            except Err:
                pass  # the response says why
            finally:
                stream.__exit__(None, None, None)
        t.OutgoingBody.finish(outgoing, None)
        future.subscribe().block()
        outcome = future.get()
        future.__exit__(None, None, None)
        if outcome is None or isinstance(outcome, Err):
            raise HttpError("the response never came")
        inner = outcome.value
        if isinstance(inner, Err):
            raise http._error(inner.value)
        response = inner.value
        status = response.status()
        entries = [(k, v.decode("utf-8", errors="replace")) for k, v in response.headers().entries()]
        incoming = response.consume()
        stream = incoming.stream()
        data = bytearray()
        truncated = False
        try:
            while True:
                chunk = stream.blocking_read(65536)
                if len(data) + len(chunk) > max_bytes:
                    data += chunk[: max_bytes - len(data)]
                    truncated = True
                    break
                data += chunk
        except Err as error:
            if not isinstance(error.value, streams.StreamError_Closed):
                raise HttpError(f"reading the body failed: {error.value}") from None
        finally:
            stream.__exit__(None, None, None)
            incoming.__exit__(None, None, None)
            response.__exit__(None, None, None)
        return Response(status, entries, bytes(data), truncated)

    @staticmethod
    def _error(code: Any) -> HttpError:
        name = _code_name(code)
        return HttpError(f"the request failed: {_DENIED.get(name, name)}", name)


# Imported here, once, for componentize-py to keep, as the bindings above.
# Natively, in a test of the tool's logic, there are none.
try:
    from wit_world.imports import tools as _tools
except ImportError:
    _tools = None


@dataclass
class CallResult:
    """What a call of another tool returned, or why it did not run.
    `details` is parsed from JSON (None when the tool returned none)."""

    name: str
    output: str
    details: Any
    is_error: bool
    error_kind: Optional[str]
    call_id: str

    def raise_for_error(self) -> "CallResult":
        """Raises `ToolCallError` when the call failed or was refused;
        returns this result otherwise."""
        if self.is_error:
            raise ToolCallError(self)
        return self


class ToolCallError(ToolError):
    """A call of another tool failed or was refused (`result.raise_for_error()`).
    A `ToolError`: uncaught, it fails the calling tool's call with a message
    naming the callee, its error kind and its output. `result` is the
    `CallResult`; `kind` its `error_kind`."""

    def __init__(self, result: CallResult):
        kind = result.error_kind or "error"
        super().__init__(
            f"calling {result.name} failed ({kind}): {result.output}",
            details={
                "tool": result.name,
                "call_id": result.call_id,
                "error_kind": result.error_kind,
                "details": result.details,
            },
        )
        self.result = result
        self.kind = result.error_kind


def _arguments(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict):
        return _json(arguments)
    raise TypeError(
        "the arguments of a tool call are a dict, a str of JSON or None, "
        f"not {type(arguments).__name__}"
    )


def _result(name: str, raw: Any) -> CallResult:
    details = raw.details
    if details is not None:
        try:
            details = json.loads(details)
        except ValueError:
            pass  # not JSON after all: kept as the text
    return CallResult(
        name=name,
        output=raw.output,
        details=details,
        is_error=raw.is_error,
        error_kind=raw.error_kind,
        call_id=raw.call_id,
    )


class tools:
    """Calls other tools, within the operator's `calls` grant to this
    component (see the module docs). A failure is a result, never an
    exception: check `is_error` or call `raise_for_error()`."""

    @staticmethod
    def call(name: str, arguments: Any = None) -> CallResult:
        """Calls tool `name` with `arguments` (a dict, a str of JSON, or
        None for `{}`) and waits for its `CallResult`."""
        text = _arguments(arguments)
        if _tools is None:
            raise RuntimeError(
                f"no host to call {name!r}: tools.call works in a component "
                "(replace toolcage.tools.call in a native test)"
            )
        return _result(name, _tools.call(name, text))

    @staticmethod
    def call_all(requests: Any) -> list[CallResult]:
        """Calls every `(name, arguments)` of `requests` and returns their
        `CallResult`s in the same order: together when every tool named is
        read-only, otherwise one at a time in that order."""
        pairs = [(name, _arguments(arguments)) for name, arguments in requests]
        if _tools is None:
            raise RuntimeError(
                "no host to call tools: tools.call_all works in a component "
                "(replace toolcage.tools.call_all in a native test)"
            )
        raw = _tools.call_all([_tools.Request(name=n, arguments=a) for n, a in pairs])
        return [_result(name, one) for (name, _), one in zip(pairs, raw)]


class Tool:
    """The component's export: re-export it from the app module."""

    def describe(self):
        from wit_world.exports import tool as wit

        out = []
        for spec in _TOOLS.values():
            hints = wit.Hints(0)
            for on, flag in zip(
                spec.hints,
                (
                    wit.Hints.READ_ONLY,
                    wit.Hints.IDEMPOTENT,
                    wit.Hints.DESTRUCTIVE,
                    wit.Hints.OPEN_WORLD,
                ),
            ):
                if on:
                    hints |= flag
            out.append(
                wit.Descriptor(
                    name=spec.name,
                    title=spec.title,
                    description=spec.description,
                    input_schema=_json(spec.schema),
                    output_schema=None
                    if spec.output_schema is None
                    else _json(spec.output_schema),
                    hints=hints,
                )
            )
        return out

    def call(self, name: str, arguments: str):
        from componentize_py_types import Err
        from wit_world.exports import tool as wit

        try:
            spec = _TOOLS.get(name)
            if spec is None:
                raise ToolError(f"this component has no tool named {name!r}")
            args = json.loads(arguments)
            value = spec.func(**args)
            if isinstance(value, Result):
                details = None if value.details is None else _json(value.details)
                return wit.Outcome(output=value.output, details=details)
            if isinstance(value, str):
                return wit.Outcome(output=value, details=None)
            text = _json(value)
            return wit.Outcome(output=text, details=text)
        except ToolError as error:
            details = None if error.details is None else _json(error.details)
            raise Err(wit.Outcome(output=error.message, details=details))
        except BaseException as error:  # noqa: BLE001 - never trap
            raise Err(wit.Outcome(output=_message(error), details=None))
