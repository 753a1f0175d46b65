//! Host-side bindings of `wit/toolcage.wit`, private to the crate: the public
//! API speaks toolcage types, never these.

wasmtime::component::bindgen!({
    world: "toolset",
    path: "../wit",
    imports: { default: tracing },
    exports: { default: async },
});

pub(crate) use self::exports::toolcage::tool::tool::{
    Descriptor as WitDescriptor, Hints as WitHints, Outcome as WitOutcome,
};
pub(crate) use self::toolcage::tool::host::Level;
