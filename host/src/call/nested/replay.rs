//! A run's log of the nested calls that ran, and its replay: what lets a
//! run paused for an answer be attempted again without any call running
//! twice (see [`Replay`] for the threat model).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{NestedCall, Tree, ran};
use crate::sandbox::outcome::ErrorKind;
use crate::sandbox::{NestedRequest, NestedResponse};

/// A nested call that ran, as the log of its run keeps it: what it was
/// (its tool and a digest of its arguments), its answer, and what it and
/// the calls it made used of the tree's budget and added to its record, so
/// that a later attempt of the run gives the answer, spends the budget and
/// lists the calls again without running anything.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Recorded {
    pub tool: String,
    /// blake3 of the tool and its arguments.
    pub binding: String,
    /// The call's id without its root's (`.3` for `<root>.3`).
    pub call_id: String,
    pub is_error: bool,
    pub error_kind: Option<ErrorKind>,
    pub output: String,
    pub details: Option<String>,
    /// Nested calls asked for while it ran, itself included.
    pub calls: u64,
    /// Bytes it and its own nested calls passed.
    pub bytes: u64,
    /// The entries it added to the record, itself last, with ids without
    /// their root's.
    pub listed: Vec<NestedCall>,
}

/// Where a run's log of nested calls is kept between its attempts.
///
/// Threat model: a run is attempted again from its start when its root must
/// first ask a question it could not ask while running (2026-07-28 MCP,
/// whose server may not send requests): a script that wrote a file and then
/// called an `ask` tool would write it again on the retry, with a fresh
/// budget and a record that forgets the first write. Each nested call that
/// ran is kept here at its place in the run (the path of its position
/// among its caller's calls: `2.1` is the first call of the root's second),
/// and a later attempt's call at that place gets its answer, spends its
/// budget and lists it again, without running. A call that is not the one
/// kept there (another tool, other arguments: a script that depends on
/// time or chance) is refused and ends the run: a replay that diverges
/// cannot say what ran. The log travels through the client sealed (see
/// the MCP server's state), so it can only tell the tool what its own
/// calls answered.
pub(crate) trait Replay: Send + Sync {
    /// The call that ran at `position` in an earlier attempt.
    fn recorded(&self, position: &str) -> Option<Recorded>;
    /// Keeps the call that ran at `position` in this attempt.
    fn record(&self, position: String, recorded: Recorded);
    /// The wall time the run's earlier attempts took, counted against its
    /// root's timeout.
    fn spent(&self) -> Duration;
}

/// The digest of a call of `tool` with `arguments` a log compares.
fn binding(tool: &str, arguments: &str) -> String {
    blake3::hash(format!("{tool}\n{arguments}").as_bytes())
        .to_hex()
        .to_string()
}

/// A nested call's tool and the digest of its tool and arguments.
pub(super) type What = (String, String);

/// What a call used of its tree: the calls asked for while it ran (itself
/// included), the bytes they passed, the entries they added to the record.
pub(super) struct Used {
    pub(super) calls: u64,
    pub(super) bytes: u64,
    pub(super) listed: Vec<NestedCall>,
}

/// What a tree had counted when a call started: its calls, its bytes, the
/// length of its record.
#[derive(Clone, Copy)]
pub(super) struct Mark {
    asked: u64,
    bytes: u64,
    listed: usize,
}

impl Tree {
    /// Whether the tree keeps a log (its root may pause and be retried).
    pub(super) fn logs(&self) -> bool {
        self.replay.is_some()
    }

    /// What the tree has counted so far.
    pub(super) fn mark(&self) -> Mark {
        Mark {
            asked: self.asked.load(Ordering::SeqCst),
            bytes: self.bytes.load(Ordering::SeqCst),
            listed: self.listed.lock().unwrap_or_else(|e| e.into_inner()).len(),
        }
    }

    /// The call an earlier attempt ran at `position`, while the tree goes
    /// on: a stopped or spent tree refuses its calls as it would any.
    pub(super) fn logged(&self, position: &str) -> Option<Recorded> {
        let replay = self.replay.as_ref()?;
        if self.stopped() || self.spent.load(Ordering::SeqCst) {
            return None;
        }
        replay.recorded(position)
    }

    /// Counts and lists `recorded` again, as when it ran; its answer.
    pub(super) fn replay(&self, recorded: Recorded) -> NestedResponse {
        self.asked
            .fetch_add(recorded.calls.max(1), Ordering::SeqCst);
        self.bytes.fetch_add(recorded.bytes, Ordering::SeqCst);
        for call in recorded.listed {
            let call = NestedCall {
                call_id: self.rooted(&call.call_id),
                parent_call_id: self.rooted(&call.parent_call_id),
                ..call
            };
            self.deepest.fetch_max(call.depth, Ordering::SeqCst);
            self.list(call);
        }
        NestedResponse {
            call_id: self.rooted(&recorded.call_id),
            is_error: recorded.is_error,
            error_kind: recorded.error_kind,
            output: recorded.output,
            details: recorded.details,
        }
    }

    /// What the tree counted since `mark`: one call's use when it ran
    /// alone.
    pub(super) fn since(&self, mark: Mark) -> Used {
        let now = self.mark();
        let listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        Used {
            calls: now.asked - mark.asked,
            bytes: now.bytes.saturating_sub(mark.bytes),
            listed: listed.get(mark.listed..).unwrap_or_default().to_vec(),
        }
    }

    /// Keeps, at `position`, the call `what` (its tool and binding) that
    /// used `used` and answered `response`, when it ran.
    pub(super) fn record(
        &self,
        position: String,
        what: What,
        used: Used,
        response: &NestedResponse,
    ) {
        let Some(replay) = &self.replay else {
            return;
        };
        if response.is_error && !response.error_kind.is_some_and(ran) {
            return;
        }
        let listed = used.listed.into_iter().map(|call| NestedCall {
            call_id: self.unrooted(&call.call_id),
            parent_call_id: self.unrooted(&call.parent_call_id),
            ..call
        });
        let recorded = Recorded {
            tool: what.0,
            binding: what.1,
            call_id: self.unrooted(&response.call_id),
            is_error: response.is_error,
            error_kind: response.error_kind,
            output: response.output.clone(),
            details: response.details.clone(),
            calls: used.calls,
            bytes: used.bytes,
            listed: listed.collect(),
        };
        replay.record(position, recorded);
    }

    /// A call id of this tree without its root's id (`.3`), as a log keeps
    /// it: a later attempt's root has another id.
    fn unrooted(&self, id: &str) -> String {
        id.strip_prefix(&self.root).unwrap_or(id).to_string()
    }

    /// A logged call id under this tree's root.
    fn rooted(&self, id: &str) -> String {
        format!("{}{id}", self.root)
    }

    /// Ends the run: its call at `position` is not the one its log has
    /// there. The first divergence is the one the root's result names.
    pub(super) fn diverge(
        &self,
        position: &str,
        tool: &str,
        recorded: &Recorded,
    ) -> NestedResponse {
        let same = match tool == recorded.tool {
            true => format!("`{tool}` again, with other arguments"),
            false => format!("`{tool}`, where it called `{}`", recorded.tool),
        };
        let output = format!(
            "This run diverged from its earlier attempt: its nested call at {position} is now {same} before the run paused. Nothing ran again, and the run ends here: a script that pauses for an answer must make the same calls each time it is run up to the pause (no time, no chance). Run it again, from the start."
        );
        self.spent.store(true, Ordering::SeqCst);
        let mut diverged = self.diverged.lock().unwrap_or_else(|e| e.into_inner());
        diverged.get_or_insert_with(|| output.clone());
        NestedResponse {
            call_id: String::new(),
            is_error: true,
            error_kind: Some(ErrorKind::ToolError),
            output,
            details: None,
        }
    }

    /// Why the run's result is an error, when its replay diverged.
    pub(in crate::call) fn diverged(&self) -> Option<String> {
        self.diverged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A request's tool, and the digest of its tool and arguments.
pub(super) fn what(request: &NestedRequest) -> What {
    let digest = binding(&request.name, &request.arguments);
    (request.name.clone(), digest)
}
