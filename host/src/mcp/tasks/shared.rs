//! Tasks in a state store that replicas share ([`TaskOptions::shared`]):
//! each task's status, progress message and result, so that any replica
//! answers `tasks/get`, and the cancellations and answers other replicas
//! received, for the replica running the task to act on.
//!
//! Threat model: the store is the operator's (Redis), and may be slow,
//! gone or restarted empty; a replica may die with tasks running.
//! - The replica running a task (its owner) renews the task's liveness key
//!   at every beat ([`TaskOptions::heartbeat`]), which the store expires
//!   [`BEATS`] beats later (its own clock: no replica's wall clock is
//!   compared with another's), and writes the task's record when it
//!   changed. A replica reading a running task whose liveness key has
//!   expired ends it as failed, saying its owner stopped, with a
//!   tombstone that every replica honours, its owner too: the owner stops
//!   the guest at its next beat. So a task never stays `working` for ever,
//!   and once reported failed it stays failed.
//! - Cancellations and answers received elsewhere are signals in keys of
//!   their own, read by the owner at its next beat and deleted once acted
//!   on (an owner that fails in between acts on them again, harmlessly).
//!   An answer names the question it answers, so a late one never answers
//!   a later question. Of answers sent to other replicas before the
//!   owner's beat, the last one sent is the one taken.
//! - A record names the token's hash that made its task, and is refused to
//!   any other, as a task of this replica is. It expires with the task.
//! - A store that fails makes `tasks/*` of other replicas' tasks a clear
//!   error; the owner keeps its tasks, answers for them itself, and writes
//!   a task's end again at each beat until the store takes it.
//!
//! [`TaskOptions::shared`]: super::TaskOptions::shared
//! [`TaskOptions::heartbeat`]: super::TaskOptions::heartbeat

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, InputResponses, TaskPayload};
use serde::{Deserialize, Serialize};

use super::{Owner, State, Tasks, cancel_entry, detailed};
use crate::state::{StateStore, StoreError};

/// How many beats a task's liveness lasts: a replica that missed this many
/// is taken for dead.
pub(crate) const BEATS: u32 = 5;

/// What the store keeps of one task.
#[derive(Serialize, Deserialize)]
pub(super) struct Record {
    /// The hash of the token that made the task, in hex; `None`: anyone
    /// with the id.
    pub owner: Option<String>,
    /// How many times the task has stopped to ask: answers name it.
    pub round: u32,
    /// The task, with its result once it ends.
    pub task: DetailedTask,
}

/// An answer left for the owner of a task.
#[derive(Serialize, Deserialize)]
pub(super) struct Answer {
    /// The question round it answers.
    pub round: u32,
    pub responses: InputResponses,
}

/// A replica's view of the shared tasks.
#[derive(Clone)]
pub(super) struct SharedTasks {
    pub store: Arc<dyn StateStore>,
    pub heartbeat: Duration,
}

impl SharedTasks {
    /// How long a beat keeps its task alive.
    fn promise(&self) -> Duration {
        self.heartbeat * BEATS
    }

    /// Renews task `id`'s liveness for [`BEATS`] beats.
    pub async fn alive(&self, id: &str) -> Result<(), StoreError> {
        self.store
            .put(&key("task-alive", id), Vec::new(), self.promise())
            .await
    }

    /// Writes `task`'s record, kept for `ttl`.
    pub async fn write(
        &self,
        id: &str,
        owner: Option<Owner>,
        round: u32,
        task: DetailedTask,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let record = Record {
            owner: owner.map(|owner| hex(&owner.0)),
            round,
            task,
        };
        self.put_record(id, &record, ttl).await
    }

    async fn put_record(&self, id: &str, record: &Record, ttl: Duration) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).unwrap_or_default();
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

    /// The task as it stands: a running one whose owner stopped renewing
    /// its liveness is failed (for good: a tombstone says so to every
    /// replica); any other is as its record says.
    pub async fn settle(
        &self,
        id: &str,
        mut record: Record,
        ttl: Duration,
    ) -> Result<DetailedTask, StoreError> {
        if is_terminal(&record.task.payload) {
            return Ok(record.task);
        }
        if let Some(failed) = self.tombstone(id).await? {
            return Ok(failed);
        }
        if self.store.get(&key("task-alive", id)).await?.is_some() {
            return Ok(record.task);
        }
        let message = format!(
            "The task failed: the replica running it stopped (no heartbeat for {} s).",
            self.promise().as_secs_f64()
        );
        let failed = failed_task(&record.task, message);
        let bytes = serde_json::to_vec(&failed).unwrap_or_default();
        self.store.put(&key("task-failed", id), bytes, ttl).await?;
        record.task = failed.clone();
        // The tombstone is what counts; the record follows it, best effort.
        let _ = self.put_record(id, &record, ttl).await;
        Ok(failed)
    }

    /// The failure another replica declared for task `id`, if any.
    pub async fn tombstone(&self, id: &str) -> Result<Option<DetailedTask>, StoreError> {
        let bytes = self.store.get(&key("task-failed", id)).await?;
        Ok(bytes.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Asks the owner of task `id` to cancel it, for `ttl`.
    pub async fn signal_cancel(&self, id: &str, ttl: Duration) -> Result<(), StoreError> {
        self.store
            .put(&key("task-cancel", id), Vec::new(), ttl)
            .await
    }

    /// Gives the owner of task `id` the client's answers to its question
    /// `round`, for `ttl`.
    pub async fn signal_answer(
        &self,
        id: &str,
        answer: &Answer,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(answer).unwrap_or_default();
        self.store.put(&key("task-answer", id), bytes, ttl).await
    }

    /// Whether another replica asked to cancel task `id`.
    pub async fn cancel_asked(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.store.get(&key("task-cancel", id)).await?.is_some())
    }

    /// The answers another replica received for task `id`.
    pub async fn answer(&self, id: &str) -> Result<Option<Answer>, StoreError> {
        let bytes = self.store.get(&key("task-answer", id)).await?;
        Ok(bytes.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Deletes the cancellation (`"task-cancel"`) or answer
    /// (`"task-answer"`) left for task `id`, once acted on.
    pub async fn acted_on(&self, kind: &str, id: &str) -> Result<(), StoreError> {
        self.store.delete(&key(kind, id)).await
    }
}

/// `task`, failed with `message`.
pub(super) fn failed_task(task: &DetailedTask, message: String) -> DetailedTask {
    let error = McpError::internal_error(message.clone(), None);
    let error = match serde_json::to_value(&error) {
        Ok(serde_json::Value::Object(error)) => error,
        _ => Default::default(),
    };
    let mut task = task.task.clone();
    task.status_message = Some(message);
    task.last_updated_at = rmcp::task_manager::current_timestamp();
    DetailedTask::new(task, TaskPayload::Failed { error })
}

pub(super) fn is_terminal(payload: &TaskPayload) -> bool {
    !matches!(
        payload,
        TaskPayload::Working | TaskPayload::InputRequired { .. }
    )
}

/// The owner's side: the beats of each task it runs.
impl Tasks {
    /// Beats for task `id` until its end is written or it is forgotten,
    /// telling `first` when the first beat is over.
    pub(super) async fn beats(
        self,
        shared: SharedTasks,
        id: String,
        first: tokio::sync::oneshot::Sender<()>,
    ) {
        let Some(changed) = self.with_entry(&id, |entry, _| entry.changed.clone()) else {
            return;
        };
        let mut going = self.beat(&shared, &id).await;
        first.send(()).ok();
        while going {
            tokio::select! {
                () = tokio::time::sleep(shared.heartbeat) => {}
                () = changed.notified() => {}
            }
            going = self.beat(&shared, &id).await;
        }
    }

    /// One beat for task `id`: its liveness renewed, its record written if
    /// it changed, and the signals left for it acted on. False once its end
    /// is written, or it is forgotten.
    async fn beat(&self, shared: &SharedTasks, id: &str) -> bool {
        if let Err(error) = shared.alive(id).await {
            tracing::warn!(
                task = id,
                "the task's heartbeat could not be written: {error}"
            );
        }
        match shared.tombstone(id).await {
            Ok(Some(failed)) => self.adopt_failure(id, failed),
            Ok(None) => {}
            Err(error) => tracing::warn!(task = id, "the task's tombstone: {error}"),
        }
        let Some(published) = self.publish(shared, id).await else {
            return false;
        };
        if !published.running {
            return !published.written;
        }
        self.take_signals(shared, id, published.asking).await;
        true
    }

    /// Writes task `id`'s record if it changed since it was last written.
    async fn publish(&self, shared: &SharedTasks, id: &str) -> Option<Published> {
        let snapshot = self.with_entry(id, |entry, ttl| {
            let changed = entry.version != entry.published || entry.version == 0;
            let ttl = ttl.saturating_sub(entry.created.elapsed());
            let task = changed.then(|| detailed(entry));
            let running = !matches!(entry.state, State::Done(..));
            let asking = matches!(entry.state, State::Asking { .. });
            (
                entry.owner,
                entry.round,
                entry.version,
                task,
                ttl,
                running,
                asking,
            )
        })?;
        let (owner, round, version, task, ttl, running, asking) = snapshot;
        let mut published = Published {
            running,
            asking,
            written: task.is_none(),
        };
        let Some(task) = task else {
            return Some(published);
        };
        let ttl = ttl.max(Duration::from_millis(1));
        match shared.write(id, owner, round, task, ttl).await {
            Ok(()) => {
                published.written = true;
                self.with_entry(id, |entry, _| {
                    entry.published = entry.published.max(version);
                });
            }
            Err(error) => {
                tracing::warn!(task = id, "the task's record could not be written: {error}");
            }
        }
        Some(published)
    }

    /// Acts on the cancellation and the answer other replicas left for
    /// task `id`, then deletes them.
    async fn take_signals(&self, shared: &SharedTasks, id: &str, asking: bool) {
        match shared.cancel_asked(id).await {
            Ok(true) => {
                self.with_entry(id, |entry, _| cancel_entry(entry));
                shared.acted_on("task-cancel", id).await.ok();
            }
            Ok(false) => {}
            Err(error) => tracing::warn!(task = id, "the task's signals: {error}"),
        }
        if !asking {
            return;
        }
        match shared.answer(id).await {
            Ok(Some(answer)) => {
                let current = self.with_entry(id, |entry, _| (entry.owner, entry.round));
                if let Some((owner, round)) = current
                    && round == answer.round
                {
                    self.answer_here(id, owner, answer.responses);
                }
                shared.acted_on("task-answer", id).await.ok();
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(task = id, "the task's signals: {error}"),
        }
    }

    /// Another replica found task `id`'s heartbeat gone and failed it: this
    /// server stops its guest and shows the same failure.
    fn adopt_failure(&self, id: &str, failed: DetailedTask) {
        self.with_entry(id, |entry, _| {
            if matches!(entry.state, State::Done(..)) {
                return;
            }
            entry.cancel_requested = true;
            entry.cancel.cancel();
            entry.task = failed.task;
            entry.state = State::Done(failed.payload, 0);
            entry.version += 1;
        });
    }
}

/// What a beat found of a task.
struct Published {
    /// Not ended: its owner goes on beating.
    running: bool,
    /// Waiting for an answer.
    asking: bool,
    /// Its record in the store is as it is now.
    written: bool,
}

/// The store's key for `kind` of task `id`.
fn key(kind: &str, id: &str) -> String {
    format!("{kind}:{id}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
