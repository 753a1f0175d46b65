//! A root call's code-mode session, as its guest loads and saves it.
//!
//! Threat model: the guest names the session, never its owner: the scope
//! is the root call's caller's, set by the embedder. Only code mode's own
//! tool, as a tree's root, has sessions, and a run stopped before it ended
//! (paused for a question, cancelled) or whose replay diverged saves
//! nothing, so that a session holds only what a whole run left.

use super::Caller;
use crate::catalog::interpreter::is_code_mode_tool;
use crate::sandbox::NO_SESSIONS;
use crate::state::SessionScope;

/// The sessions `caller` may use: its root's caller's, when it is code
/// mode's tool at the root.
fn scope(caller: &Caller) -> Result<&SessionScope, &'static str> {
    if caller.depth != 0 || !is_code_mode_tool(&caller.entry.info) {
        return Err(NO_SESSIONS);
    }
    caller
        .tree
        .sessions
        .as_ref()
        .ok_or("this server keeps no sessions")
}

/// What the caller's session `name` holds.
pub(super) async fn load(caller: &Caller, name: &str) -> Result<Option<Vec<u8>>, String> {
    let Ok(scope) = scope(caller) else {
        return Ok(None);
    };
    let tool = &caller.entry.info.descriptor.name;
    scope.load(tool, name).await.map_err(|e| e.to_string())
}

/// Saves `state` as the caller's session `name`, or says why not.
pub(super) async fn save(caller: &Caller, name: &str, state: Vec<u8>) -> Result<(), String> {
    let scope = scope(caller)?;
    if caller.tree.stopped() {
        return Err(
            "the run was stopped before it ended (paused for a question, or cancelled), so the session keeps what it held before"
                .to_string(),
        );
    }
    if let Some(why) = caller.tree.diverged() {
        return Err(format!("the run diverged from its log ({why})"));
    }
    let tool = &caller.entry.info.descriptor.name;
    scope
        .save(tool, name, state)
        .await
        .map_err(|e| e.to_string())
}
