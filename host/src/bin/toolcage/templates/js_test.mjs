// The tool's logic, natively: `node test.mjs`.
import assert from "node:assert/strict";
import { countWords } from "./count.js";

assert.deepEqual(countWords("a b A", 1), { words: 3, top: [["a", 2]] });
console.log("ok");
