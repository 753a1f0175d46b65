//! The tools a script may call: those the host lists as callable by this
//! component. The host decides it, by the one rule every nested call is
//! checked by: the `calls` grant, less what the operator's rules deny, less
//! code mode's own tools (a script running a script would only spend the
//! budget twice).

use std::collections::HashMap;

use serde_json::{Value, json};
use toolcage_code_mode::ToolSpec;
use toolcage_guest::tools::{self, Callable};

/// The most tools `search_tools` returns.
const MAX_FOUND: usize = 20;

/// The tools a script may call, indexed by the names a script calls them.
pub struct Catalog {
    /// In name order, as the host lists them.
    tools: Vec<Callable>,
    /// Each tool's identifier (the host's, one to one over the registry):
    /// its index in `tools`. What a script's function call is looked up in.
    by_identifier: HashMap<String, usize>,
    /// Each tool's name: its index in `tools`.
    by_name: HashMap<String, usize>,
}

impl Catalog {
    /// What the host lists now.
    pub fn load() -> Catalog {
        Catalog::of(tools::callable())
    }

    fn of(tools: Vec<Callable>) -> Catalog {
        let index = |key: fn(&Callable) -> Option<&String>| -> HashMap<String, usize> {
            let keyed = tools.iter().enumerate();
            keyed
                .filter_map(|(index, tool)| Some((key(tool)?.clone(), index)))
                .collect()
        };
        let by_identifier = index(|tool| tool.identifier.as_ref());
        let by_name = index(|tool| Some(&tool.name));
        Catalog {
            tools,
            by_identifier,
            by_name,
        }
    }

    /// The tool a script's function `identifier` calls, if the script may
    /// call it.
    pub fn get(&self, identifier: &str) -> Option<&Callable> {
        let index = self.by_identifier.get(identifier)?;
        Some(&self.tools[*index])
    }

    /// The tool `describe_tool` was asked about: by its name, or by its
    /// identifier.
    pub fn named(&self, name: &str) -> Option<&Callable> {
        let index = self.by_name.get(name).or(self.by_identifier.get(name))?;
        Some(&self.tools[*index])
    }

    /// Every callable tool, by the name a script calls it, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|tool| tool.identifier.clone().unwrap_or_else(|| tool.name.clone()))
            .collect()
    }

    fn specs(&self) -> Vec<ToolSpec<'_>> {
        self.tools.iter().map(spec).collect()
    }

    /// The tools matching `query`, best first: each as `{name, summary}`.
    pub fn search(&self, query: &str) -> Value {
        let specs = self.specs();
        let found: Vec<Value> = toolcage_code_mode::search(&specs, query)
            .into_iter()
            .take(MAX_FOUND)
            .map(|index| {
                let spec = &specs[index];
                json!({ "name": spec.name, "summary": toolcage_code_mode::one_line(spec) })
            })
            .collect();
        Value::Array(found)
    }

    /// The Python stub of tool `name` (its name or identifier).
    pub fn describe(&self, name: &str) -> Option<String> {
        self.named(name).map(|tool| {
            toolcage_code_mode::python_module(&[spec(tool)], toolcage_code_mode::Detail::Full)
        })
    }
}

fn spec(tool: &Callable) -> ToolSpec<'_> {
    ToolSpec {
        name: &tool.name,
        identifier: tool.identifier.as_deref(),
        description: &tool.description,
        input_schema: &tool.input_schema,
        output_schema: tool.output_schema.as_ref(),
        read_only: tool.read_only,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool, its identifier as the host makes it over `all` the
    /// registry's names.
    fn tool(name: &str, all: &[&str]) -> Callable {
        Callable {
            name: name.to_string(),
            identifier: toolcage_code_mode::identifiers(all.iter().copied()).remove(name),
            description: format!("The {name} tool."),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            read_only: true,
        }
    }

    #[test]
    fn a_tool_is_called_by_its_identifier_and_described_by_its_name_too() {
        let all = ["get-sum", "read_file"];
        let catalog = Catalog::of(all.iter().map(|name| tool(name, &all)).collect());
        assert_eq!(catalog.get("read_file").unwrap().name, "read_file");
        assert_eq!(catalog.get("get_sum").unwrap().name, "get-sum");
        assert!(catalog.get("get-sum").is_none(), "not an identifier");
        assert_eq!(catalog.named("get-sum").unwrap().name, "get-sum");
        assert_eq!(catalog.named("get_sum").unwrap().name, "get-sum");
        assert!(catalog.get("missing").is_none());
        assert_eq!(catalog.names(), ["get_sum", "read_file"]);
    }

    #[test]
    fn two_tools_one_spelling_each_keep_their_own_identifier() {
        let all = ["a-b", "a_b"];
        let catalog = Catalog::of(all.iter().map(|name| tool(name, &all)).collect());
        assert_eq!(catalog.get("a_b").unwrap().name, "a_b");
        assert_eq!(catalog.get("a_b_2").unwrap().name, "a-b");
        assert_eq!(catalog.names(), ["a_b_2", "a_b"]);
        assert!(catalog.describe("a-b").unwrap().contains("def a_b_2("));
        // `a_b` denied: not listed, and its identifier reaches nothing.
        let catalog = Catalog::of(vec![tool("a-b", &all)]);
        assert!(catalog.get("a_b").is_none());
        assert!(catalog.describe("a_b").is_none());
    }
}
