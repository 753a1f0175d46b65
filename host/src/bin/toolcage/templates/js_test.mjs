// The tool's logic, natively: `node test.mjs`.
import assert from "node:assert/strict";
import { countWords, defaultTop } from "./count.js";

assert.deepEqual(countWords("a b A", 1), { words: 3, top: [["a", 2]] });
assert.equal(defaultTop(null), 3);
assert.equal(defaultTop("5"), 5);
for (const bad of ["0", "five", ""]) assert.throws(() => defaultTop(bad), /at least 1/);
console.log("ok");
