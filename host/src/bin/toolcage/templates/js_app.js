// The `{name}` tool: the component's export. Build it with ./build.sh; test
// its logic with `node test.mjs`. To reach the network, `await fetch(url)` in
// an `async run(args)`: requests go only where the operator grants
// (`--allow-net`, or `[network] allow` in toolcage.toml).
import { defineTools } from "./toolcage.js";
import { countWords } from "./count.js";

export const tool = defineTools({
  "{name}": {
    description: "Counts the words of `text` and lists the `top` most frequent.",
    schema: {
      type: "object",
      properties: { text: { type: "string" }, top: { type: "integer", minimum: 1, default: 3 } },
      required: ["text"],
      additionalProperties: false,
    },
    hints: { readOnly: true, idempotent: true },
    run({ text, top = 3 }) {
      return countWords(text, top);
    },
  },
});
