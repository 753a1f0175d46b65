// markdown_outline: the heading tree of a Markdown document, with line
// numbers, so an agent can find its way in a long file before reading it.
// An example toolcage tool written in JavaScript.

import { defineTools, Result, ToolError } from "./toolcage.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const ATX = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;

function outline(text, maxLevel) {
  const headings = [];
  const lines = text.split(/\r?\n/);
  let fence = null;
  lines.forEach((line, index) => {
    const open = FENCE.exec(line);
    if (fence) {
      if (open && open[1][0] === fence[0] && open[1].length >= fence.length) fence = null;
      return;
    }
    if (open) {
      fence = open[1];
      return;
    }
    const atx = ATX.exec(line);
    let heading = null;
    if (atx) {
      heading = { level: atx[1].length, title: (atx[2] ?? "").trim(), line: index + 1 };
    } else if (index > 0 && SETEXT.test(line) && lines[index - 1].trim() !== "" && !ATX.test(lines[index - 1])) {
      heading = { level: line.trim()[0] === "=" ? 1 : 2, title: lines[index - 1].trim(), line: index };
    }
    if (heading && heading.level <= maxLevel) headings.push(heading);
  });
  return { headings, lines: lines.length };
}

export const tool = defineTools({
  markdown_outline: {
    title: "Outline a Markdown document",
    description:
      "Lists the headings of a Markdown document (ATX `#` and setext underlined ones, not those in code blocks) " +
      "as an indented outline with line numbers, down to `max_level` (1-6, default 6).",
    schema: {
      type: "object",
      properties: {
        text: { type: "string", description: "The Markdown source." },
        max_level: { type: "integer", minimum: 1, maximum: 6, default: 6 },
      },
      required: ["text"],
      additionalProperties: false,
    },
    outputSchema: {
      type: "object",
      properties: {
        lines: { type: "integer" },
        headings: {
          type: "array",
          items: {
            type: "object",
            properties: { level: { type: "integer" }, title: { type: "string" }, line: { type: "integer" } },
            required: ["level", "title", "line"],
          },
        },
      },
      required: ["lines", "headings"],
    },
    hints: { readOnly: true, idempotent: true },
    run({ text, max_level = 6 }) {
      const found = outline(text, max_level);
      if (found.headings.length === 0) {
        throw new ToolError(`no headings found in ${found.lines} lines: the document may not be Markdown, or all its headings are deeper than max_level`);
      }
      const top = Math.min(...found.headings.map((h) => h.level));
      const text_ = found.headings.map((h) => `${"  ".repeat(h.level - top)}${h.title} (line ${h.line})`).join("\n");
      return new Result(text_, found);
    },
  },
});
