//! Code mode's sessions (`toolcage:tool/session`): state kept for the
//! call's caller from one call to the next, under a name. The host keeps
//! sessions for code mode's `run_code` alone: for any other tool `load`
//! finds nothing and `save` refuses.

use crate::bindings::toolcage::tool::session as wit;

/// The state last saved under `name` for this call's caller, if any; the
/// error says why it could not be read.
pub fn load(name: &str) -> Result<Option<Vec<u8>>, String> {
    wit::load(name)
}

/// Saves `state` under `name` for this call's caller; the error says why
/// it was not saved.
pub fn save(name: &str, state: &[u8]) -> Result<(), String> {
    wit::save(name, state)
}
