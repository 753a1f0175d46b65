// The tool's logic, free of toolcage imports so that it runs under Node too.
export function countWords(text, top) {
  const counts = new Map();
  for (const word of text.toLowerCase().split(/\s+/).filter(Boolean)) {
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const ranked = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return { words: [...counts.values()].reduce((a, b) => a + b, 0), top: ranked.slice(0, top) };
}
