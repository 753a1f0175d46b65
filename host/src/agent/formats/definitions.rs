//! Tool definitions in each format: the `tools` of a provider's request, or
//! of an MCP `tools/list` result.

use serde_json::{Map, Value, json};

use super::Format;
use super::strict::strict_compatible;
use crate::catalog::component::Descriptor;
use crate::catalog::permissions::Permissions;
use crate::catalog::registry::Registry;

/// The definitions of every tool of `registry`, in registration order, as a
/// JSON array of `format`'s tool objects:
///
/// - OpenAI Chat Completions: `{type: "function", function: {name, description, parameters, strict}}`;
/// - OpenAI Responses: `{type: "function", name, description, parameters, strict}`;
/// - Anthropic Messages: `{name, description, input_schema}`;
/// - MCP: `Tool` objects `{name, title?, description, inputSchema,
///   outputSchema?, annotations: {readOnlyHint, destructiveHint,
///   idempotentHint, openWorldHint}}`, the `tools` of a `tools/list` result.
///
/// Only MCP carries the title, output schema and hints: the provider formats
/// have no place for them.
///
/// Both OpenAI formats carry `strict` explicitly, as [`strict_compatible`]
/// decides: `true` only for an input schema that OpenAI's strict mode accepts
/// as it is, `false` for every other. The Responses API takes a missing
/// `strict` as `true`, which would make every optional argument required
/// (or reject the schema); Chat Completions takes it as `false`, and says the
/// same when told.
///
/// Code mode's `run_code` is shown as the model should see it under
/// `permissions`: its description lists the tools a script may call
/// ([`code_mode::shown`](crate::code_mode::shown)).
pub fn definitions(registry: &Registry, permissions: &Permissions, format: Format) -> Value {
    Value::Array(
        registry
            .tools()
            .map(|tool| {
                let shown = crate::code_mode::shown(registry, permissions, tool);
                definition(&shown.descriptor, format)
            })
            .collect(),
    )
}

/// One tool's definition in `format`: see [`definitions`].
pub fn definition(descriptor: &Descriptor, format: Format) -> Value {
    let Descriptor {
        name,
        title,
        description,
        input_schema,
        output_schema,
        hints,
    } = descriptor;
    match format {
        Format::OpenAi => json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": input_schema,
                "strict": strict_compatible(input_schema),
            },
        }),
        Format::OpenAiResponses => json!({
            "type": "function",
            "name": name,
            "description": description,
            "parameters": input_schema,
            "strict": strict_compatible(input_schema),
        }),
        Format::Anthropic => {
            json!({ "name": name, "description": description, "input_schema": input_schema })
        }
        Format::Mcp => {
            let mut tool = Map::new();
            tool.insert("name".into(), json!(name));
            if let Some(title) = title {
                tool.insert("title".into(), json!(title));
            }
            tool.insert("description".into(), json!(description));
            tool.insert("inputSchema".into(), input_schema.clone());
            if let Some(output_schema) = output_schema {
                tool.insert("outputSchema".into(), output_schema.clone());
            }
            tool.insert(
                "annotations".into(),
                json!({
                    "readOnlyHint": hints.read_only,
                    "destructiveHint": hints.destructive,
                    "idempotentHint": hints.idempotent,
                    "openWorldHint": hints.open_world,
                }),
            );
            Value::Object(tool)
        }
    }
}
