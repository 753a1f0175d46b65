//! SessionOwners bound to the token that opened them, and capped per token.
//!
//! Threat model: a session id travels in a header (`Mcp-Session-Id`) that
//! any client can send. rmcp's session manager serves whoever names a
//! session; the README gives each client its own token. So each session is
//! bound to the token that opened it (its owner: the token's hash,
//! never the token): a request of another token that names it (a POST, the
//! GET of its event stream, its DELETE) is answered 404, exactly as for a
//! session that does not exist, so that a guess tells nothing. Any request
//! naming a session that is not open is answered 404 here, a DELETE too, as
//! the transport requires (rmcp answers a DELETE 202).
//!
//! Each session costs memory (its service, channels, and the state of its
//! calls), so a token may hold at most
//! [`DEFAULT_MAX_SESSIONS_PER_TOKEN`] open at once. Most clients that crash
//! or are killed never end their session (DELETE), so a cap that refused
//! new sessions would let a few such exits lock every new client of the
//! token out until those sessions expired. So past the cap, a new session
//! closes the token's session idle longest: one with no request, answer
//! or event stream in progress. A session in use is never closed for
//! another: when every one the token holds is in use, the new one is
//! closed at once and its `initialize` answered 429, so memory stays
//! bounded. A session ends when its client deletes it, when a newer one
//! takes its place, or when rmcp drops it after it has been idle for
//! [`HttpOptions::session_idle`](super::HttpOptions::session_idle)
//! (5 minutes by default). Without tokens, every client is the same
//! owner: the cap bounds all sessions together.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::super::tasks::Owner;

/// The default of
/// [`HttpOptions::max_sessions_per_token`](super::HttpOptions::max_sessions_per_token): 64.
pub const DEFAULT_MAX_SESSIONS_PER_TOKEN: usize = 64;

/// The default of
/// [`HttpOptions::session_idle`](super::HttpOptions::session_idle): 5
/// minutes.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

const SESSION_ID: &str = "mcp-session-id";

/// Who opened each session, and how it is used, beside rmcp's session
/// manager.
pub(super) struct SessionOwners {
    manager: Arc<LocalSessionManager>,
    held: Mutex<HashMap<Arc<str>, Held>>,
    max_per_token: usize,
}

/// An open session, as the cap sees it.
struct Held {
    owner: Option<Owner>,
    /// Its requests, answers and event streams in progress.
    in_use: usize,
    /// When it was opened, or last used.
    last_used: Instant,
}

/// Whether a new session may be kept.
enum Admitted {
    /// Yes, in place of this session, idle longest, when it took its owner
    /// past the cap.
    Yes(Option<Arc<str>>),
    /// No: its owner is at the cap, and every session it holds is in use.
    Full,
}

impl SessionOwners {
    pub(super) fn new(manager: Arc<LocalSessionManager>, max_per_token: usize) -> Arc<Self> {
        Arc::new(SessionOwners {
            manager,
            held: Mutex::default(),
            max_per_token,
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn owner_of(&self, id: &str) -> Option<Option<Owner>> {
        self.held().get(id).map(|held| held.owner)
    }

    /// Records that `owner` opened `id`; past the cap, in place of its
    /// session idle longest (see the module docs).
    async fn open(&self, id: &str, owner: Option<Owner>) -> Admitted {
        self.forget_ended().await;
        let mut held = self.held();
        let count = held.values().filter(|h| h.owner == owner).count();
        let mut replaced = None;
        if count >= self.max_per_token {
            let idlest = held
                .iter()
                .filter(|(_, h)| h.owner == owner && h.in_use == 0)
                .min_by_key(|(_, h)| h.last_used)
                .map(|(id, _)| id.clone());
            let Some(idlest) = idlest else {
                return Admitted::Full;
            };
            held.remove(&idlest);
            replaced = Some(idlest);
        }
        let opened = Held {
            owner,
            in_use: 0,
            last_used: Instant::now(),
        };
        held.insert(Arc::from(id), opened);
        Admitted::Yes(replaced)
    }

    /// Forgets the sessions rmcp has closed (idle, or ended by the client
    /// going away).
    async fn forget_ended(&self) {
        let known: Vec<Arc<str>> = self.held().keys().cloned().collect();
        let ended: Vec<Arc<str>> = {
            let open = self.manager.sessions.read().await;
            known
                .into_iter()
                .filter(|id| !open.contains_key(&**id))
                .collect()
        };
        let mut held = self.held();
        for id in ended {
            held.remove(&id);
        }
    }

    /// Marks `id` in use until the returned guard is dropped.
    fn hold(self: &Arc<Self>, id: &Arc<str>) -> InUse {
        if let Some(held) = self.held().get_mut(id) {
            held.in_use += 1;
            held.last_used = Instant::now();
        }
        InUse {
            sessions: self.clone(),
            id: id.clone(),
        }
    }
}

/// A session's use in progress: a request, then its answer's body (an
/// event stream may last as long as its client listens).
struct InUse {
    sessions: Arc<SessionOwners>,
    id: Arc<str>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        if let Some(held) = self.sessions.held().get_mut(&self.id) {
            held.in_use = held.in_use.saturating_sub(1);
            held.last_used = Instant::now();
        }
    }
}

/// `response`, its session in use until its body is sent or dropped.
fn while_sent(response: Response, in_use: InUse) -> Response {
    response.map(|body| {
        Body::new(HeldBody {
            body,
            _in_use: in_use,
        })
    })
}

/// A body that keeps its session in use.
struct HeldBody {
    body: Body,
    _in_use: InUse,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Serves a request naming a session only for the session's owner, 404s a
/// DELETE of a session that is not open, and caps each owner's sessions
/// (see the module docs).
pub(super) async fn bind_sessions(
    State(sessions): State<Arc<SessionOwners>>,
    request: Request,
    next: Next,
) -> Response {
    let owner = request.extensions().get::<Owner>().copied();
    let named = request
        .headers()
        .get(SESSION_ID)
        .and_then(|id| id.to_str().ok())
        .map(Arc::<str>::from);
    let method = request.method().clone();
    let Some(id) = named else {
        let response = next.run(request).await;
        return match response.headers().get(SESSION_ID) {
            Some(opened) if method == Method::POST => {
                let opened = opened.to_str().unwrap_or_default().to_owned();
                opened_session(&sessions, opened, owner, response).await
            }
            _ => response,
        };
    };
    // Every session is opened through here: one that is not known is not
    // open, or is another token's.
    if sessions.owner_of(&id) != Some(owner) {
        return not_found();
    }
    if method != Method::DELETE {
        let in_use = sessions.hold(&id);
        return while_sent(next.run(request).await, in_use);
    }
    if !sessions.manager.has_session(&id).await.unwrap_or(false) {
        sessions.held().remove(&id);
        return not_found();
    }
    let response = next.run(request).await;
    if response.status().is_success() {
        sessions.held().remove(&id);
    }
    response
}

/// Keeps the session `id` just opened, in place of its owner's session
/// idle longest when it takes the owner past the cap, or closes it when
/// every session the owner holds is in use.
async fn opened_session(
    sessions: &Arc<SessionOwners>,
    id: String,
    owner: Option<Owner>,
    response: Response,
) -> Response {
    match sessions.open(&id, owner).await {
        Admitted::Yes(replaced) => {
            if let Some(replaced) = replaced {
                tracing::info!(
                    "a new session took the place of the session idle longest of its token, which held {} (the most it may)",
                    sessions.max_per_token
                );
                close(sessions, &replaced).await;
            }
            let in_use = sessions.hold(&Arc::from(id));
            while_sent(response, in_use)
        }
        Admitted::Full => {
            drop(response);
            close(sessions, &id).await;
            (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "Too Many Requests: this token already holds {} sessions, the most it may, and each has a request or an event stream in progress; end one (DELETE) first\n",
                    sessions.max_per_token
                ),
            )
                .into_response()
        }
    }
}

async fn close(sessions: &SessionOwners, id: &str) {
    if let Err(error) = sessions.manager.close_session(&id.into()).await {
        tracing::warn!("cannot close a session past the cap: {error}");
    }
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}
