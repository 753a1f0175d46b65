//! toolcage's side of an MCP session: the client handler, which says who
//! toolcage is and takes what the server sends unasked (a call's progress,
//! its logs, its list changes, its questions to the user), and where each
//! call's events and questions go.
//!
//! Threat model: everything the server sends is untrusted. A call's events
//! are at most [`MAX_GUEST_EVENTS`], each cut to [`MAX_EVENT_MESSAGE`] and
//! redacted of the operator's secrets, as a component's are; a log message
//! (which over stdio names no call) goes to every call in flight on the
//! server, bounded the same way. A question to the user is asked only of
//! the one call in flight whose caller can ask, redacted like an answer,
//! and withdrawn at the call's deadline or end; it is declined, saying
//! why, when no caller can ask or several calls are in flight (a question
//! names no call). A list change only wakes the one who lists the tools
//! again, at most once per pause.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rmcp::ClientHandler;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProgressNotificationParam, ProgressToken, ProtocolVersion,
};
// Logging is deprecated by SEP-2577 (2026-07-28), but the 2025-11-25
// servers toolcage speaks to still send it, and their logs are the
// caller's events.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, RoleClient};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::server::UpstreamServer;
use crate::catalog::elicit::{Elicitation, ElicitationRequest, Elicitor};
use crate::sandbox::outcome::{
    EventSink, GuestEvent, LogLevel, MAX_EVENT_MESSAGE, MAX_GUEST_EVENTS,
};
use crate::sandbox::secrets::Secrets;
use crate::sandbox::secrets::redact::Redactor;
use crate::sandbox::text::truncate;

/// The calls in flight on a server that have a watcher: where their events
/// and questions go. A call is in from before its request is sent (a
/// server may ask its question before the send returns) until it ends;
/// its progress token, which rmcp picks as it sends, is learnt after.
#[derive(Clone, Default)]
pub(super) struct Calls(Arc<Mutex<InFlightCalls>>);

#[derive(Default)]
struct InFlightCalls {
    next: u64,
    by_key: HashMap<u64, (Option<ProgressToken>, Arc<Watcher>)>,
}

impl Calls {
    fn locked(&self) -> MutexGuard<'_, InFlightCalls> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `watcher`'s call in, before its request is sent: its key.
    pub(super) fn enter(&self, watcher: Arc<Watcher>) -> u64 {
        let mut calls = self.locked();
        let key = calls.next;
        calls.next += 1;
        calls.by_key.insert(key, (None, watcher));
        key
    }

    /// The call `key` was sent with progress token `token`.
    pub(super) fn sent(&self, key: u64, token: ProgressToken) {
        if let Some((slot, _)) = self.locked().by_key.get_mut(&key) {
            *slot = Some(token);
        }
    }

    /// The call `key` ended.
    pub(super) fn leave(&self, key: u64) {
        self.locked().by_key.remove(&key);
    }

    /// The watcher of the call sent with `token`.
    fn of(&self, token: &ProgressToken) -> Option<Arc<Watcher>> {
        let calls = self.locked();
        let mut sent = calls.by_key.values();
        let found = sent.find(|(sent_with, _)| sent_with.as_ref() == Some(token));
        found.map(|(_, watcher)| watcher.clone())
    }

    /// Every call's watcher.
    fn watchers(&self) -> Vec<Arc<Watcher>> {
        let calls = self.locked();
        calls.by_key.values().map(|(_, w)| w.clone()).collect()
    }
}

/// Where one call's events go: at most [`MAX_GUEST_EVENTS`], each cut to
/// [`MAX_EVENT_MESSAGE`] and redacted of the operator's secrets, as a
/// component's are; and who answers its server's questions to the user,
/// until the call's deadline.
pub(super) struct Watcher {
    tool: String,
    sink: Option<EventSink>,
    elicitor: Option<Elicitor>,
    deadline: Instant,
    /// Cancelled when the call ends: its question is then withdrawn.
    ended: CancellationToken,
    sent: AtomicUsize,
    redactor: Option<Arc<Redactor>>,
}

impl Watcher {
    pub(super) fn new(
        tool: &str,
        sink: Option<EventSink>,
        elicitor: Option<Elicitor>,
        secrets: &Secrets,
        timeout: Duration,
    ) -> Watcher {
        let redactor = secrets.redactor();
        Watcher {
            tool: tool.to_string(),
            sink,
            elicitor,
            deadline: Instant::now() + timeout,
            ended: CancellationToken::new(),
            sent: AtomicUsize::new(0),
            redactor,
        }
    }

    /// Ends the call's questions when dropped, answered or not.
    pub(super) fn ending(&self) -> DropGuard {
        self.ended.clone().drop_guard()
    }

    fn bounded(&self, message: String) -> String {
        truncate(self.redacted(message), MAX_EVENT_MESSAGE)
    }

    /// `text` with the operator's secrets redacted.
    fn redacted(&self, text: String) -> String {
        match &self.redactor {
            Some(redactor) => redactor.text(&text).0.into_owned(),
            None => text,
        }
    }

    fn send(&self, event: GuestEvent) {
        let Some(sink) = &self.sink else { return };
        if self.sent.fetch_add(1, Ordering::Relaxed) >= MAX_GUEST_EVENTS {
            return;
        }
        let event = match event {
            GuestEvent::Log { level, message } => GuestEvent::Log {
                level,
                message: self.bounded(message),
            },
            GuestEvent::Progress { message, fraction } => GuestEvent::Progress {
                message: self.bounded(message),
                fraction,
            },
        };
        sink(event);
    }

    /// Asks this call's caller the server's question `message`, its answer
    /// to be of `schema` (as JSON text), until the call's deadline or end.
    /// Only for a watcher with an elicitor.
    async fn ask(&self, server: &str, message: String, schema: String) -> ElicitResult {
        // The call's name and arguments, as its caller knows them, are
        // set by the call path.
        // What the server asks is redacted like its answers: a secret
        // in its environment never reaches the user through a question.
        let Ok(schema) = serde_json::from_str(&self.redacted(schema)) else {
            return ElicitResult::new(ElicitationAction::Decline);
        };
        let question = ElicitationRequest {
            tool: self.tool.clone(),
            arguments: Value::Null,
            message: self.redacted(message),
            schema,
        };
        let elicitor = self.elicitor.as_ref().expect("an asker can ask");
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let asking = tokio::time::timeout_at(deadline, elicitor(question));
        let answered = tokio::select! {
            answered = asking => answered,
            () = self.ended.cancelled() => return ElicitResult::new(ElicitationAction::Cancel),
        };
        let Ok(answer) = answered else {
            self.send(GuestEvent::Log {
                level: LogLevel::Warn,
                message: format!("The MCP server `{server}` asked the user a question for `{}`; no answer came within the call's timeout, and the question was cancelled.", self.tool),
            });
            return ElicitResult::new(ElicitationAction::Cancel);
        };
        match answer {
            Elicitation::Accept(content) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(content)
            }
            Elicitation::Decline => ElicitResult::new(ElicitationAction::Decline),
            Elicitation::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        }
    }
}

/// toolcage's side of a connection: who it says it is, and where the
/// server's notifications go.
#[derive(Clone)]
pub(super) struct UpstreamClient {
    config: ClientConfig,
    server: String,
    calls: Calls,
    changed: Arc<Notify>,
}

impl UpstreamClient {
    pub(super) fn new(
        server: &UpstreamServer,
        calls: Calls,
        changed: Arc<Notify>,
    ) -> UpstreamClient {
        // 2025-11-25: the newest version whose servers send progress, log
        // and list-changed notifications unasked (2026-07-28 servers send
        // them only on streams the client opens for them, which toolcage
        // does not yet).
        // Elicitation (form) is offered, and answered by the caller of the
        // call it comes up in, when there is one (else declined).
        let capabilities = ClientCapabilities::builder().enable_elicitation().build();
        let config = ClientConfig::new(
            capabilities,
            Implementation::new("toolcage", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        UpstreamClient {
            config,
            server: server.name().to_string(),
            calls,
            changed,
        }
    }

    fn watchers(&self) -> Vec<Arc<Watcher>> {
        self.calls.watchers()
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    /// A call's progress, to that call's caller.
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        if let Some(watcher) = self.calls.of(&params.progress_token) {
            let fraction = params
                .total
                .filter(|total| *total > 0.0)
                .map(|total| (params.progress / total).clamp(0.0, 1.0) as f32);
            let message = params.message.unwrap_or_default();
            watcher.send(GuestEvent::Progress { message, fraction });
        }
        std::future::ready(())
    }

    /// A log message, to toolcage's log and to the callers of the calls in
    /// flight on this server (over stdio a message names no call).
    #[allow(deprecated)]
    fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        let text = match params.data {
            Value::String(text) => text,
            other => other.to_string(),
        };
        let message = match params.logger {
            Some(logger) => format!("{logger}: {text}"),
            None => text,
        };
        let level = match params.level {
            LoggingLevel::Debug => LogLevel::Debug,
            LoggingLevel::Info | LoggingLevel::Notice => LogLevel::Info,
            LoggingLevel::Warning => LogLevel::Warn,
            _ => LogLevel::Error,
        };
        tracing::debug!(server = %self.server, "{}", truncate(message.clone(), MAX_EVENT_MESSAGE).escape_debug());
        for watcher in self.watchers() {
            watcher.send(GuestEvent::Log {
                level,
                message: message.clone(),
            });
        }
        std::future::ready(())
    }

    /// A question for the user: asked of the one call in flight on this
    /// server whose caller can ask; declined (and the calls' events say
    /// why) when no caller can, or when several calls are in flight, since
    /// over stdio a question names no call.
    fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ElicitResult, ErrorData>> + MaybeSendFuture + '_ {
        let watchers = self.watchers();
        async move {
            let ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } = request
            else {
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            };
            let askers: Vec<&Arc<Watcher>> =
                watchers.iter().filter(|w| w.elicitor.is_some()).collect();
            let (Some(asker), 1) = (askers.first(), askers.len()) else {
                let why = match askers.is_empty() {
                    true => "its caller cannot ask the user",
                    false => {
                        "several calls are in flight on this server, and the question names none"
                    }
                };
                for watcher in &watchers {
                    watcher.send(GuestEvent::Log {
                        level: LogLevel::Warn,
                        message: format!(
                            "The MCP server `{}` asked the user \"{message}\"; toolcage declined: {why}.",
                            self.server
                        ),
                    });
                }
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            };
            let schema = serde_json::to_string(&requested_schema).unwrap_or_default();
            Ok(asker.ask(&self.server, message, schema).await)
        }
    }

    fn on_tool_list_changed(
        &self,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }
}
