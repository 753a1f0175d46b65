//! Write [toolcage] tools in Rust.
//!
//! A toolcage tool is a WebAssembly component that exports the
//! `toolcage:tool/tool` interface of `wit/toolcage.wit`. This crate holds the
//! generated bindings so that a tool crate holds only its tools: implement
//! [`Tool`] for a type, then name every tool of the component in one
//! [`export_tools!`].
//!
//! # A complete tool
//!
//! ```no_run
//! use toolcage_guest::{Descriptor, Outcome, Tool, json, parse_args};
//!
//! /// Greets somebody.
//! struct Greet;
//!
//! #[derive(serde::Deserialize)]
//! struct Args {
//!     name: String,
//! }
//!
//! impl Tool for Greet {
//!     fn descriptor() -> Descriptor {
//!         Descriptor::new("greet", "Returns a greeting for `name`.")
//!             .input_schema(json!({
//!                 "type": "object",
//!                 "properties": { "name": { "type": "string" } },
//!                 "required": ["name"],
//!                 "additionalProperties": false
//!             }))
//!             .read_only()
//!             .idempotent()
//!     }
//!
//!     fn call(args: serde_json::Value) -> Result<Outcome, Outcome> {
//!         let Args { name } = parse_args(args)?;
//!         Ok(Outcome::text(format!("Hello, {name}!")).with_details(json!({ "name": name })))
//!     }
//! }
//!
//! toolcage_guest::export_tools!(Greet);
//! ```
//!
//! with this `Cargo.toml`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! toolcage-guest = { path = "…/guest-tools/sdk" }
//! serde = { version = "1", features = ["derive"] }
//! serde_json = "1"
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`: the target
//! emits a component directly, ready to drop into a toolcage tools directory.
//!
//! # What the host guarantees, and what it expects
//!
//! - `call` only runs with arguments that already passed the tool's input
//!   schema, so [`parse_args`] fails only when the schema and the `Args` type
//!   disagree.
//! - Every call runs in a fresh instance: globals and statics do not survive
//!   from one call to the next.
//! - The component sees only the directories the operator mounted, no
//!   environment variables and no network. `std::fs` works under the mounts.
//! - Its settings, the strings the operator wrote for it, are read with
//!   [`config::get`]; there are none unless the operator wrote some.
//! - It may call other tools with [`tools::call`] and [`tools::call_all`],
//!   only those its operator granted it (`calls`), each in a sandbox of its
//!   own with that tool's grants; [`tools::callable`] lists them.
//! - `Outcome::output` is what the model reads: keep it short and actionable.
//!   `Outcome::details` is structured JSON for programs and user interfaces.
//!   An `Err` outcome tells the model the call failed; say what to do instead.
//! - Output and details together must fit the host's output limit, and the
//!   call must finish within its fuel, time and memory limits, or the host ends
//!   it and reports the limit to the model.
//! - A panic ends the call as a trap; the panic message reaches the host's
//!   logs. Prefer returning an `Err` outcome the model can act on.
//!
//! [toolcage]: https://example.invalid/toolcage

use serde::de::DeserializeOwned;
pub use serde_json::{self, Value, json};

pub mod config;
#[doc(hidden)]
#[allow(missing_docs, unsafe_code)] // generated ABI glue
pub mod http;
pub mod session;
pub mod tools;

pub mod bindings {
    wit_bindgen::generate!({
        world: "toolset",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "__export_toolset",
        default_bindings_module: "toolcage_guest::bindings",
        with: { "wasi:config/store@0.2.0-rc.1": generate },
    });
}

use bindings::exports::toolcage::tool::tool as wit;
pub use bindings::toolcage::tool::host::Level;

/// How a tool presents itself to the model and to the host.
///
/// By default a descriptor has no title, an input schema accepting any object
/// (`{"type": "object"}`), no output schema, and no hints: the host then treats
/// the tool as one that may write, so it never runs it in parallel with others.
#[derive(Debug, Clone)]
pub struct Descriptor {
    name: String,
    title: Option<String>,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    hints: wit::Hints,
}

impl Descriptor {
    /// A tool called `name` (`^[a-zA-Z0-9_-]{1,64}$`), described to the model
    /// by `description`: what it does and when to use it.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Descriptor {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema: json!({ "type": "object" }),
            output_schema: None,
            hints: wit::Hints::empty(),
        }
    }

    /// A short human title, for user interfaces.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The JSON Schema (draft 2020-12) of the arguments; its `type` must be
    /// `"object"`. The host validates every call against it.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// The JSON Schema of `details` on success. The host checks successful
    /// outcomes against it, so a UI can rely on it.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The tool does not change its environment. A batch made only of
    /// read-only calls may run in parallel.
    pub fn read_only(mut self) -> Self {
        self.hints |= wit::Hints::READ_ONLY;
        self
    }

    /// Calling the tool twice with the same arguments has the same effect as
    /// calling it once.
    pub fn idempotent(mut self) -> Self {
        self.hints |= wit::Hints::IDEMPOTENT;
        self
    }

    /// The tool may overwrite or delete data.
    pub fn destructive(mut self) -> Self {
        self.hints |= wit::Hints::DESTRUCTIVE;
        self
    }

    /// The tool talks to an open world of external entities (for example the
    /// network), not a closed domain.
    pub fn open_world(mut self) -> Self {
        self.hints |= wit::Hints::OPEN_WORLD;
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What a call returns: text for the model, and optional structured details.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Concise text for the model.
    pub output: String,
    /// Structured JSON for programs and user interfaces.
    pub details: Option<Value>,
}

impl Outcome {
    /// An outcome with `output` and no details.
    pub fn text(output: impl Into<String>) -> Self {
        Outcome {
            output: output.into(),
            details: None,
        }
    }

    /// The same outcome carrying `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// One tool of a component.
pub trait Tool {
    /// Describes the tool. The host calls it once, when it loads the component.
    fn descriptor() -> Descriptor;

    /// Runs the tool with arguments that passed its input schema. `Ok` is a
    /// success and `Err` a failure the model should read and act on.
    fn call(args: Value) -> Result<Outcome, Outcome>;
}

/// Deserializes validated arguments into `T`, or explains to the model why
/// they do not fit.
pub fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, Outcome> {
    serde_json::from_value(args)
        .map_err(|error| Outcome::text(format!("Invalid arguments: {error}.")))
}

/// Writes a line to the host's log, tagged with this tool and call.
pub fn log(level: Level, message: &str) {
    bindings::toolcage::tool::host::log(level, message);
}

/// Reports the progress of the current call; `fraction` is in `0.0..=1.0`
/// when known.
pub fn progress(message: &str, fraction: Option<f32>) {
    bindings::toolcage::tool::host::progress(message, fraction);
}

/// Exports the listed [`Tool`] types as this component's tools, in order.
///
/// Use it once per component, at the crate root:
/// `toolcage_guest::export_tools!(ReadFile, WriteFile);`. It exports only
/// when building for wasm, so the crate's native unit tests still link.
#[macro_export]
macro_rules! export_tools {
    ($($tool:ty),+ $(,)?) => {
        #[doc(hidden)]
        pub struct __ToolcageToolset;

        impl $crate::__private::Guest for __ToolcageToolset {
            fn describe() -> ::std::vec::Vec<$crate::__private::WitDescriptor> {
                ::std::vec![$($crate::__private::describe::<$tool>()),+]
            }

            fn call(
                name: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<$crate::__private::WitOutcome, $crate::__private::WitOutcome> {
                $(
                    if $crate::__private::is_named::<$tool>(&name) {
                        return $crate::__private::dispatch::<$tool>(&arguments);
                    }
                )+
                $crate::__private::unknown(&name)
            }
        }

        // Only a wasm build exports: natively (say, for a tool crate's unit
        // tests) the export names do not link.
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::__export_toolset!(__ToolcageToolset with_types_in $crate::bindings);
    };
}

#[doc(hidden)]
pub mod __private {
    use super::{Outcome, Tool, wit};
    pub use wit::{Descriptor as WitDescriptor, Guest, Outcome as WitOutcome};

    pub fn describe<T: Tool>() -> WitDescriptor {
        let d = T::descriptor();
        WitDescriptor {
            name: d.name,
            title: d.title,
            description: d.description,
            input_schema: d.input_schema.to_string(),
            output_schema: d.output_schema.map(|schema| schema.to_string()),
            hints: d.hints,
        }
    }

    pub fn is_named<T: Tool>(name: &str) -> bool {
        T::descriptor().name == name
    }

    pub fn dispatch<T: Tool>(arguments: &str) -> Result<WitOutcome, WitOutcome> {
        let result = match serde_json::from_str(arguments) {
            Ok(args) => T::call(args),
            Err(error) => Err(Outcome::text(format!(
                "The arguments are not valid JSON: {error}."
            ))),
        };
        result.map(into_wit).map_err(into_wit)
    }

    pub fn unknown(name: &str) -> Result<WitOutcome, WitOutcome> {
        Err(into_wit(Outcome::text(format!(
            "This component has no tool named `{name}`."
        ))))
    }

    fn into_wit(outcome: Outcome) -> WitOutcome {
        WitOutcome {
            output: outcome.output,
            details: outcome.details.map(|details| details.to_string()),
        }
    }
}
