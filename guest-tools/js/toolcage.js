// Write toolcage tools in JavaScript.
//
// A toolcage tool is a WebAssembly component exporting the `toolcage:tool/tool`
// interface of `wit/toolcage.wit`. `defineTools` turns plain functions into
// that export: give each tool its name, description, JSON Schema and hints,
// and export the result as `tool` from your module. A complete tool
// (`app.js`):
//
//     import { defineTools, ToolError } from "./toolcage.js";
//
//     export const tool = defineTools({
//       word_count: {
//         description: "Counts the words of `text` and lists the `top` most frequent.",
//         schema: {
//           type: "object",
//           properties: { text: { type: "string" }, top: { type: "integer", default: 3 } },
//           required: ["text"],
//           additionalProperties: false,
//         },
//         hints: { readOnly: true, idempotent: true },
//         run({ text, top = 3 }) {
//           if (top < 1) throw new ToolError("`top` must be at least 1");
//           const counts = new Map();
//           for (const w of text.toLowerCase().split(/\s+/).filter(Boolean)) counts.set(w, (counts.get(w) ?? 0) + 1);
//           const ranked = [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
//           return { words: [...counts.values()].reduce((a, b) => a + b, 0), top: ranked.slice(0, top) };
//         },
//       },
//     });
//
// Build it with componentize-js 0.23 (npm install @bytecodealliance/componentize-js@0.23.0):
//
//     npx componentize-js app.js --wit wit --world-name toolset \
//         --disable fetch-event -o word_count.wasm
//
// `--disable fetch-event`: a tool is called, never sent HTTP requests to
// serve. `fetch()` stays in, and reaches what the operator granted the
// component (anything else is refused, and the call's logs say why). Await
// it in an `async run(args)`: componentize-js runs the event loop until the
// promise settles.
//
// - `run(args)` receives the arguments, already validated by the host against
//   `schema`; it may be `async`. It may return (or resolve to) a string (the output), any other JSON value (both
//   the output, as compact JSON, and `details`), or `new Result(output,
//   details)`.
// - `throw new ToolError(message, details)` fails the call with that message,
//   which the model reads. Anything else thrown fails it too, as
//   `tool_error` with `Name: message`: a throw never traps the component.
// - `log(level, message)` and `progress(message, fraction)` reach the host.
// - `config.get(key)` is the setting `key` the operator wrote for the
//   component (`[components.NAME.config]` in toolcage.toml), or null;
//   `config.getAll()` is an object of every one. There are none unless the
//   operator wrote some, so give each a default.
// - Every call runs in a fresh instance with an empty environment and only
//   the network destinations granted. StarlingMonkey, the JS engine, has no
//   file API.
//
// A tool may call other tools, the ones its operator granted it
// (`[components.NAME] calls = ["fetch", "grep*"]` in toolcage.toml), in an
// `async run(args)`:
//
//     import { tools } from "./toolcage.js";
//
//     const page = (await tools.call("fetch", { url })).throwIfError();
//     const [a, b] = await tools.callAll([["grep", { pattern: "a" }], ["grep", { pattern: "b" }]]);
//
// - `tools.call(name, args)` calls tool `name`; `args` is an object (sent as
//   JSON), a string of JSON, or undefined for `{}`. It resolves to a
//   `CallResult`: `output` (the text), `details` (parsed from JSON, or
//   null), `isError`, `errorKind` (`permission_denied`, `invalid_arguments`,
//   `tool_error`, `nested_limit`, `timeout`..., or null), `callId` and
//   `name`.
// - A call that fails or is refused *resolves* to its result, with
//   `isError` set and `output` saying why: it never rejects for that, so
//   check `isError`, or call `result.throwIfError()`, which throws a
//   `ToolCallError` (a `ToolError`: uncaught, it fails your tool's call with
//   the callee's message) and otherwise returns the result.
// - `tools.callAll([[name, args], ...])` (or `[{ name, arguments }, ...]`)
//   makes several calls and resolves to their results in the same order;
//   the host runs them together when every tool named is read-only, else
//   one at a time in that order.
// - Each call takes the host's one path: the callee is validated, checked
//   against the operator's rules and runs with its own grants, never yours.
//   The host answers before the promise settles: calls are not overlapped
//   by awaiting several `tools.call` promises; use `callAll`.

import * as host from "toolcage:tool/host@0.1.4";
import * as nested from "toolcage:tool/tools@0.1.4";
import * as store from "wasi:config/store@0.2.0-rc.1";

/** Fails the call with `message` (for the model) and optional `details`. */
export class ToolError extends Error {
  constructor(message, details) {
    super(message);
    this.name = "ToolError";
    this.details = details;
  }
}

/** A successful outcome with its `output` text and `details` set apart. */
export class Result {
  constructor(output, details) {
    this.output = output;
    this.details = details;
  }
}

const HINTS = ["readOnly", "idempotent", "destructive", "openWorld"];

function describeOne(name, spec) {
  if (typeof spec.run !== "function") throw new TypeError(`${name}: run must be a function`);
  if (!spec.description) throw new TypeError(`${name}: a description is required`);
  const hints = {};
  for (const hint of HINTS) hints[hint] = Boolean(spec.hints?.[hint]);
  for (const hint of Object.keys(spec.hints ?? {})) {
    if (!HINTS.includes(hint)) throw new TypeError(`${name}: unknown hint ${hint}`);
  }
  return {
    name,
    title: spec.title,
    description: spec.description,
    inputSchema: JSON.stringify(spec.schema ?? { type: "object" }),
    outputSchema: spec.outputSchema === undefined ? undefined : JSON.stringify(spec.outputSchema),
    hints,
  };
}

function message(error) {
  if (error instanceof ToolError) return error.message;
  if (error instanceof Error) {
    if (/out of memory/i.test(error.message)) return `${error.name}: the tool ran out of memory (${error.message})`;
    return error.message ? `${error.name}: ${error.message}` : error.name;
  }
  // SpiderMonkey throws the bare string "out of memory" when an allocation fails.
  if (typeof error === "string") return /^out of memory$/i.test(error) ? "the tool ran out of memory" : error;
  try {
    return `thrown: ${JSON.stringify(error)}`;
  } catch {
    return `thrown: ${String(error)}`;
  }
}

function json(value) {
  return JSON.stringify(value);
}

/**
 * The component's export: `export const tool = defineTools({ name: spec, … })`,
 * where each spec has `description`, `run(args)` and optionally `title`,
 * `schema`, `outputSchema` and `hints` (`readOnly`, `idempotent`,
 * `destructive`, `openWorld`).
 */
export function defineTools(tools) {
  const descriptors = Object.entries(tools).map(([name, spec]) => describeOne(name, spec));
  return {
    describe() {
      return descriptors;
    },
    call(name, args) {
      let value;
      try {
        const spec = tools[name];
        if (!spec) throw new ToolError(`this component has no tool named ${JSON.stringify(name)}`);
        value = spec.run(JSON.parse(args));
      } catch (error) {
        throw failure(error);
      }
      // An async `run` (one that awaits fetch(), say): componentize-js runs
      // the event loop until the promise settles.
      if (value instanceof Promise) {
        return value.then(outcome, (error) => {
          throw failure(error);
        });
      }
      try {
        return outcome(value);
      } catch (error) {
        throw failure(error);
      }
    },
  };
}

/** What `run` returned, as the call's outcome. */
function outcome(value) {
  if (value instanceof Result) {
    return { output: String(value.output), details: value.details === undefined ? undefined : json(value.details) };
  }
  if (typeof value === "string") return { output: value, details: undefined };
  const text = json(value === undefined ? null : value);
  return { output: text, details: text };
}

/** What `run` threw, as the call's `err` outcome: componentize-js turns a
 * thrown {output, details} into it. */
function failure(error) {
  let details;
  try {
    details = error instanceof ToolError && error.details !== undefined ? json(error.details) : undefined;
  } catch {
    details = undefined;
  }
  return { output: message(error), details };
}

/** Writes a line into the host's log: trace, debug, info, warn or error. */
export function log(level, text) {
  host.log(level, text);
}

/** Reports progress of the current call; `fraction` in 0..=1 when known. */
export function progress(text, fraction) {
  host.progress(text, fraction);
}

/** The settings could not be read: toolcage always answers, other hosts of
 * `wasi:config` may fail. `kind` is "upstream" or "io". */
export class ConfigError extends Error {
  constructor(message, kind) {
    super(message);
    this.name = "ConfigError";
    this.kind = kind;
  }
}

/** A read of the store; its error (thrown with the WIT error as `payload`)
 * as a ConfigError. */
function readSettings(read) {
  try {
    return read();
  } catch (error) {
    const reason = error?.payload ?? error;
    const kind = reason?.tag === "io" ? "io" : "upstream";
    throw new ConfigError(`the tool's settings could not be read: ${reason?.val ?? reason}`, kind);
  }
}

/**
 * The tool's settings: strings the operator wrote for its component
 * (`[components.NAME.config]` in toolcage.toml, NAME being the component's
 * file stem), read-only. A call reads its own component's only. Settings are
 * not secrets: the host refuses to make a secret one.
 */
export const config = {
  /** The setting `key`, or null when the operator did not write it. Throws ConfigError. */
  get(key) {
    return readSettings(() => store.get(key)) ?? null;
  },
  /** Every setting of the component, as an object: empty when the operator wrote none. Throws ConfigError. */
  getAll() {
    return Object.fromEntries(readSettings(() => store.getAll()));
  },
};

/** What a call of another tool returned, or why it did not run. `details`
 * is parsed from JSON (null when the tool returned none). */
export class CallResult {
  constructor(name, raw) {
    this.name = name;
    this.output = raw.output;
    this.details = parseDetails(raw.details);
    this.isError = raw.isError;
    this.errorKind = raw.errorKind ?? null;
    this.callId = raw.callId;
  }

  /** Throws a ToolCallError when the call failed or was refused; returns
   * this result otherwise. */
  throwIfError() {
    if (this.isError) throw new ToolCallError(this);
    return this;
  }
}

/** A call of another tool failed or was refused (`result.throwIfError()`).
 * A ToolError: uncaught, it fails the calling tool's call with a message
 * naming the callee, its error kind and its output. `result` is the
 * CallResult, `kind` its `errorKind`. */
export class ToolCallError extends ToolError {
  constructor(result) {
    super(`calling ${result.name} failed (${result.errorKind ?? "error"}): ${result.output}`, {
      tool: result.name,
      call_id: result.callId,
      error_kind: result.errorKind,
      details: result.details,
    });
    this.name = "ToolCallError";
    this.result = result;
    this.kind = result.errorKind;
  }
}

function parseDetails(details) {
  if (details === undefined || details === null) return null;
  try {
    return JSON.parse(details);
  } catch {
    return details; // not JSON after all: kept as the text
  }
}

function encodeArguments(args) {
  if (args === undefined || args === null) return "{}";
  if (typeof args === "string") return args;
  if (typeof args === "object" && !Array.isArray(args)) return json(args);
  throw new TypeError(`the arguments of a tool call are an object, a string of JSON or undefined, not ${typeof args}`);
}

function request(entry) {
  const [name, args] = Array.isArray(entry) ? entry : [entry?.name, entry?.arguments];
  if (typeof name !== "string") throw new TypeError("each call of callAll is [name, args] or { name, arguments }");
  return { name, arguments: encodeArguments(args) };
}

/**
 * Calls other tools, within the operator's `calls` grant to this component.
 * The WIT import is synchronous: each method calls it and returns a promise
 * of the result, so a tool writes `await tools.call(...)`. A failed or
 * refused call resolves to a result with `isError` set; the promise rejects
 * only for arguments that cannot be sent (a TypeError).
 */
export const tools = {
  /** Calls tool `name` with `args` (an object, a string of JSON, or
   * undefined for `{}`): a Promise of its CallResult. */
  call(name, args) {
    return new Promise((resolve) => {
      const text = encodeArguments(args);
      resolve(new CallResult(name, nested.call(name, text)));
    });
  },
  /** Calls every `[name, args]` (or `{ name, arguments }`) of `requests`: a
   * Promise of their CallResults, in the same order. */
  callAll(requests) {
    return new Promise((resolve) => {
      const sent = Array.from(requests, request);
      const raw = nested.callAll(sent);
      resolve(raw.map((one, i) => new CallResult(sent[i].name, one)));
    });
  },
};
