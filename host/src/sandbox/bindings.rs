//! Host-side bindings of `wit/toolcage.wit`, private to the crate: the public
//! API speaks toolcage types, never these.

wasmtime::component::bindgen!({
    world: "toolset",
    path: "../wit",
    // No `tracing` flag on imports: it would log every `log` and `progress`
    // message in full before the host's own caps apply. The host traces them
    // itself, bounded, inside the call's span.
    exports: { default: async },
    // A tool waiting on the tools it calls waits in the host, where the
    // calls run: the guest sees a blocking call.
    imports: {
        "toolcage:tool/tools.call": async,
        "toolcage:tool/tools.call-all": async,
        "toolcage:tool/session.load": async,
        "toolcage:tool/session.save": async,
    },
});

pub(crate) use self::exports::toolcage::tool::tool::{
    Descriptor as WitDescriptor, Hints as WitHints, Outcome as WitOutcome,
};
pub(crate) use self::toolcage::tool::host::Level;
pub(crate) use self::toolcage::tool::tools::{
    CallResult as WitCallResult, Entry as WitEntry, Identified as WitIdentified,
    Request as WitRequest,
};
pub(crate) use self::wasi::config::store as config_store;
