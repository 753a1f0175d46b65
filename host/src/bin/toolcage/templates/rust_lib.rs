//! The `{name}` tool. Build it with
//! `cargo build --release --target wasm32-wasip2`, check it with
//! `toolcage check target/wasm32-wasip2/release/{file}.wasm`, and test its
//! logic natively with `cargo test`.
//!
//! To reach the network, use `toolcage_guest::http` (`http::get(url)?`):
//! requests go only where the operator grants (`--allow-net`, or
//! `[network] allow` in toolcage.toml), and a refusal says which grant is
//! missing.
//!
//! Settings, the strings an operator writes for this component under
//! `[components.{file}.config]` in toolcage.toml, are read with
//! `toolcage_guest::config`: here `default_top`, the `top` of a call that
//! gives none (`default_top = "5"`).
//!
//! To call another tool, use `toolcage_guest::tools` (see the commented
//! example in `call`). The operator grants which tools this component may
//! call (`calls = ["calc"]` under `[components.{file}]` in toolcage.toml,
//! or `--calls calc`); without a grant each call comes back refused.

use toolcage_guest::{Descriptor, Outcome, Tool, Value, config, json, parse_args};

struct WordCount;

#[derive(serde::Deserialize)]
struct Args {
    text: String,
    top: Option<usize>,
}

impl Tool for WordCount {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "{name}",
            "Counts the words of `text` and lists the `top` most frequent.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": {
                "text": { "type": "string" },
                "top": { "type": "integer", "minimum": 1 }
            },
            "required": ["text"],
            "additionalProperties": false
        }))
        .read_only()
        .idempotent()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let Args { text, top } = parse_args(args)?;
        let top = match top {
            Some(top) => top,
            // Settings are read here, in the component: a native test has
            // no host to ask, so it tests `default_top` with a value.
            None => default_top(config::get("default_top")?.as_deref()).map_err(Outcome::text)?,
        };
        // Calling another tool, once the operator granted it: a failed or
        // refused call is a result with `is_error` set, never a panic.
        //
        //     let sum = toolcage_guest::tools::call("calc", &json!({ "expression": "2 ^ 10" }));
        //     if sum.is_error {
        //         return Err(Outcome::text(format!("calc failed: {}", sum.output)));
        //     }
        //     let value = sum.details; // Some(json!({ "expression": ..., "result": 1024.0 }))
        //     // Several at once: results in the order asked.
        //     let both = toolcage_guest::tools::call_all(&[
        //         ("calc", json!({ "expression": "1 + 1" })),
        //         ("calc", json!({ "expression": "2 + 2" })),
        //     ]);
        let (words, ranked) = count(&text, top);
        let details = json!({ "words": words, "top": ranked });
        Ok(Outcome::text(details.to_string()).with_details(details))
    }
}

/// `top` when a call gives none: the `default_top` setting, else 3.
fn default_top(setting: Option<&str>) -> Result<usize, String> {
    match setting.map(str::parse::<usize>) {
        None => Ok(3),
        Some(Ok(top)) if top >= 1 => Ok(top),
        Some(_) => Err(format!(
            "The setting `default_top` is {setting:?}, not a whole number of at least 1: pass `top`, or ask the operator to fix it."
        )),
    }
}

/// The number of words, and the `top` most frequent with their counts.
fn count(text: &str, top: usize) -> (usize, Vec<(String, usize)>) {
    let mut counts = std::collections::BTreeMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word.to_lowercase()).or_insert(0) += 1;
    }
    let words = counts.values().sum();
    let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(top);
    (words, ranked)
}

toolcage_guest::export_tools!(WordCount);

#[cfg(test)]
mod tests {
    #[test]
    fn counts_and_ranks_words() {
        let (words, top) = super::count("a b A", 1);
        assert_eq!(words, 3);
        assert_eq!(top, [("a".to_string(), 2)]);
    }

    #[test]
    fn top_defaults_to_the_setting_else_three() {
        assert_eq!(super::default_top(None), Ok(3));
        assert_eq!(super::default_top(Some("5")), Ok(5));
        for bad in ["0", "five", ""] {
            assert!(super::default_top(Some(bad)).is_err(), "{bad}");
        }
    }
}
