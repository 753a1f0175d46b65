//! Short listings of tools, and finding tools by words.

use crate::ToolSpec;
use crate::stub::{Shape, default_literal, params, shape};
use crate::text::flat;

/// The longest summary, in characters.
const SUMMARY_CHARS: usize = 120;

/// Defaults longer than this are listed as `...`.
const DEFAULT_CHARS: usize = 20;

/// The first sentence of `description` (or its first line, if shorter), at
/// most 120 characters (cut at a word, ending `...`, if longer).
///
/// A sentence ends at `.`, `!` or `?` followed by the end or by whitespace
/// and then anything but a lower-case letter (so `e.g. this` goes on).
pub fn summary(description: &str) -> String {
    let line = description.trim_start().lines().next().unwrap_or_default();
    let sentence = &line[..sentence_end(line)];
    shorten(&flat(sentence), SUMMARY_CHARS)
}

fn sentence_end(line: &str) -> usize {
    for (i, c) in line.char_indices() {
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let end = i + c.len_utf8();
        let rest = &line[end..];
        let next = rest.trim_start();
        let spaced = rest.starts_with(char::is_whitespace);
        if rest.is_empty() || (spaced && !next.starts_with(char::is_lowercase)) {
            return end;
        }
    }
    line.len()
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 3).collect();
    let cut = match cut.rfind(' ') {
        Some(space) if space > max / 2 => &cut[..space],
        _ => &cut,
    };
    format!("{}...", cut.trim_end())
}

/// A line listing `tool`: `name(required, optional=default) - summary`.
///
/// Optional arguments show their default when it is a short Python literal,
/// else `None` (no default) or `...`; a tool whose arguments are passed as
/// `**arguments` shows that; one whose name is not a Python identifier ends
/// `(not callable from Python)`.
pub fn one_line(tool: &ToolSpec) -> String {
    let py_name = tool.identifier;
    let name = py_name.unwrap_or(tool.name);
    let mut line = format!("{}({})", flat(name), arguments(tool));
    let summary = summary(tool.description);
    if !summary.is_empty() {
        line.push_str(" - ");
        line.push_str(&summary);
    }
    if py_name.is_none() {
        line.push_str(" (not callable from Python)");
    }
    line
}

fn arguments(tool: &ToolSpec) -> String {
    let map = match shape(tool.input_schema) {
        Shape::NoArgs => return String::new(),
        Shape::Unpack(_) | Shape::Kwargs(_) => return "**arguments".into(),
        Shape::Keywords(map) => map,
    };
    let listed = params(map).into_iter().map(|param| {
        if param.required {
            return param.name.to_owned();
        }
        let default = default_literal(param.schema).unwrap_or_else(|| "None".into());
        match default.chars().count() {
            n if n > DEFAULT_CHARS => format!("{}=...", param.name),
            _ => format!("{}={default}", param.name),
        }
    });
    listed.collect::<Vec<_>>().join(", ")
}

/// The indices of the tools in which every word of `query` occurs
/// (case-insensitively, `-` and `_` alike) in the name or the description,
/// best first: a name equal to the query, then by how many of the words
/// the name holds (so name matches before description-only ones), then in
/// `tools`' order. An empty query matches every tool.
pub fn search(tools: &[ToolSpec], query: &str) -> Vec<usize> {
    let query = fold(query);
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut found: Vec<(bool, usize, usize)> = Vec::new();
    for (index, tool) in tools.iter().enumerate() {
        let name = fold(tool.name);
        let description = fold(tool.description);
        let in_name = words.iter().filter(|w| name.contains(**w)).count();
        if words
            .iter()
            .all(|w| name.contains(w) || description.contains(w))
        {
            found.push((name != query.trim(), usize::MAX - in_name, index));
        }
    }
    found.sort_unstable();
    found.into_iter().map(|(_, _, index)| index).collect()
}

/// Lower case, `-` as `_`.
fn fold(text: &str) -> String {
    text.to_lowercase().replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn spec<'a>(name: &'a str, description: &'a str, schema: &'a Value) -> ToolSpec<'a> {
        let identifier = crate::identifiers([name]).remove(name);
        ToolSpec {
            name,
            identifier: identifier.map(|i| &*Box::leak(i.into_boxed_str())),
            description,
            input_schema: schema,
            output_schema: None,
            read_only: false,
        }
    }

    #[test]
    fn summaries() {
        assert_eq!(summary("Reads a file. Then more."), "Reads a file.");
        assert_eq!(summary("  \n Lists files\nin a directory."), "Lists files");
        assert_eq!(summary("Uses e.g. globs. Then."), "Uses e.g. globs.");
        assert_eq!(summary("Version 1.2 works! Yes"), "Version 1.2 works!");
        assert_eq!(summary("Done?"), "Done?");
        assert_eq!(summary("No end"), "No end");
        assert_eq!(summary(""), "");
        assert_eq!(summary("Ünïcode façade. Ok"), "Ünïcode façade.");
    }

    #[test]
    fn long_summaries_are_cut_at_a_word() {
        let long = "word ".repeat(60);
        let short = summary(&long);
        assert!(short.chars().count() <= 120, "{short}");
        assert!(short.ends_with("word..."), "{short}");
        let unbroken = "x".repeat(300);
        assert_eq!(summary(&unbroken), format!("{}...", "x".repeat(117)));
        let wide = "é".repeat(300);
        assert_eq!(summary(&wide).chars().count(), 120);
    }

    #[test]
    fn one_lines() {
        let schema = json!({"type": "object", "properties": {
            "offset": {"type": "integer", "default": 0},
            "path": {"type": "string"},
            "limit": {"type": "integer"},
            "mode": {"type": "string", "default": "a very long default value indeed"},
        }, "required": ["path"]});
        let tool = spec(
            "read_file",
            "Reads a text file. Lines are numbered.",
            &schema,
        );
        assert_eq!(
            one_line(&tool),
            "read_file(path, offset=0, limit=None, mode=...) - Reads a text file."
        );
        let none = json!({"type": "object", "additionalProperties": false});
        assert_eq!(one_line(&spec("now", "", &none)), "now()");
        let any = json!({});
        assert_eq!(
            one_line(&spec("get-url", "Fetches.", &any)),
            "get_url(**arguments) - Fetches."
        );
        assert_eq!(
            one_line(&spec("3d", "Draws.", &any)),
            "3d(**arguments) - Draws. (not callable from Python)"
        );
        let keyword = json!({"properties": {"from": {"type": "string"}}});
        assert_eq!(
            one_line(&spec("go", "Go.", &keyword)),
            "go(**arguments) - Go."
        );
    }

    #[test]
    fn search_ranks_name_matches_first() {
        let schema = json!({});
        let tools = [
            spec("write_file", "Writes a file.", &schema),
            spec("grep", "Searches file contents for a pattern.", &schema),
            spec("read_file", "Reads a file.", &schema),
            spec("file", "Anything about files.", &schema),
            spec("list-dir", "Lists a directory, like ls.", &schema),
        ];
        assert_eq!(search(&tools, "file"), [3, 0, 2, 1]);
        assert_eq!(search(&tools, "READ file"), [2]);
        assert_eq!(search(&tools, "file pattern"), [1]);
        assert_eq!(search(&tools, "list_dir"), [4]);
        assert_eq!(search(&tools, "dir ls"), [4]);
        assert_eq!(search(&tools, "write reads"), Vec::<usize>::new());
        assert_eq!(search(&tools, "  "), [0, 1, 2, 3, 4]);
        assert_eq!(search(&[], "x"), Vec::<usize>::new());
    }

    #[test]
    fn search_prefers_more_words_in_the_name() {
        let schema = json!({});
        let tools = [
            spec("json_tool", "Reads a file.", &schema),
            spec("read_file", "Parses json.", &schema),
        ];
        assert_eq!(search(&tools, "read file json"), [1, 0]);
    }
}
