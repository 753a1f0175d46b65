//! Tasks: the `io.modelcontextprotocol/tasks` extension of MCP 2026-07-28
//! (SEP-2663). A 2026-07-28 `tools/call` whose request carries the
//! extension in its own capabilities, still running after
//! [`TaskOptions::after`], is answered with a task handle; the client polls
//! `tasks/get` for the result. Sessions of older revisions never get one. So a long call
//! outlives the client's own request timeout (often 60 s), and a short one
//! is answered in line as always.
//!
//! Threat model: a client may poll, cancel or guess ids at will.
//! - A task id is a bearer capability: 128 bits from the operating system's
//!   random source, so ids cannot be guessed or enumerated.
//! - Over HTTP a task belongs to the bearer token that created it: another
//!   token's `tasks/get`, `tasks/update` or `tasks/cancel` is answered as for
//!   an id that does not exist (nothing says the task exists).
//! - Memory is bounded: at most [`TaskOptions::max_tasks`] tasks (past that,
//!   calls are answered in line, as without tasks), each kept for
//!   [`TaskOptions::ttl`] from its creation, and at most
//!   [`TaskOptions::max_retained_bytes`] of results in all (the oldest
//!   finished tasks are forgotten first). A task still running at its ttl
//!   is cancelled, its guest stopped, and forgotten.
//! - `tasks/cancel` stops the guest within milliseconds, like a cancelled
//!   request.
//! - A task's call that stops to ask (an `ask` rule in a script) waits in
//!   `input_required`, its questions in `tasks/get`; the first
//!   `tasks/update` answering one resumes it once, from the state the
//!   pause sealed, so nothing that ran runs again. Answers to keys not
//!   outstanding are ignored, as the extension says.
//!
//! Tasks live in this process's memory, and, given a store that replicas
//! share ([`TaskOptions::shared`], Redis), in that store too ([`shared`]):
//! then any replica answers for any task, a replica that dies leaves its
//! running tasks failed rather than working for ever, and a cancel or an
//! answer sent to another replica reaches the one running the task at its
//! next beat. Without one, a restart forgets the tasks, and a replica
//! cannot answer for another's: behind a load balancer, give each replica
//! a route name ([`TaskOptions::route`]), which its task ids begin with;
//! clients send the id in the `Mcp-Name` header of `tasks/*` requests,
//! which a balancer routes on (`deploy/nginx.conf`). A replica asked about
//! another's task says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, InputRequests, InputResponses, JsonObject,
    Task, TaskPayload,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::current_timestamp;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::sandbox::outcome::CancelToken;
use crate::state::StateStore;

mod shared;

use shared::SharedTasks;

/// The extension's methods on a task (`taskId` in their params).
pub(crate) const METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// How long a call runs, by default, before it becomes a task: 5 s.
pub const DEFAULT_TASK_AFTER: Duration = Duration::from_secs(5);
/// How long a task is kept from its creation, by default: 15 minutes.
pub const DEFAULT_TASK_TTL: Duration = Duration::from_secs(15 * 60);
/// How often, by default, clients are asked to poll: every second.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How many tasks are kept at most, by default.
pub const DEFAULT_MAX_TASKS: usize = 1024;
/// How many bytes of results are kept at most, by default: 64 MiB.
pub const DEFAULT_MAX_RETAINED_BYTES: usize = 64 << 20;
/// How often, by default, a replica sharing its tasks rewrites their
/// records and takes the signals other replicas left: every second.
pub const DEFAULT_TASK_HEARTBEAT: Duration = Duration::from_secs(1);

/// How the server makes and keeps tasks. Every default is a constant of
/// this module: a call becomes a task after [`DEFAULT_TASK_AFTER`], is kept
/// [`DEFAULT_TASK_TTL`], polled every [`DEFAULT_POLL_INTERVAL`]; at most
/// [`DEFAULT_MAX_TASKS`] tasks and [`DEFAULT_MAX_RETAINED_BYTES`] of
/// results; no route name; kept in this process only, and when shared,
/// beating every [`DEFAULT_TASK_HEARTBEAT`].
#[derive(Clone)]
pub struct TaskOptions {
    after: Duration,
    ttl: Duration,
    poll_interval: Duration,
    max_tasks: usize,
    max_retained_bytes: usize,
    route: Option<String>,
    shared: Option<Arc<dyn StateStore>>,
    heartbeat: Duration,
}

impl std::fmt::Debug for TaskOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskOptions")
            .field("after", &self.after)
            .field("ttl", &self.ttl)
            .field("poll_interval", &self.poll_interval)
            .field("max_tasks", &self.max_tasks)
            .field("max_retained_bytes", &self.max_retained_bytes)
            .field("route", &self.route)
            .field("shared", &self.shared.is_some())
            .field("heartbeat", &self.heartbeat)
            .finish()
    }
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            after: DEFAULT_TASK_AFTER,
            ttl: DEFAULT_TASK_TTL,
            poll_interval: DEFAULT_POLL_INTERVAL,
            max_tasks: DEFAULT_MAX_TASKS,
            max_retained_bytes: DEFAULT_MAX_RETAINED_BYTES,
            route: None,
            shared: None,
            heartbeat: DEFAULT_TASK_HEARTBEAT,
        }
    }
}

/// A route name that is not 1 to 64 ASCII letters, digits, `-` or `_`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the task route name `{0}` is not 1 to 64 ASCII letters, digits, `-` or `_` (it begins task ids, which load balancers match)"
)]
pub struct InvalidTaskRoute(pub String);

impl TaskOptions {
    /// How long a call runs before it becomes a task. Zero: every call of a
    /// client that declares the extension becomes a task at once.
    pub fn after(mut self, after: Duration) -> Self {
        self.after = after;
        self
    }

    /// How long a task is kept from its creation (its `ttlMs`), running or
    /// finished.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The polling interval suggested to clients (`pollIntervalMs`).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The most tasks kept at once, running or finished.
    pub fn max_tasks(mut self, tasks: usize) -> Self {
        self.max_tasks = tasks;
        self
    }

    /// The most bytes of finished tasks' results kept at once.
    pub fn max_retained_bytes(mut self, bytes: usize) -> Self {
        self.max_retained_bytes = bytes;
        self
    }

    /// The name task ids begin with (`NAME.`), for a balancer to route
    /// `tasks/*` requests to the replica holding the task.
    pub fn route(mut self, route: &str) -> Result<Self, InvalidTaskRoute> {
        let valid = (1..=64).contains(&route.len())
            && route
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(InvalidTaskRoute(route.to_string()));
        }
        self.route = Some(route.to_string());
        Ok(self)
    }

    /// Keeps every task's status, progress message and result in `store`
    /// too, so that every server given the same store (replicas sharing a
    /// Redis) answers `tasks/get`, `tasks/update` and `tasks/cancel` for
    /// it; route names are then not needed. See [`shared`] for what a
    /// store that fails, and a replica that dies, do to tasks.
    pub fn shared(mut self, store: Arc<dyn StateStore>) -> Self {
        self.shared = Some(store);
        self
    }

    /// How often a server sharing its tasks rewrites their records (their
    /// progress messages seen elsewhere are that old at most) and takes
    /// the cancellations and answers other replicas received. A server
    /// silent for five beats is taken for dead: its running tasks end as
    /// failed. Give it five beats well past the store's timeout (a beat
    /// that waits on a slow store is late). From 10 ms to 60 s.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every.clamp(Duration::from_millis(10), Duration::from_secs(60));
        self
    }
}

/// Who may see a task: the hash of the bearer token its call came with
/// (over HTTP with tokens), or anyone who has the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(pub(crate) [u8; 32]);

/// The tasks of a server, over every connection.
#[derive(Clone)]
pub(crate) struct Tasks {
    options: Arc<TaskOptions>,
    store: Arc<Mutex<Store>>,
    shared: Option<SharedTasks>,
}

#[derive(Default)]
struct Store {
    tasks: HashMap<String, TaskRecord>,
    retained_bytes: usize,
}

/// A task the store keeps: whose it is, its state, and how to cancel it.
struct TaskRecord {
    owner: Option<Owner>,
    created: Instant,
    task: Task,
    state: State,
    cancel: CancelToken,
    cancel_requested: bool,
    /// Goes on with its call when it stops to ask; `None`: it cannot.
    resume: Option<Resume>,
    /// Wakes its beat when it stops to ask or ends (when shared).
    changed: Arc<tokio::sync::Notify>,
    /// Counts its changes; `published`: the count its record in the shared
    /// store was last written at.
    version: u64,
    published: u64,
    /// How many times it has stopped to ask.
    round: u32,
}

enum State {
    Working,
    /// Stopped to ask `requests`; `state` is what its retry brings back.
    Asking {
        requests: InputRequests,
        state: Option<String>,
    },
    /// Finished, with the size its payload counts against the bound.
    Done(TaskPayload, usize),
}

/// Goes on with a task's call that stopped to ask: the same call again,
/// with the client's answers and the state its pause sealed (so nothing
/// that ran runs again).
pub(crate) type Resume =
    Arc<dyn Fn(Answered) -> BoxFuture<'static, Result<CallToolResponse, McpError>> + Send + Sync>;

/// What a resumed call goes on with.
pub(crate) struct Answered {
    /// The client's answers to the questions outstanding.
    pub responses: InputResponses,
    /// The state the pause sealed.
    pub state: Option<String>,
    /// Stops the resumed call (`tasks/cancel`).
    pub cancel: CancelToken,
    /// Where the resumed call reports: the task.
    pub promoted: Arc<Promotion>,
}

/// A task made for a running call: where the call reports.
#[derive(Clone)]
pub(crate) struct Promoted {
    tasks: Tasks,
    id: String,
}

impl Promoted {
    /// The tool's latest progress message, shown as the task's
    /// `statusMessage`.
    pub(crate) fn status(&self, message: String) {
        let mut store = self.tasks.lock();
        if let Some(entry) = store.tasks.get_mut(&self.id) {
            entry.task.status_message = Some(message);
            entry.task.last_updated_at = current_timestamp();
            entry.version += 1;
        }
    }
}

/// Where a call's progress goes as to its task: the tool's latest progress
/// message is kept from the call's start, so that a task made after the
/// tool reported shows it as its `statusMessage`, as one made before does.
#[derive(Default)]
pub(crate) struct Promotion {
    task: std::sync::OnceLock<Promoted>,
    /// The latest progress message; behind the same lock as the promotion,
    /// so that no message falls between the two.
    latest: Mutex<Option<String>>,
}

impl Promotion {
    /// The task the call became, if it became one.
    pub(crate) fn get(&self) -> Option<&Promoted> {
        self.task.get()
    }

    /// Records the tool's latest progress message, and shows it on the
    /// task if the call is one. True if it is.
    pub(crate) fn report(&self, message: &str) -> bool {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        match self.task.get() {
            Some(task) => {
                task.status(message.to_string());
                true
            }
            None => {
                *latest = Some(message.to_string());
                false
            }
        }
    }

    /// The call became `task`: it shows the latest message reported so far.
    fn promote(&self, task: Promoted) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(message) = latest.take() {
            task.status(message);
        }
        self.task.set(task).ok();
    }
}

impl Tasks {
    pub(crate) fn new(options: TaskOptions) -> Self {
        let shared = options.shared.clone().map(|store| SharedTasks {
            store,
            heartbeat: options.heartbeat,
        });
        Tasks {
            options: Arc::new(options),
            store: Arc::default(),
            shared,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `work` (a call, cancelled through `cancel`) and answers with its
    /// result if it ends within [`TaskOptions::after`]; otherwise makes it a
    /// task and answers with the handle, telling `promoted` first. When no
    /// task can be kept (the store is full), the call is answered in line.
    pub(crate) async fn run<F>(
        &self,
        work: F,
        cancel: CancelToken,
        owner: Option<Owner>,
        promoted: Arc<Promotion>,
        resume: Option<Resume>,
    ) -> Result<CallToolResponse, McpError>
    where
        F: Future<Output = Result<CallToolResponse, McpError>> + Send + 'static,
    {
        // Dropped before it becomes a task (its request went away), the
        // call stops, as it would without tasks.
        let mut running = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(work));
        if !self.options.after.is_zero()
            && let Ok(done) = tokio::time::timeout(self.options.after, &mut running).await
        {
            return joined(done);
        }
        let Some(task) = self.create(owner, cancel, resume) else {
            return joined(running.await);
        };
        let handle = Promoted {
            tasks: self.clone(),
            id: task.task_id.clone(),
        };
        promoted.promote(handle.clone());
        let task = self
            .lock()
            .tasks
            .get(&handle.id)
            .map_or(task, |entry| entry.task.clone());
        let id = handle.id.clone();
        tokio::spawn(async move {
            let outcome = joined(running.await);
            handle.tasks.finish(&handle.id, outcome);
        });
        if let Some(shared) = &self.shared {
            // The first beat is over before the handle goes out, so that a
            // poll reaching another replica at once finds the task. The
            // beats go on if this request is dropped meanwhile.
            let (first, beaten) = tokio::sync::oneshot::channel();
            tokio::spawn(self.clone().beats(shared.clone(), id, first));
            beaten.await.ok();
        }
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// A new working task, or `None` when the store is full of running ones.
    fn create(
        &self,
        owner: Option<Owner>,
        cancel: CancelToken,
        resume: Option<Resume>,
    ) -> Option<Task> {
        let mut store = self.lock();
        store.expire(self.options.ttl);
        if store.tasks.len() >= self.options.max_tasks {
            store.forget_oldest_finished(self.shared.is_some());
        }
        if store.tasks.len() >= self.options.max_tasks {
            return None;
        }
        let id = self.new_id();
        let now = current_timestamp();
        let task = Task::new(&id, rmcp::model::TaskStatus::Working, &now, &now)
            .with_ttl_ms(self.options.ttl.as_millis() as u64)
            .with_poll_interval_ms(self.options.poll_interval.as_millis() as u64)
            .with_status_message("The call is running.");
        store.tasks.insert(
            id,
            TaskRecord {
                owner,
                created: Instant::now(),
                task: task.clone(),
                state: State::Working,
                cancel,
                cancel_requested: false,
                resume,
                changed: Arc::default(),
                version: 0,
                published: 0,
                round: 0,
            },
        );
        Some(task)
    }

    fn new_id(&self) -> String {
        let mut bytes = [0u8; 16];
        // The OS's random source does not fail on the systems toolcage
        // runs on; if it ever did, no task is better than a guessable one.
        if getrandom::fill(&mut bytes).is_err() {
            panic!("the operating system's random source failed");
        }
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        match &self.options.route {
            Some(route) => format!("{route}.{hex}"),
            None => hex,
        }
    }

    /// Records a task's end: `outcome` is the call's answer.
    fn finish(&self, id: &str, outcome: Result<CallToolResponse, McpError>) {
        let mut store = self.lock();
        let Some(entry) = store.tasks.get_mut(id) else {
            return; // expired while it ran
        };
        if matches!(entry.state, State::Done(..)) {
            return; // ended already: cancelled while it waited, or failed by others
        }
        entry.changed.notify_one();
        entry.version += 1;
        let (payload, message) = match outcome {
            Ok(CallToolResponse::Complete(result))
                if entry.cancel_requested && result.is_error == Some(true) =>
            {
                (
                    TaskPayload::Cancelled,
                    "The task was cancelled: its guest was stopped.".to_string(),
                )
            }
            Ok(CallToolResponse::Complete(result)) => {
                let message = match result.is_error {
                    Some(true) => "The call ended with an error result.",
                    _ => "The call completed.",
                };
                match serde_json::to_value(&result) {
                    Ok(serde_json::Value::Object(result)) => {
                        (TaskPayload::Completed { result }, message.to_string())
                    }
                    _ => failed(McpError::internal_error(
                        "the call's result could not be encoded",
                        None,
                    )),
                }
            }
            Ok(CallToolResponse::InputRequired(_)) if entry.cancel_requested => (
                TaskPayload::Cancelled,
                "The task was cancelled: its guest was stopped.".to_string(),
            ),
            Ok(CallToolResponse::InputRequired(asked)) if entry.resume.is_some() => {
                entry.task.status_message = Some(
                    "The call waits for an answer: see inputRequests, answer with tasks/update."
                        .to_string(),
                );
                entry.task.last_updated_at = current_timestamp();
                entry.state = State::Asking {
                    requests: asked.input_requests.unwrap_or_default(),
                    state: asked.request_state,
                };
                entry.round += 1;
                return;
            }
            Ok(_) => failed(McpError::internal_error(
                "the call asked for input after it became a task",
                None,
            )),
            Err(error) => failed(error),
        };
        let bytes = match &payload {
            TaskPayload::Completed { result } | TaskPayload::Failed { error: result } => {
                serde_json::to_vec(result).map_or(0, |v| v.len())
            }
            _ => 0,
        };
        entry.task.status_message = Some(message);
        entry.task.last_updated_at = current_timestamp();
        entry.state = State::Done(payload, bytes);
        store.retained_bytes += bytes;
        while store.retained_bytes > self.options.max_retained_bytes {
            if !store.forget_oldest_finished(self.shared.is_some()) {
                break;
            }
        }
    }

    /// `tasks/get`: this server's task, or, when tasks are shared, one the
    /// store has (failed, if its replica stopped beating for it).
    pub(crate) async fn get(
        &self,
        id: &str,
        owner: Option<Owner>,
    ) -> Result<DetailedTask, McpError> {
        if let Some(task) = self.here(id, owner, |entry| detailed(entry)) {
            return Ok(task);
        }
        let (shared, record) = self.elsewhere(id, owner, "retrieve").await?;
        let settled = shared.settle(id, record, self.options.ttl).await;
        settled.map_err(|e| store_failed(id, "retrieve", e))
    }

    /// `tasks/cancel`: stops the guest; the task ends `cancelled` unless
    /// the call finished first. Another replica's task is cancelled by it,
    /// at its next beat.
    pub(crate) async fn cancel(&self, id: &str, owner: Option<Owner>) -> Result<(), McpError> {
        if self.here(id, owner, cancel_entry).is_some() {
            return Ok(());
        }
        let failed = |e| store_failed(id, "cancel", e);
        let (shared, record) = self.elsewhere(id, owner, "cancel").await?;
        let task = shared.settle(id, record, self.options.ttl).await;
        if shared::is_terminal(&task.map_err(failed)?.payload) {
            return Ok(());
        }
        let signalled = shared.signal_cancel(id, self.options.ttl).await;
        signalled.map_err(failed)
    }

    /// `tasks/update`: answers to the questions a task waits on resume its
    /// call, once; answers to keys not outstanding (the task is working,
    /// or finished) are ignored. Another replica's task is resumed by it,
    /// at its next beat.
    pub(crate) async fn update(
        &self,
        id: &str,
        owner: Option<Owner>,
        responses: InputResponses,
    ) -> Result<(), McpError> {
        let Some(responses) = self.answer_here(id, owner, responses) else {
            return Ok(());
        };
        let failed = |e| store_failed(id, "update", e);
        let (shared, record) = self.elsewhere(id, owner, "update").await?;
        let round = record.round;
        let task = shared.settle(id, record, self.options.ttl).await;
        let TaskPayload::InputRequired { input_requests } = &task.map_err(failed)?.payload else {
            return Ok(());
        };
        let responses = outstanding(input_requests, responses);
        if responses.is_empty() {
            return Ok(());
        }
        let answer = shared::Answer { round, responses };
        let signalled = shared.signal_answer(id, &answer, self.options.ttl).await;
        signalled.map_err(failed)
    }

    /// Runs `f` on this server's task `id`, if `owner` may see it.
    fn here<T>(
        &self,
        id: &str,
        owner: Option<Owner>,
        f: impl FnOnce(&mut TaskRecord) -> T,
    ) -> Option<T> {
        let mut store = self.lock();
        store.expire(self.options.ttl);
        match store.tasks.get_mut(id) {
            Some(entry) if entry.owner.is_none() || entry.owner == owner => Some(f(entry)),
            _ => None,
        }
    }

    /// Answers this server's task `id` (resuming it when it waits on one
    /// of the keys answered); the responses back when it is not here.
    fn answer_here(
        &self,
        id: &str,
        owner: Option<Owner>,
        responses: InputResponses,
    ) -> Option<InputResponses> {
        let mut store = self.lock();
        store.expire(self.options.ttl);
        let entry = match store.tasks.get_mut(id) {
            Some(entry) if entry.owner.is_none() || entry.owner == owner => entry,
            _ => return Some(responses),
        };
        let (State::Asking { requests, .. }, Some(resume)) = (&entry.state, &entry.resume) else {
            return None;
        };
        let responses = outstanding(requests, responses);
        if responses.is_empty() {
            return None;
        }
        let resume = resume.clone();
        let State::Asking { state, .. } = std::mem::replace(&mut entry.state, State::Working)
        else {
            return None;
        };
        let cancel = CancelToken::new();
        entry.cancel = cancel.clone();
        entry.version += 1;
        entry.task.status_message = Some("The call goes on with the answer.".to_string());
        entry.task.last_updated_at = current_timestamp();
        drop(store);
        let promoted = Arc::new(Promotion::default());
        let handle = Promoted {
            tasks: self.clone(),
            id: id.to_string(),
        };
        promoted.promote(handle.clone());
        let answered = Answered {
            responses,
            state,
            cancel,
            promoted,
        };
        tokio::spawn(async move {
            let outcome = joined(tokio::spawn(resume(answered)).await);
            handle.tasks.finish(&handle.id, outcome);
        });
        None
    }

    /// The shared store's record of another replica's task `id`, or why
    /// there is none.
    async fn elsewhere(
        &self,
        id: &str,
        owner: Option<Owner>,
        verb: &str,
    ) -> Result<(&SharedTasks, shared::Record), McpError> {
        let Some(shared) = &self.shared else {
            return Err(self.not_found(id, verb));
        };
        match shared.read(id, owner).await {
            Ok(Some(record)) => Ok((shared, record)),
            Ok(None) => Err(self.not_found(id, verb)),
            Err(error) => Err(store_failed(id, verb, error)),
        }
    }

    /// Runs `f` on this server's task `id`, whoever owns it, with the ttl.
    fn with_entry<T>(&self, id: &str, f: impl FnOnce(&mut TaskRecord, Duration) -> T) -> Option<T> {
        let mut store = self.lock();
        store.expire(self.options.ttl);
        store
            .tasks
            .get_mut(id)
            .map(|entry| f(entry, self.options.ttl))
    }

    /// How many of this server's tasks are in each state, by the state's
    /// name in the extension.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub(crate) fn counts(&self) -> [(&'static str, u64); 5] {
        let store = self.lock();
        let mut counts = [
            ("working", 0),
            ("input_required", 0),
            ("completed", 0),
            ("failed", 0),
            ("cancelled", 0),
        ];
        for entry in store.tasks.values() {
            let i = match &entry.state {
                State::Working => 0,
                State::Asking { .. } => 1,
                State::Done(TaskPayload::Completed { .. }, _) => 2,
                State::Done(TaskPayload::Cancelled, _) => 4,
                State::Done(..) => 3,
            };
            counts[i].1 += 1;
        }
        counts
    }

    /// Cancels every running task (the server is ending).
    pub(crate) fn cancel_all(&self) {
        let mut store = self.lock();
        for entry in store.tasks.values_mut() {
            if matches!(entry.state, State::Working) {
                entry.cancel_requested = true;
                entry.cancel.cancel();
            }
        }
    }

    fn not_found(&self, id: &str, verb: &str) -> McpError {
        let data = Some(serde_json::json!({ "taskId": id }));
        let ours = self.options.route.as_deref();
        let theirs = id.split_once('.').map(|(route, _)| route);
        if let Some(shared) = &self.shared {
            return McpError::invalid_params(
                format!(
                    "Failed to {verb} task: there is no task `{id}`. Tasks are kept for {} s after they are made, only for the token that made them, in the state store the replicas share: a store restarted empty has forgotten the tasks it held.",
                    self.options.ttl.as_secs()
                ),
                data.map(|mut data| {
                    data["heartbeatMs"] = (shared.heartbeat.as_millis() as u64).into();
                    data
                }),
            );
        }
        if theirs.is_some() && theirs != ours {
            let here = match ours {
                Some(route) => format!("this replica's route is `{route}`"),
                None => "this replica has no route name".to_string(),
            };
            return McpError::invalid_params(
                format!(
                    "Failed to {verb} task: task `{id}` was made by the replica with route `{}`, and {here}. The balancer must send tasks/* requests by their Mcp-Name header to the replica that made the task (see deploy/nginx.conf).",
                    theirs.unwrap_or_default()
                ),
                data,
            );
        }
        McpError::invalid_params(
            format!(
                "Failed to {verb} task: there is no task `{id}` here. Tasks are kept for {} s after they are made, and only for the token that made them.",
                self.options.ttl.as_secs()
            ),
            data,
        )
    }
}

impl Store {
    /// Forgets the tasks older than `ttl`, cancelling those still running.
    fn expire(&mut self, ttl: Duration) {
        let now = Instant::now();
        let mut freed = 0;
        self.tasks.retain(|_, entry| {
            let keep = now.duration_since(entry.created) < ttl;
            if !keep {
                match entry.state {
                    State::Working => entry.cancel.cancel(),
                    State::Asking { .. } => {}
                    State::Done(_, bytes) => freed += bytes,
                }
            }
            keep
        });
        self.retained_bytes -= freed;
    }

    /// Forgets the oldest finished task; false if none has finished. With
    /// `shared`, a task whose end is not yet in the shared store is kept
    /// until it is.
    fn forget_oldest_finished(&mut self, shared: bool) -> bool {
        let oldest = self
            .tasks
            .iter()
            .filter(|(_, entry)| matches!(entry.state, State::Done(..)))
            .filter(|(_, entry)| !shared || entry.published == entry.version)
            .min_by_key(|(_, entry)| entry.created)
            .map(|(id, _)| id.clone());
        let Some(id) = oldest else { return false };
        if let Some(TaskRecord {
            state: State::Done(_, bytes),
            ..
        }) = self.tasks.remove(&id)
        {
            self.retained_bytes -= bytes;
        }
        true
    }
}

/// Task `entry` as `tasks/get` shows it.
fn detailed(entry: &TaskRecord) -> DetailedTask {
    let payload = match &entry.state {
        State::Working => TaskPayload::Working,
        State::Asking { requests, .. } => TaskPayload::InputRequired {
            input_requests: requests.clone(),
        },
        State::Done(payload, _) => payload.clone(),
    };
    DetailedTask::new(entry.task.clone(), payload)
}

/// Cancels task `entry`: one waiting for an answer ends at once, one
/// running when its guest has stopped.
fn cancel_entry(entry: &mut TaskRecord) {
    if matches!(entry.state, State::Asking { .. }) {
        entry.cancel_requested = true;
        entry.task.status_message = Some("The task was cancelled while it waited.".into());
        entry.task.last_updated_at = current_timestamp();
        entry.state = State::Done(TaskPayload::Cancelled, 0);
        entry.version += 1;
        entry.changed.notify_one();
    }
    if matches!(entry.state, State::Working) {
        entry.cancel_requested = true;
        entry.version += 1;
        entry.task.status_message = Some("Cancelling: the guest is being stopped.".into());
        entry.task.last_updated_at = current_timestamp();
        entry.cancel.cancel();
    }
}

/// The responses among `responses` to the questions in `requests`.
fn outstanding(requests: &InputRequests, responses: InputResponses) -> InputResponses {
    responses
        .into_iter()
        .filter(|(key, _)| requests.contains_key(key))
        .collect()
}

/// A `tasks/*` request on another replica's task the store failed.
fn store_failed(id: &str, verb: &str, error: crate::state::StoreError) -> McpError {
    McpError::internal_error(
        format!(
            "Failed to {verb} task `{id}`: it is not on this replica, and {error}. Try again: the store reconnects by itself."
        ),
        Some(serde_json::json!({ "taskId": id })),
    )
}

/// A failed task's payload and message.
fn failed(error: McpError) -> (TaskPayload, String) {
    let message = format!("The call failed: {}", error.message);
    let error = match serde_json::to_value(&error) {
        Ok(serde_json::Value::Object(error)) => error,
        _ => JsonObject::new(),
    };
    (TaskPayload::Failed { error }, message)
}

fn joined(
    done: Result<Result<CallToolResponse, McpError>, tokio::task::JoinError>,
) -> Result<CallToolResponse, McpError> {
    done.unwrap_or_else(|e| {
        Err(McpError::internal_error(
            format!("the call's task ended abnormally: {e}"),
            None,
        ))
    })
}

/// The owner of what `context`'s request makes: its bearer token's hash,
/// when the HTTP transport checked one.
pub(crate) fn owner(context: &RequestContext<RoleServer>) -> Option<Owner> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Owner>())
        .copied()
}

#[cfg(test)]
mod tests;
