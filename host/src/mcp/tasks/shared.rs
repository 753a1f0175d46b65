//! Tasks in a state store that replicas share ([`TaskOptions::shared`]):
//! each task's status, progress message and result, so that any replica
//! answers `tasks/get`, and the cancellations and answers other replicas
//! received, for the replica running the task to act on.
//!
//! Threat model: the store is the operator's (Redis), and may be slow,
//! gone or restarted empty; a replica may die with tasks running.
//! - The replica running a task (its owner) rewrites the task's record at
//!   every beat ([`TaskOptions::heartbeat`]), with the time by which it
//!   promises the next one ([`BEATS`] beats on). A replica reading a
//!   record whose promise has passed ends the task as failed, saying its
//!   owner stopped: a task never stays `working` for ever.
//! - Cancellations and answers received elsewhere are signals in keys of
//!   their own, taken once by the owner at its next beat, so no replica
//!   overwrites the record its owner writes.
//! - A record names the token's hash that made its task, and is refused to
//!   any other, as a task of this replica is. It expires with the task.
//! - A store that fails makes `tasks/*` of other replicas' tasks a clear
//!   error; the owner keeps its tasks, and answers for them itself.
//!
//! [`TaskOptions::shared`]: super::TaskOptions::shared
//! [`TaskOptions::heartbeat`]: super::TaskOptions::heartbeat

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, InputResponses};
use serde::{Deserialize, Serialize};

use super::Owner;
use crate::state::{StateStore, StoreError};

/// How many beats a record promises the next one within: a replica that
/// missed this many is taken for dead.
pub(crate) const BEATS: u32 = 5;

/// What the store keeps of one task.
#[derive(Serialize, Deserialize)]
pub(super) struct Record {
    /// The hash of the token that made the task, in hex; `None`: anyone
    /// with the id.
    pub owner: Option<String>,
    /// By when (milliseconds since the Unix epoch) the owner promises its
    /// next beat; past it, the owner is taken for dead. `None` once the
    /// task has ended.
    pub live_until: Option<u64>,
    /// The task, with its result once it ends.
    pub task: DetailedTask,
}

/// A replica's view of the shared tasks.
#[derive(Clone)]
pub(super) struct SharedTasks {
    pub store: Arc<dyn StateStore>,
    pub heartbeat: Duration,
}

impl SharedTasks {
    /// Writes `task`'s record, kept for `ttl`; `running` when its owner
    /// still beats for it.
    pub async fn write(
        &self,
        id: &str,
        owner: Option<Owner>,
        task: DetailedTask,
        running: bool,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let promise = self.heartbeat * BEATS;
        let record = Record {
            owner: owner.map(|owner| hex(&owner.0)),
            live_until: running.then(|| now_ms() + promise.as_millis() as u64),
            task,
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        self.store.put(&key("task", id), bytes, ttl).await
    }

    /// The record of task `id`, if the store has one for `owner`.
    pub async fn read(&self, id: &str, owner: Option<Owner>) -> Result<Option<Record>, StoreError> {
        let Some(bytes) = self.store.get(&key("task", id)).await? else {
            return Ok(None);
        };
        let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
            return Ok(None);
        };
        let theirs = record.owner.as_deref();
        let allowed = theirs.is_none() || theirs == owner.map(|o| hex(&o.0)).as_deref();
        Ok(allowed.then_some(record))
    }

    /// Rewrites a record whose owner stopped beating as failed, and says
    /// so; a record whose owner still beats, or that ended, is as it was.
    pub async fn settle(&self, id: &str, mut record: Record, ttl: Duration) -> DetailedTask {
        let Some(live_until) = record.live_until else {
            return record.task;
        };
        let now = now_ms();
        if now <= live_until {
            return record.task;
        }
        let late =
            Duration::from_millis(now - live_until + (self.heartbeat * BEATS).as_millis() as u64);
        let message = format!(
            "The task failed: the replica running it stopped (no heartbeat for {} s).",
            late.as_secs()
        );
        let error = McpError::internal_error(message.clone(), None);
        let error = match serde_json::to_value(&error) {
            Ok(serde_json::Value::Object(error)) => error,
            _ => Default::default(),
        };
        let mut task = record.task.task.clone();
        task.status_message = Some(message);
        task.last_updated_at = rmcp::task_manager::current_timestamp();
        record.task = DetailedTask::new(task, rmcp::model::TaskPayload::Failed { error });
        let owner = record.owner.as_deref().and_then(unhex).map(Owner);
        let failed = record.task.clone();
        // Best effort: a store that fails now is asked again at the next
        // poll, and answers the same.
        let _ = self.write(id, owner, failed.clone(), false, ttl).await;
        failed
    }

    /// Asks the owner of task `id` to cancel it.
    pub async fn signal_cancel(&self, id: &str) -> Result<(), StoreError> {
        let ttl = self.heartbeat * BEATS;
        self.store
            .put(&key("task-cancel", id), Vec::new(), ttl)
            .await
    }

    /// Gives the owner of task `id` the client's answers.
    pub async fn signal_answer(
        &self,
        id: &str,
        responses: &InputResponses,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(responses).unwrap_or_default();
        let ttl = self.heartbeat * BEATS;
        self.store.put(&key("task-answer", id), bytes, ttl).await
    }

    /// Whether another replica asked to cancel task `id` (taken once).
    pub async fn take_cancel(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.store.take(&key("task-cancel", id)).await?.is_some())
    }

    /// The answers another replica received for task `id` (taken once).
    pub async fn take_answer(&self, id: &str) -> Result<Option<InputResponses>, StoreError> {
        let bytes = self.store.take(&key("task-answer", id)).await?;
        Ok(bytes.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }
}

/// The store's key for `kind` of task `id`.
fn key(kind: &str, id: &str) -> String {
    format!("{kind}:{id}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(bytes)
}
