// The `{name}` tool: the component's export. Build it with ./build.sh; test
// its logic with `node test.mjs`. To reach the network, `await fetch(url)` in
// an `async run(args)`: requests go only where the operator grants
// (`--allow-net`, or `[network] allow` in toolcage.toml).
//
// Settings, the strings an operator writes for this component under
// `[components.{file}.config]` in toolcage.toml, are read with `config.get`:
// here `default_top`, the `top` of a call that gives none
// (`default_top = "5"`).
//
// To call another tool, use `tools` from ./toolcage.js in an `async run`:
//
//     const total = (await tools.call("calc", { expression: "2 ^ 10" })).throwIfError();
//     total.details; // { expression: "2 ^ 10", result: 1024 }
//     const [a, b] = await tools.callAll([["calc", { expression: "1 + 1" }], ["calc", { expression: "2 + 2" }]]);
//
// A failed or refused call resolves to its result with `isError` set;
// `throwIfError()` turns it into a ToolCallError, which fails this tool's
// call with the callee's message. The operator grants which tools this
// component may call (`calls = ["calc"]` under `[components.{file}]` in
// toolcage.toml, or `--calls calc`); without a grant each call comes back
// refused.
import { config, defineTools } from "./toolcage.js";
import { countWords, defaultTop } from "./count.js";

export const tool = defineTools({
  "{name}": {
    description: "Counts the words of `text` and lists the `top` most frequent.",
    schema: {
      type: "object",
      properties: { text: { type: "string" }, top: { type: "integer", minimum: 1 } },
      required: ["text"],
      additionalProperties: false,
    },
    hints: { readOnly: true, idempotent: true },
    run({ text, top }) {
      return countWords(text, top ?? defaultTop(config.get("default_top")));
    },
  },
});
