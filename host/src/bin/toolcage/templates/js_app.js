// The `{name}` tool: the component's export. Build it with ./build.sh; test
// its logic with `node test.mjs`. To reach the network, `await fetch(url)` in
// an `async run(args)`: requests go only where the operator grants
// (`--allow-net`, or `[network] allow` in toolcage.toml).
//
// Settings, the strings an operator writes for this component under
// `[components.{file}.config]` in toolcage.toml, are read with `config.get`:
// here `default_top`, the `top` of a call that gives none
// (`default_top = "5"`).
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
