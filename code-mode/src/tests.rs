//! Tests of the stubs: the type rules, the signatures and docstrings, odd
//! schemas, and that every stub parses (and runs) as Python.

use serde_json::{Value, json};

use super::*;
use crate::types::{Renderer, Shared};

/// The identifier of `name` in a catalog of it alone.
fn identifier(name: &str) -> Option<&'static str> {
    let identifier = identifiers([name]).remove(name)?;
    Some(Box::leak(identifier.into_boxed_str()))
}

fn tool<'a>(name: &'a str, input: &'a Value, output: Option<&'a Value>) -> ToolSpec<'a> {
    ToolSpec {
        name,
        identifier: identifier(name),
        description: "Does it.",
        input_schema: input,
        output_schema: output,
        read_only: false,
    }
}

/// The type of `schema` (as a root) and the helpers it defined.
fn render(schema: &Value) -> (String, Vec<String>) {
    let mut shared = Shared::new();
    let ty = Renderer::new(&mut shared, schema, "T").ty(schema, "TValue", 0);
    (ty.render(), shared.helpers)
}

fn ty(schema: Value) -> String {
    render(&schema).0
}

/// The `async def` line(s) of a tool's stub, up to the docstring.
fn signature(stub: &str) -> &str {
    let start = stub.find("async def").expect("a def");
    let end = stub[start..].find("\"\"\"").expect("a docstring");
    stub[start..start + end].trim_end()
}

fn hard_schema() -> Value {
    json!({"type":"object","$defs":{"tag":{"type":"string","pattern":"^[a-z][a-z0-9-]*$"},"point":{"type":"array","prefixItems":[{"type":"number"},{"type":"number"}],"items":false,"minItems":2}},"properties":{"name":{"type":"string","format":"hostname"},"kind":{"enum":["circle","polygon","label"]},"version":{"const":1},"count":{"type":"integer","minimum":0},"ratio":{"type":"number"},"tags":{"type":"array","items":{"$ref":"#/$defs/tag"}},"center":{"$ref":"#/$defs/point"},"points":{"type":"array","items":{"$ref":"#/$defs/point"}},"id":{"anyOf":[{"type":"integer"},{"type":"string"}]},"note":{"type":["string","null"]},"meta":{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false},"range":{"type":"object","properties":{"lo":{"type":"number"},"hi":{"type":"number"}}}},"required":["name","kind"],"additionalProperties":false})
}

fn grep_input() -> Value {
    json!({"type": "object", "properties": {
        "pattern": {"type": "string", "description": "Regular expression to search for."},
        "path": {"type": "string", "description": "File or directory to search."},
        "max_results": {"type": "integer", "minimum": 1, "description": "Stop after this many."},
        "context": {"type": "integer", "default": 0},
    }, "required": ["pattern", "path"]})
}

#[test]
fn scalar_types() {
    assert_eq!(ty(json!({"type": "string"})), "str");
    assert_eq!(ty(json!({"type": "integer"})), "int");
    assert_eq!(ty(json!({"type": "number"})), "float");
    assert_eq!(ty(json!({"type": "boolean"})), "bool");
    assert_eq!(ty(json!({"type": "null"})), "None");
    assert_eq!(ty(json!({"type": "bytes"})), "Any");
    assert_eq!(ty(json!({})), "Any");
    assert_eq!(ty(json!(true)), "Any");
}

#[test]
fn type_lists_are_unions() {
    assert_eq!(ty(json!({"type": ["string", "null"]})), "str | None");
    assert_eq!(
        ty(json!({"type": ["null", "integer", "integer"]})),
        "int | None"
    );
    let list = json!({"type": ["array", "null"], "items": {"type": "string"}});
    assert_eq!(ty(list), "list[str] | None");
    assert_eq!(ty(json!({"type": ["string", 5]})), "Any");
    assert_eq!(ty(json!({"type": []})), "Any");
}

#[test]
fn arrays() {
    assert_eq!(
        ty(json!({"type": "array", "items": {"type": "integer"}})),
        "list[int]"
    );
    assert_eq!(ty(json!({"type": "array"})), "list[Any]");
    assert_eq!(ty(json!({"items": {"type": "boolean"}})), "list[bool]");
    let closed = json!({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false});
    assert_eq!(ty(closed), "tuple[str, int]");
    let open = json!({"type": "array", "prefixItems": [{"type": "string"}]});
    assert_eq!(ty(open), "list[Any]");
    let old = json!({"type": "array", "items": [{"type": "null"}], "additionalItems": false});
    assert_eq!(ty(old), "tuple[None]");
    let old_open = json!({"type": "array", "items": [{"type": "null"}]});
    assert_eq!(ty(old_open), "list[Any]");
    assert_eq!(ty(json!({"prefixItems": [], "items": false})), "tuple[()]");
    let nested = json!({"type": "array", "items": {"type": "array", "items": {"type": "number"}}});
    assert_eq!(ty(nested), "list[list[float]]");
}

#[test]
fn objects() {
    let dict = json!({"type": "object", "additionalProperties": {"type": "integer"}});
    assert_eq!(ty(dict), "dict[str, int]");
    assert_eq!(ty(json!({"type": "object"})), "dict[str, Any]");
    let open = json!({"type": "object", "additionalProperties": true});
    assert_eq!(ty(open), "dict[str, Any]");
    let closed = json!({"type": "object", "additionalProperties": false});
    assert_eq!(ty(closed), "dict[str, Any]");
    let patterns = json!({"patternProperties": {"^x-": {"type": "string"}, "^n-": {"type": "integer"}},
        "additionalProperties": false});
    assert_eq!(ty(patterns), "dict[str, str | int]");
    let patterns_open = json!({"patternProperties": {"^x-": {"type": "string"}}});
    assert_eq!(ty(patterns_open), "dict[str, Any]");
    let empty = json!({"type": "object", "properties": {}});
    assert_eq!(ty(empty), "dict[str, Any]");
}

#[test]
fn typed_dicts_nest() {
    let schema = json!({"type": "object", "description": "A box.", "properties": {
        "size": {"type": "object", "properties": {"w": {"type": "number", "description": "Width,\n in px."}},
                 "required": ["w"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    }, "required": ["size"]});
    let (ty, helpers) = render(&schema);
    assert_eq!(ty, "TValue");
    assert_eq!(
        helpers,
        [
            "class TValueSize(TypedDict):\n    w: float  # Width, in px.\n",
            "class TValueItemsItem(TypedDict):\n    id: NotRequired[int]\n",
            "# A box.\nclass TValue(TypedDict):\n    size: TValueSize\n    \
             items: NotRequired[list[TValueItemsItem]]\n",
        ]
    );
}

#[test]
fn typed_dicts_with_odd_keys_use_the_functional_syntax() {
    let schema = json!({"properties": {"from": {"type": "integer"}, "x-y": {"type": "string"},
        "__private": {"type": "boolean"}, "a\"b\n": {}}, "required": ["from"]});
    let (ty, helpers) = render(&schema);
    assert_eq!(ty, "TValue");
    assert_eq!(
        helpers,
        [
            "TValue = TypedDict(\"TValue\", {\n    \"from\": int,\n    \"x-y\": NotRequired[str],\n    \
          \"__private\": NotRequired[bool],\n    \"a\\\"b\\n\": NotRequired[Any],\n})\n"
        ]
    );
}

#[test]
fn enums_and_consts_are_literals() {
    assert_eq!(
        ty(json!({"enum": ["a", "b", 1]})),
        "Literal[\"a\", \"b\", 1]"
    );
    assert_eq!(ty(json!({"enum": ["a", null]})), "Literal[\"a\"] | None");
    assert_eq!(ty(json!({"enum": [null]})), "None");
    assert_eq!(
        ty(json!({"enum": [true, false, "a", "a"]})),
        "Literal[True, False, \"a\"]"
    );
    assert_eq!(ty(json!({"enum": [1.5, "x"]})), "Literal[\"x\"] | float");
    assert_eq!(
        ty(json!({"enum": [[1], {"a": 1}]})),
        "list[Any] | dict[str, Any]"
    );
    assert_eq!(ty(json!({"enum": []})), "Any");
    assert_eq!(ty(json!({"enum": "a"})), "Any");
    assert_eq!(ty(json!({"const": 1})), "Literal[1]");
    assert_eq!(
        ty(json!({"const": "say \"hi\"\\"})),
        r#"Literal["say \"hi\"\\"]"#
    );
    assert_eq!(ty(json!({"const": null})), "None");
    assert_eq!(
        ty(json!({"type": "string", "enum": ["x"]})),
        "Literal[\"x\"]"
    );
}

#[test]
fn alternatives_are_unions() {
    let any_of = json!({"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "integer"}]});
    assert_eq!(ty(any_of), "int | str");
    let one_of =
        json!({"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}]});
    assert_eq!(ty(one_of), "list[str] | None");
    assert_eq!(ty(json!({"anyOf": [{"type": "integer"}, {}]})), "Any");
    assert_eq!(ty(json!({"anyOf": []})), "Any");
    // Alternatives that only constrain leave the schema's own type.
    let constraints = json!({"type": "string", "anyOf": [{"format": "date"}, {"format": "email"}]});
    assert_eq!(ty(constraints), "str");
    let required = json!({"type": "object", "properties": {"a": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}]});
    assert_eq!(ty(required), "TValue");
}

#[test]
fn keywords_that_do_not_change_the_type() {
    assert_eq!(ty(json!({"allOf": [{"type": "string"}]})), "str");
    assert_eq!(
        ty(json!({"allOf": [{"type": "string"}, {"minLength": 1}]})),
        "Any"
    );
    assert_eq!(ty(json!({"type": "integer", "not": {"const": 0}})), "int");
    let conditional = json!({"type": "string", "if": {"const": "a"}, "then": {}, "else": {}});
    assert_eq!(ty(conditional), "str");
    let checks = json!({"type": "string", "pattern": "^a", "format": "uri", "maxLength": 3});
    assert_eq!(ty(checks), "str");
}

#[test]
fn refs_resolve_within_the_root() {
    let schema = json!({
        "$defs": {"id": {"type": "integer"}, "color": {"enum": ["red", "green"]}},
        "definitions": {"pair": {"prefixItems": [{"$ref": "#/$defs/id"}, {"$ref": "#/$defs/id"}], "items": false}},
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/id"},
            "b": {"$ref": "#/definitions/pair"},
            "c": {"$ref": "#/$defs/color"},
            "d": {"$ref": "#/$defs/color"},
            "e": {"$ref": "#/$defs/missing"},
            "f": {"$ref": "other.json#/$defs/id"},
            "g": {"$ref": 5},
            "h": {"$ref": "#/properties/a"},
        },
        "required": ["a", "b", "c", "d", "e", "f", "g", "h"],
    });
    let (_, helpers) = render(&schema);
    assert_eq!(helpers[0], "TColor = Literal[\"red\", \"green\"]\n");
    assert_eq!(
        helpers[1],
        "class TValue(TypedDict):\n    a: int\n    b: tuple[int, int]\n    c: TColor\n    \
         d: TColor\n    e: Any\n    f: Any\n    g: Any\n    h: int\n"
    );
    assert_eq!(helpers.len(), 2);
}

#[test]
fn ref_cycles_become_any() {
    let tree = json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
    }, "required": ["value"]}}});
    let (node, helpers) = render(&tree);
    assert_eq!(node, "TNode");
    assert_eq!(
        helpers,
        ["class TNode(TypedDict):\n    value: str\n    children: NotRequired[list[Any]]\n"]
    );
    let selfish = json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
    assert_eq!(ty(selfish), "Any");
    let mutual = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}},
        "$ref": "#/$defs/a"});
    assert_eq!(ty(mutual), "Any");
    let root = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
    let (value, helpers) = render(&root);
    assert_eq!(value, "TValue");
    assert_eq!(helpers.len(), 2, "{helpers:?}");
    assert!(helpers[0].contains("next: NotRequired[Any]"), "{helpers:?}");
}

#[test]
fn depth_is_capped() {
    let mut schema = json!({"type": "string"});
    for _ in 0..200 {
        schema = json!({"type": "array", "items": schema});
    }
    let rendered = ty(schema);
    assert!(rendered.contains("list[Any]"), "{rendered}");
    assert!(rendered.matches("list[").count() <= 18, "{rendered}");
}

#[test]
fn keyword_arguments() {
    let input = grep_input();
    let stub = python_stub(&tool("grep", &input, None));
    assert_eq!(
        signature(&stub),
        "async def grep(\n    *,\n    pattern: str,\n    path: str,\n    max_results: int | None = None,\n    \
         context: int = 0,\n) -> str:"
    );
    let short = json!({"properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "required": ["a"]});
    let stub = python_stub(&tool("f", &short, None));
    assert_eq!(
        signature(&stub),
        "async def f(*, a: int, b: str | None = None) -> str:"
    );
}

#[test]
fn defaults() {
    let input = json!({"type": "object", "properties": {
        "s": {"type": "string", "default": "a\"b"},
        "i": {"type": "integer", "default": -2},
        "f": {"type": "number", "default": 0.25},
        "t": {"type": "boolean", "default": true},
        "n": {"type": ["string", "null"], "default": null},
        "l": {"type": "array", "items": {"type": "string"}, "default": ["x"]},
        "o": {"type": "object", "default": {}},
        "r": {"type": "string", "default": "ignored"},
    }, "required": ["r"]});
    let stub = python_stub(&tool("d", &input, None));
    assert_eq!(
        signature(&stub),
        "async def d(\n    *,\n    r: str,\n    s: str = \"a\\\"b\",\n    i: int = -2,\n    f: float = 0.25,\n    \
         t: bool = True,\n    n: str | None = None,\n    l: list[str] | None = None,\n    \
         o: dict[str, Any] | None = None,\n) -> str:"
    );
}

#[test]
fn odd_property_names_use_unpack() {
    let input = json!({"type": "object", "properties": {
        "from": {"type": "integer", "description": "Start."},
        "x-y": {"type": "string"},
    }, "required": ["from"]});
    let stub = python_stub(&tool("copy", &input, None));
    assert!(stub.starts_with(
        "CopyArguments = TypedDict(\"CopyArguments\", {\n    \"from\": int,  # Start.\n    \
         \"x-y\": NotRequired[str],\n})\n\n"
    ));
    assert_eq!(
        signature(&stub),
        "async def copy(**arguments: Unpack[CopyArguments]) -> str:"
    );
    assert!(stub.contains("Args:\n        from: Start.\n"), "{stub}");
}

#[test]
fn schemas_without_properties() {
    let cases = [
        (json!({}), "(**arguments: Any)"),
        (json!({"type": "object"}), "(**arguments: Any)"),
        (
            json!({"type": "object", "properties": {}}),
            "(**arguments: Any)",
        ),
        (
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            "()",
        ),
        (json!({"additionalProperties": false}), "()"),
        (
            json!({"additionalProperties": {"type": "string"}}),
            "(**arguments: str)",
        ),
        (json!({"type": "string"}), "(**arguments: Any)"),
        (json!({"type": 5}), "(**arguments: Any)"),
        (json!(true), "(**arguments: Any)"),
        (json!([]), "(**arguments: Any)"),
        (json!(null), "(**arguments: Any)"),
        (json!("object"), "(**arguments: Any)"),
        (json!({"properties": []}), "(**arguments: Any)"),
    ];
    for (input, params) in cases {
        let stub = python_stub(&tool("f", &input, None));
        assert_eq!(
            signature(&stub),
            format!("async def f{params} -> str:"),
            "{input}"
        );
    }
}

#[test]
fn root_refs_are_followed_for_arguments() {
    let input = json!({"$ref": "#/$defs/args", "$defs": {"args": {"type": "object",
        "properties": {"n": {"$ref": "#/$defs/n"}}, "required": ["n"]}, "n": {"type": "integer"}}});
    let stub = python_stub(&tool("f", &input, None));
    assert_eq!(signature(&stub), "async def f(*, n: int) -> str:");
    let cycle = json!({"$ref": "#"});
    let stub = python_stub(&tool("f", &cycle, None));
    assert_eq!(signature(&stub), "async def f(**arguments: Any) -> str:");
}

#[test]
fn return_types() {
    let input = json!({});
    let text = python_stub(&tool("f", &input, None));
    assert!(text.contains("-> str:"));
    assert!(text.contains("Returns its text output."));
    assert!(!text.contains("structured"));
    let output =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let details = python_stub(&tool("count_lines", &input, Some(&output)));
    assert!(
        details.starts_with(
            "class CountLinesResult(TypedDict):\n    n: int\n    output: str  # The tool's text output.\n\n"
        ),
        "{details}"
    );
    assert!(details.contains(") -> CountLinesResult:"));
    assert!(details.contains("Returns its result, with its text output under \"output\"."));
    assert!(adds_output(&output));
    // A result that names `output` itself keeps it, and gets no text.
    let own = json!({"type": "object", "properties": {"output": {"type": "integer"}}});
    assert!(!adds_output(&own));
    let own = python_stub(&tool("own", &input, Some(&own)));
    assert!(own.contains("output: NotRequired[int]"), "{own}");
    assert!(own.contains("Returns its result (details)."));
    let list = json!({"type": "array", "items": {"type": "string"}});
    assert!(python_stub(&tool("f", &input, Some(&list))).contains("-> list[str]:"));
    let anything = json!({});
    assert!(python_stub(&tool("f", &input, Some(&anything))).contains("-> Any:"));
}

#[test]
fn docstrings() {
    let input = grep_input();
    let spec = ToolSpec {
        name: "grep",
        identifier: Some("grep"),
        description: "\n  Searches files.\r\n\r\nLine two.  \n\n",
        input_schema: &input,
        output_schema: None,
        read_only: true,
    };
    let stub = python_stub(&spec);
    let doc = &stub[stub.find("\"\"\"").expect("a docstring")..];
    assert_eq!(
        doc,
        "\"\"\"  Searches files.\n\n    Line two.\n\n    Args:\n        \
         pattern: Regular expression to search for.\n        path: File or directory to search.\n        \
         max_results: Stop after this many. (minimum 1)\n\n    Returns its text output.\n\n    \
         Read-only: asyncio.gather runs its calls in parallel.\n    \"\"\"\n    ...\n"
    );
    let bare = json!({"additionalProperties": false});
    let spec = ToolSpec {
        description: "",
        read_only: false,
        ..tool("now", &bare, None)
    };
    assert_eq!(
        python_stub(&spec),
        "async def now() -> str:\n    \"\"\"Returns its text output.\n    \"\"\"\n    ...\n"
    );
}

#[test]
fn docstrings_escape_quotes_and_backslashes() {
    let input =
        json!({"properties": {"p": {"type": "string", "description": "A \"\"\" and a \\"}}});
    let spec = ToolSpec {
        description: "Say \"\"\"hi\"\"\" \\n \\",
        ..tool("say", &input, None)
    };
    let stub = python_stub(&spec);
    assert!(stub.contains(r#""""Say \"\""hi\"\"" \\n \\"#), "{stub}");
    assert!(stub.contains(r#"p: A \"\"" and a \\"#), "{stub}");
}

#[test]
fn tool_names_that_are_not_identifiers() {
    let input = json!({});
    for name in ["3d", "class", "None", "x y"] {
        let stub = python_stub(&tool(name, &input, None));
        assert_eq!(
            stub,
            format!("# \"{name}\" is not a Python identifier; this script cannot call it.\n")
        );
    }
    // A kebab-case name (as MCP servers' tools have) is called with `_`.
    let stub = python_stub(&tool("read-file", &input, None));
    assert!(
        stub.starts_with("# the tool \"read-file\"\nasync def read_file("),
        "{stub}"
    );
    let stub = python_stub(&tool("a\"\nb", &input, None));
    assert_eq!(
        stub,
        "# \"a\\\"\\nb\" is not a Python identifier; this script cannot call it.\n"
    );
}

#[test]
fn module_header_and_unique_helper_names() {
    let obj = |key: &str| json!({"properties": {key: {"type": "object", "properties": {"z": {"enum": [1]}}}}});
    let (first, second) = (obj("c"), obj("b_c"));
    let result = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let tools = [
        tool("a_b", &first, None),
        tool("a", &second, None),
        tool("ABC2", &result, Some(&result)),
        tool("not python", &result, None),
    ];
    let module = python_module(&tools, Detail::Full);
    assert!(
        module.starts_with(
            "from typing import Literal, NotRequired, TypedDict\n\nclass ABC(TypedDict)"
        ),
        "{module}"
    );
    assert!(module.contains("class ABC3(TypedDict)"), "{module}");
    assert!(module.contains("class ABC2Result(TypedDict)"), "{module}");
    assert!(
        module.contains("\n\n# \"not python\" is not a Python identifier"),
        "{module}"
    );
    let plain = json!({"properties": {"s": {"type": "string"}}, "required": ["s"]});
    let module = python_module(&[tool("echo", &plain, None)], Detail::Full);
    assert!(
        module.starts_with("async def echo(*, s: str) -> str:"),
        "{module}"
    );
    assert_eq!(python_module(&[], Detail::Full), "");
}

#[test]
fn brief_docstrings_hold_the_first_sentence_only() {
    let input = json!({"properties": {"s": {"type": "string", "description": "The text.", "maxLength": 9}}});
    let output = json!({"type": "object", "properties": {"n": {"type": "integer", "description": "A count."}}});
    let mut spec = tool("echo", &input, Some(&output));
    spec.description = "Echoes its text. Long details follow here.\nAnd more lines.";
    let brief = python_module(&[spec], Detail::Brief);
    assert!(brief.contains("\"\"\"Echoes its text.\n"), "{brief}");
    assert!(
        !brief.contains("Long details") && !brief.contains("more lines"),
        "{brief}"
    );
    assert!(brief.contains("s: The text.\n"), "{brief}");
    assert!(
        !brief.contains("maxLength") && !brief.contains("A count."),
        "{brief}"
    );
    let full = python_module(&[spec], Detail::Full);
    assert!(full.contains("Long details follow here.") && full.contains("And more lines."));
    assert!(
        full.contains("s: The text. (maxLength 9)") && full.contains("# A count."),
        "{full}"
    );
}

#[test]
fn identifiers_are_one_to_one_over_the_whole_catalog() {
    // `a-b` and `a_b`: the real name keeps its own, the spelling moves on,
    // whatever the order given.
    let names = ["a-b", "a_b", "a.b", "a_b_2", "3d", "class", "read-file"];
    let mapped = identifiers(names);
    assert_eq!(mapped["a_b"], "a_b");
    assert_eq!(mapped["a_b_2"], "a_b_2");
    assert_eq!(mapped["a-b"], "a_b_3");
    assert_eq!(mapped["a.b"], "a_b_4");
    assert_eq!(mapped["read-file"], "read_file");
    assert!(!mapped.contains_key("3d") && !mapped.contains_key("class"));
    let mut reversed = names;
    reversed.reverse();
    assert_eq!(identifiers(reversed), mapped);
    let unique: std::collections::HashSet<&String> = mapped.values().collect();
    assert_eq!(unique.len(), mapped.len());
    // Without `a_b` in the registry, `a-b` is `a_b`: the mapping is made
    // over every tool, so a denied `a_b` keeps its name from `a-b`.
    assert_eq!(identifiers(["a-b"])["a-b"], "a_b");
}

#[test]
fn a_renamed_tool_s_stub_names_it() {
    let input = json!({"type": "object"});
    let spec = ToolSpec {
        identifier: Some("a_b_2"),
        ..tool("a-b", &input, None)
    };
    let stub = python_stub(&spec);
    assert!(
        stub.contains("# the tool \"a-b\"\nasync def a_b_2("),
        "{stub}"
    );
    assert!(one_line(&spec).starts_with("a_b_2("), "{}", one_line(&spec));
}

#[test]
fn python_identifiers() {
    assert_eq!(python_identifier("grep").as_deref(), Some("grep"));
    assert_eq!(python_identifier("read-file").as_deref(), Some("read_file"));
    assert_eq!(python_identifier("3d"), None);
    assert_eq!(python_identifier("lambda"), None);
}

/// Odd values in every place a schema goes: none may panic.
fn odd_schemas() -> Vec<Value> {
    let mut odd = vec![
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-1.5),
        json!("s"),
        json!([]),
        json!([{}]),
        json!({}),
        json!({"type": 5}),
        json!({"type": null}),
        json!({"type": [[]]}),
        json!({"type": "object", "properties": 7}),
        json!({"properties": {"a": 1, "b": null}}),
        json!({"required": "a", "properties": {"a": true}}),
        json!({"required": [1, null, "a"]}),
        json!({"items": 3}),
        json!({"items": false}),
        json!({"prefixItems": 1, "items": false}),
        json!({"prefixItems": [1, "x"], "items": false}),
        json!({"enum": {}}),
        json!({"const": [{}]}),
        json!({"anyOf": "x"}),
        json!({"oneOf": [1, 2]}),
        json!({"allOf": [[]]}),
        json!({"$ref": "#/"}),
        json!({"$ref": "#/$defs/"}),
        json!({"$ref": "#//x"}),
        json!({"$ref": "#~"}),
        json!({"$ref": ""}),
        json!({"additionalProperties": 3}),
        json!({"patternProperties": []}),
        json!({"description": 5, "default": {"a": [1]}}),
        json!({"type": "number", "default": 1e300}),
        json!({"type": "string", "default": "\u{0}\u{7}\u{2028}\"\"\"\\"}),
        json!({"properties": {"": {}, " ": {}, "é": {}, "\u{0}": {}, "\"\"\"": {}, "#": {}}}),
        json!({"description": "\u{0}\r\"\"\"\\", "properties": {"d": {"description": "\u{0}\n\"\\"}}}),
    ];
    let mut deep = json!({});
    for i in 0..40 {
        deep = json!({"type": "object", "properties": {format!("p{i}"): {"anyOf": [deep, {"type": "null"}]}}});
    }
    odd.push(deep);
    // Each definition refers to the next one twice: 2^40 paths, one of each.
    let defs: serde_json::Map<String, Value> = (0..40)
        .map(|i| {
            let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
            (
                format!("d{i}"),
                json!({"properties": {"a": next, "b": {"type": "array", "items": next}}}),
            )
        })
        .collect();
    odd.push(json!({"$defs": defs, "$ref": "#/$defs/d0"}));
    odd
}

#[test]
fn odd_schemas_do_not_panic() {
    for schema in odd_schemas() {
        let wrapped = json!({"type": "object", "properties": {"x": schema, "from": schema}});
        for input in [&schema, &wrapped] {
            for output in [None, Some(&schema), Some(&wrapped)] {
                let spec = tool("t", input, output);
                python_stub(&spec);
                one_line(&spec);
            }
        }
        ty(schema);
    }
}

/// A varied module: every rule above, the hard schema, odd schemas.
fn varied_module() -> String {
    let hard = hard_schema();
    let grep = grep_input();
    let odd = odd_schemas();
    let wrapped: Vec<Value> = odd
        .iter()
        .map(|schema| json!({"type": "object", "properties": {"x": schema, "from": schema, "y": schema}}))
        .collect();
    let keyword = json!({"properties": {"from": {"type": "integer"}, "x-y": {"type": "string"}}});
    let tree = json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}});
    let none = json!({"type": "object", "properties": {}, "additionalProperties": false});
    let mut tools = vec![
        ToolSpec {
            name: "shape",
            identifier: Some("shape"),
            description: "The \"\"\"hard\"\"\" schema \\ both ways.",
            input_schema: &hard,
            output_schema: Some(&hard),
            read_only: true,
        },
        tool("grep", &grep, Some(&tree)),
        tool("copy", &keyword, Some(&keyword)),
        tool("tree", &tree, Some(&tree)),
        tool("now", &none, None),
        tool("read-file", &grep, None),
        tool("class", &grep, None),
    ];
    let names: Vec<String> = (0..odd.len()).map(|i| format!("odd_{i}")).collect();
    for ((name, schema), wrapped) in names.iter().zip(&odd).zip(&wrapped) {
        tools.push(tool(name, schema, Some(wrapped)));
        tools.push(tool(name, wrapped, Some(schema)));
    }
    python_module(&tools, Detail::Full)
}

/// Every stub parses as Python (CPython 3.11+), and runs: its helper types
/// are defined before use and its annotations evaluate.
#[test]
fn stubs_parse_and_run_as_python() {
    let module = varied_module();
    let path = std::env::temp_dir().join(format!("toolcage-stubs-{}.py", std::process::id()));
    std::fs::write(&path, &module).expect("writing the module");
    let check = "import ast, sys\n\
                 source = open(sys.argv[1], encoding='utf-8').read()\n\
                 ast.parse(source)\n\
                 exec(compile(source, sys.argv[1], 'exec'), {})\n";
    let run = std::process::Command::new("python3")
        .arg("-c")
        .arg(check)
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let output = run.unwrap_or_else(|e| {
        panic!("this test needs python3 (3.11 or later) on PATH to parse the stubs: {e}")
    });
    let numbered: String = module
        .lines()
        .enumerate()
        .map(|(i, line)| format!("{:5} {line}\n", i + 1))
        .collect();
    assert!(
        output.status.success(),
        "python3 rejected the stubs:\n{}\n{numbered}",
        String::from_utf8_lossy(&output.stderr)
    );
}
