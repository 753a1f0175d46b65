//! The tools a script may call: those the host lists as callable by this
//! component (its `calls` grant, less what the operator's rules deny), less
//! code mode's own tools, which a script never calls (a script running a
//! script would only spend the budget twice).

use serde_json::{Value, json};
use toolcage_guest::tools::{self, Callable};
use toolcage_stubs::{ToolSpec, python_identifier};

/// Code mode's own tools.
pub const OWN_TOOLS: [&str; 3] = ["run_code", "search_tools", "describe_tool"];

/// The most tools `search_tools` returns.
const MAX_FOUND: usize = 20;

/// The tools a script may call, by name.
pub struct Catalog {
    tools: Vec<Callable>,
}

impl Catalog {
    /// What the host lists now.
    pub fn load() -> Catalog {
        let tools = tools::callable()
            .into_iter()
            .filter(|tool| !OWN_TOOLS.contains(&tool.name.as_str()))
            .collect();
        Catalog { tools }
    }

    /// The tool a script calls `name` (its name, or the Python name of a
    /// kebab-case one: `get_sum` for `get-sum`), if the script may call it.
    /// Should two tools share a Python name, the first in name order is it.
    pub fn get(&self, name: &str) -> Option<&Callable> {
        self.tools
            .iter()
            .find(|tool| tool.name == name)
            .or_else(|| {
                self.tools
                    .iter()
                    .find(|tool| python_identifier(&tool.name).as_deref() == Some(name))
            })
    }

    /// Every callable tool, by the name a script calls it, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|tool| python_identifier(&tool.name).unwrap_or_else(|| tool.name.clone()))
            .collect()
    }

    fn specs(&self) -> Vec<ToolSpec<'_>> {
        self.tools.iter().map(spec).collect()
    }

    /// The tools matching `query`, best first: each as `{name, summary}`.
    pub fn search(&self, query: &str) -> Value {
        let specs = self.specs();
        let found: Vec<Value> = toolcage_stubs::search(&specs, query)
            .into_iter()
            .take(MAX_FOUND)
            .map(|index| {
                let spec = &specs[index];
                json!({ "name": spec.name, "summary": toolcage_stubs::one_line(spec) })
            })
            .collect();
        Value::Array(found)
    }

    /// The Python stub of tool `name`.
    pub fn describe(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(|tool| toolcage_stubs::python_module(&[spec(tool)], toolcage_stubs::Detail::Full))
    }
}

fn spec(tool: &Callable) -> ToolSpec<'_> {
    ToolSpec {
        name: &tool.name,
        description: &tool.description,
        input_schema: &tool.input_schema,
        output_schema: tool.output_schema.as_ref(),
        read_only: tool.read_only,
    }
}
