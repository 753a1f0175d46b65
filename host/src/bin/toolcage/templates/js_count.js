// The tool's logic, free of toolcage imports so that it runs under Node too.
export function countWords(text, top) {
  const counts = new Map();
  for (const word of text.toLowerCase().split(/\s+/).filter(Boolean)) {
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const ranked = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return { words: [...counts.values()].reduce((a, b) => a + b, 0), top: ranked.slice(0, top) };
}

// `top` when a call gives none: the `default_top` setting (null when unset),
// else 3.
export function defaultTop(setting) {
  if (setting === null) return 3;
  if (!/^[0-9]+$/.test(setting) || Number(setting) < 1) {
    throw new RangeError(
      `the setting \`default_top\` is ${JSON.stringify(setting)}, not a whole number of at least 1: pass \`top\`, or ask the operator to fix it`,
    );
  }
  return Number(setting);
}
