//! JSON Schemas as Python type expressions, with the helper types
//! (`TypedDict`s, `Literal` aliases) they need.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::ident::{Namer, camel, is_identifier};
use crate::text::{flat, py_literal, py_str};

/// How deep a schema is followed before its type is `Any`.
const MAX_DEPTH: usize = 16;

/// Keywords that say (or imply) a schema's own type.
const OWN_TYPE: [&str; 6] = [
    "type",
    "properties",
    "patternProperties",
    "additionalProperties",
    "items",
    "prefixItems",
];

/// Keywords that give a schema a type, own or by reference or alternatives.
const TYPE_INFO: [&str; 5] = ["$ref", "enum", "const", "anyOf", "oneOf"];

/// A Python type: the members of a union, deduplicated, in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ty(Vec<String>);

impl Ty {
    fn one(member: impl Into<String>) -> Self {
        Self(vec![member.into()])
    }

    fn add(&mut self, other: Ty) {
        for member in other.0 {
            if !self.0.contains(&member) {
                self.0.push(member);
            }
        }
    }

    /// This type, or `None`.
    pub(crate) fn or_none(mut self) -> Self {
        self.add(Ty::one("None"));
        self
    }

    /// The type as Python source: `Any` absorbs a union, `None` goes last.
    pub(crate) fn render(&self) -> String {
        if self.0.is_empty() || self.0.iter().any(|m| m == "Any") {
            return "Any".into();
        }
        let (none, mut members): (Vec<&str>, Vec<&str>) = self
            .0
            .iter()
            .map(String::as_str)
            .partition(|m| *m == "None");
        members.extend(none);
        members.join(" | ")
    }
}

/// What the stubs of one tool, or of a module, build up as they go.
pub(crate) struct Shared {
    /// Helper type names handed out so far.
    pub(crate) namer: Namer,
    /// The names imported from `typing` that the text uses.
    pub(crate) typing: BTreeSet<&'static str>,
    /// Helper type definitions not yet written out, in dependency order.
    pub(crate) helpers: Vec<String>,
    /// Whether the text is brief ([`Detail::Brief`](crate::Detail)): no
    /// descriptions of fields, no constraints.
    pub(crate) brief: bool,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            namer: Namer::new(),
            typing: BTreeSet::new(),
            helpers: Vec::new(),
            brief: false,
        }
    }
}

/// One field of a helper `TypedDict`.
struct Field {
    key: String,
    ty: String,
    comment: String,
}

/// Renders the types of one root schema (an input or an output schema).
pub(crate) struct Renderer<'s, 'v> {
    shared: &'s mut Shared,
    root: &'v Value,
    prefix: String,
    stack: Vec<&'v str>,
    memo: BTreeMap<&'v str, Ty>,
}

impl<'s, 'v> Renderer<'s, 'v> {
    /// Whether the text is brief.
    pub(crate) fn brief(&self) -> bool {
        self.shared.brief
    }

    /// A renderer for schemas in `root`, naming helpers `<prefix>...`.
    pub(crate) fn new(shared: &'s mut Shared, root: &'v Value, prefix: &str) -> Self {
        Self {
            shared,
            root,
            prefix: prefix.to_owned(),
            stack: Vec::new(),
            memo: BTreeMap::new(),
        }
    }

    /// Marks `name` as imported from `typing`.
    pub(crate) fn uses(&mut self, name: &'static str) {
        self.shared.typing.insert(name);
    }

    pub(crate) fn any(&mut self) -> Ty {
        self.uses("Any");
        Ty::one("Any")
    }

    /// The type of `schema`; `hint` names the helper type it may need.
    pub(crate) fn ty(&mut self, schema: &'v Value, hint: &str, depth: usize) -> Ty {
        let Value::Object(map) = schema else {
            return self.any();
        };
        if depth > MAX_DEPTH {
            return self.any();
        }
        if let Some(reference) = map.get("$ref") {
            return self.reference(reference, depth);
        }
        if let Some(literal) = self.literal(map) {
            return literal;
        }
        let own = OWN_TYPE.iter().any(|k| map.contains_key(*k));
        let alternatives = map.get("anyOf").or_else(|| map.get("oneOf"));
        if let Some(Value::Array(alts)) = alternatives
            && !(own && alts.iter().any(|alt| !has_type_info(alt)))
        {
            return self.union(alts, hint, depth);
        }
        if own {
            return self.own_type(map, hint, depth);
        }
        match map.get("allOf") {
            Some(Value::Array(all)) if all.len() == 1 => self.ty(&all[0], hint, depth + 1),
            _ => self.any(),
        }
    }

    /// A `$ref` within the root, or `Any` (unresolvable, or a cycle).
    fn reference(&mut self, reference: &'v Value, depth: usize) -> Ty {
        let Some(reference) = reference.as_str() else {
            return self.any();
        };
        if let Some(ty) = self.memo.get(reference) {
            return ty.clone();
        }
        let target = resolve(self.root, reference);
        let (Some(target), false) = (target, self.stack.contains(&reference)) else {
            return self.any();
        };
        let hint = format!("{}{}", self.prefix, camel(last_segment(reference)));
        self.stack.push(reference);
        let mut ty = self.ty(target, &hint, depth + 1);
        self.stack.pop();
        if let [single] = ty.0.as_slice()
            && single.starts_with("Literal[")
        {
            let name = self.shared.namer.claim(&hint);
            self.shared.helpers.push(format!("{name} = {single}\n"));
            ty = Ty::one(name);
        }
        self.memo.insert(reference, ty.clone());
        ty
    }

    /// `const` or `enum` as `Literal[...]` (plus `None` and the types of
    /// values a `Literal` cannot hold).
    fn literal(&mut self, map: &Map<String, Value>) -> Option<Ty> {
        let values = match (map.get("const"), map.get("enum")) {
            (Some(value), _) => std::slice::from_ref(value),
            (None, Some(Value::Array(values))) => values.as_slice(),
            _ => return None,
        };
        let mut literals: Vec<String> = Vec::new();
        let mut others = Ty::default();
        for value in values {
            match value {
                Value::Null => others.add(Ty::one("None")),
                Value::Number(n) if n.is_f64() => others.add(Ty::one("float")),
                Value::Array(_) => others.add(Ty::one("list[Any]")),
                Value::Object(_) => others.add(Ty::one("dict[str, Any]")),
                _ => {
                    if let Some(literal) = py_literal(value)
                        && !literals.contains(&literal)
                    {
                        literals.push(literal);
                    }
                }
            }
        }
        if others.0.iter().any(|m| m.contains("Any")) {
            self.uses("Any");
        }
        let mut ty = Ty::default();
        if !literals.is_empty() {
            self.uses("Literal");
            ty = Ty::one(format!("Literal[{}]", literals.join(", ")));
        }
        ty.add(others);
        Some(if ty.0.is_empty() { self.any() } else { ty })
    }

    fn union(&mut self, alternatives: &'v [Value], hint: &str, depth: usize) -> Ty {
        let mut ty = Ty::default();
        for alternative in alternatives {
            ty.add(self.ty(alternative, hint, depth + 1));
        }
        if ty.0.is_empty() { self.any() } else { ty }
    }

    /// The type the schema itself gives (`type`, or implied by
    /// `properties`, `items` and the like).
    fn own_type(&mut self, map: &'v Map<String, Value>, hint: &str, depth: usize) -> Ty {
        match map.get("type") {
            Some(Value::String(name)) => self.named(name, map, hint, depth),
            Some(Value::Array(names)) => self.named_union(names, map, hint, depth),
            Some(_) => self.any(),
            None if map.contains_key("items") || map.contains_key("prefixItems") => {
                self.array(map, hint, depth)
            }
            None => self.object(map, hint, depth),
        }
    }

    fn named_union(
        &mut self,
        names: &'v [Value],
        map: &'v Map<String, Value>,
        hint: &str,
        depth: usize,
    ) -> Ty {
        let mut seen = Vec::new();
        let mut ty = Ty::default();
        for name in names {
            match name.as_str() {
                Some(name) if seen.contains(&name) => {}
                Some(name) => {
                    seen.push(name);
                    ty.add(self.named(name, map, hint, depth));
                }
                None => ty.add(self.any()),
            }
        }
        if ty.0.is_empty() { self.any() } else { ty }
    }

    fn named(&mut self, name: &str, map: &'v Map<String, Value>, hint: &str, depth: usize) -> Ty {
        match name {
            "string" => Ty::one("str"),
            "integer" => Ty::one("int"),
            "number" => Ty::one("float"),
            "boolean" => Ty::one("bool"),
            "null" => Ty::one("None"),
            "array" => self.array(map, hint, depth),
            "object" => self.object(map, hint, depth),
            _ => self.any(),
        }
    }

    /// `list[T]`, or `tuple[A, B]` for a closed `prefixItems` (or, before
    /// 2020-12, an `items` array with `additionalItems: false`).
    fn array(&mut self, map: &'v Map<String, Value>, hint: &str, depth: usize) -> Ty {
        let item_hint = format!("{hint}Item");
        let (prefix, rest) = match (map.get("prefixItems"), map.get("items")) {
            (Some(prefix), rest) => (prefix, rest),
            (None, Some(items @ Value::Array(_))) => (items, map.get("additionalItems")),
            (None, Some(items)) => {
                let item = self.ty(items, &item_hint, depth + 1).render();
                return Ty::one(format!("list[{item}]"));
            }
            (None, None) => return self.list_of_any(),
        };
        match (prefix, rest) {
            (Value::Array(items), Some(Value::Bool(false))) => self.tuple(items, &item_hint, depth),
            _ => self.list_of_any(),
        }
    }

    fn list_of_any(&mut self) -> Ty {
        self.uses("Any");
        Ty::one("list[Any]")
    }

    fn tuple(&mut self, items: &'v [Value], hint: &str, depth: usize) -> Ty {
        if items.is_empty() {
            return Ty::one("tuple[()]");
        }
        let items: Vec<String> = items
            .iter()
            .map(|item| self.ty(item, hint, depth + 1).render())
            .collect();
        Ty::one(format!("tuple[{}]", items.join(", ")))
    }

    fn object(&mut self, map: &'v Map<String, Value>, hint: &str, depth: usize) -> Ty {
        match map.get("properties") {
            Some(Value::Object(props)) if !props.is_empty() => {
                let name = self.typed_dict(map, hint, None, depth);
                Ty::one(name)
            }
            _ => self.dict(map, hint, depth),
        }
    }

    /// `dict[str, T]`, `T` from `additionalProperties` and
    /// `patternProperties`.
    fn dict(&mut self, map: &'v Map<String, Value>, hint: &str, depth: usize) -> Ty {
        let value_hint = format!("{hint}Value");
        let mut values = Ty::default();
        if let Some(Value::Object(patterns)) = map.get("patternProperties") {
            for schema in patterns.values() {
                values.add(self.ty(schema, &value_hint, depth + 1));
            }
        }
        match map.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            Some(schema @ Value::Object(_)) => values.add(self.ty(schema, &value_hint, depth + 1)),
            _ => values.add(self.any()),
        }
        if values.0.is_empty() {
            values = self.any();
        }
        Ty::one(format!("dict[str, {}]", values.render()))
    }

    /// Defines a `TypedDict` of the object schema `map`'s properties, named
    /// `candidate` (or a free variant of it), its own helpers named
    /// `<prefix><Property>` (`prefix` defaults to its name); returns its name.
    pub(crate) fn typed_dict(
        &mut self,
        map: &'v Map<String, Value>,
        candidate: &str,
        prefix: Option<&str>,
        depth: usize,
    ) -> String {
        let name = self.shared.namer.claim(candidate);
        let prefix = prefix.unwrap_or(&name).to_owned();
        let required = required(map);
        let mut fields = Vec::new();
        for (key, schema) in properties(map) {
            let ty = self.ty(schema, &format!("{prefix}{}", camel(key)), depth + 1);
            let ty = if required.contains(&key.as_str()) {
                ty.render()
            } else {
                self.uses("NotRequired");
                format!("NotRequired[{}]", ty.render())
            };
            let comment = match self.shared.brief {
                true => String::new(),
                false => flat(description(schema)),
            };
            fields.push(Field {
                key: key.clone(),
                ty,
                comment,
            });
        }
        self.uses("TypedDict");
        let doc = match self.shared.brief {
            true => String::new(),
            false => flat(description_of(map)),
        };
        let definition = typed_dict_text(&name, doc, &fields);
        self.shared.helpers.push(definition);
        name
    }
}

/// The definition of a `TypedDict`: class syntax when every key can be a
/// class field, else the functional syntax.
fn typed_dict_text(name: &str, doc: String, fields: &[Field]) -> String {
    let mut out = String::new();
    if !doc.is_empty() {
        out.push_str(&format!("# {doc}\n"));
    }
    let class_syntax = fields
        .iter()
        .all(|f| is_identifier(&f.key) && !f.key.starts_with("__"));
    if class_syntax {
        out.push_str(&format!("class {name}(TypedDict):\n"));
    } else {
        out.push_str(&format!("{name} = TypedDict({}, {{\n", py_str(name)));
    }
    for field in fields {
        let comment = match field.comment.as_str() {
            "" => String::new(),
            text => format!("  # {text}"),
        };
        if class_syntax {
            out.push_str(&format!("    {}: {}{comment}\n", field.key, field.ty));
        } else {
            out.push_str(&format!(
                "    {}: {},{comment}\n",
                py_str(&field.key),
                field.ty
            ));
        }
    }
    if !class_syntax {
        out.push_str("})\n");
    }
    out
}

/// Whether a schema says anything about its type (an `anyOf` alternative
/// that does not, like `{"required": ["a"]}`, only constrains its parent).
fn has_type_info(schema: &Value) -> bool {
    schema.as_object().is_some_and(|map| {
        OWN_TYPE
            .iter()
            .chain(&TYPE_INFO)
            .any(|k| map.contains_key(*k))
    })
}

/// The schema `reference` (`#`, `#/$defs/X`, `#/definitions/X`, any JSON
/// pointer) points at in `root`; `None` for other references.
pub(crate) fn resolve<'v>(root: &'v Value, reference: &str) -> Option<&'v Value> {
    match reference.strip_prefix('#')? {
        "" => Some(root),
        pointer => root.pointer(pointer),
    }
}

fn last_segment(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or_default()
}

/// An object schema's properties, in order.
pub(crate) fn properties(map: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    map.get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

/// The names an object schema lists as `required`.
pub(crate) fn required(map: &Map<String, Value>) -> Vec<&str> {
    let names = map.get("required").and_then(Value::as_array);
    names
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// A schema's `description`, or `""`.
pub(crate) fn description(schema: &Value) -> &str {
    schema.as_object().map_or("", description_of)
}

fn description_of(map: &Map<String, Value>) -> &str {
    map.get("description").and_then(Value::as_str).unwrap_or("")
}
