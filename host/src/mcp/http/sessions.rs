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
//! [`DEFAULT_MAX_SESSIONS_PER_TOKEN`] open at once: a session opened past
//! the cap is closed at once and its `initialize` answered 429. A session
//! ends when its client deletes it, or when rmcp drops it after it has
//! been idle (5 minutes by default). Without tokens, every client is the
//! same owner: the cap bounds all sessions together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::super::tasks::Owner;

/// The default of
/// [`HttpOptions::max_sessions_per_token`](super::HttpOptions::max_sessions_per_token): 64.
pub const DEFAULT_MAX_SESSIONS_PER_TOKEN: usize = 64;

const SESSION_ID: &str = "mcp-session-id";

/// Who opened each session, beside rmcp's session manager.
pub(super) struct SessionOwners {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<HashMap<Arc<str>, Option<Owner>>>,
    max_per_token: usize,
}

impl SessionOwners {
    pub(super) fn new(manager: Arc<LocalSessionManager>, max_per_token: usize) -> Arc<Self> {
        Arc::new(SessionOwners {
            manager,
            owners: Mutex::default(),
            max_per_token,
        })
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Option<Owner>>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `owner` opened `id`, unless that would take it past the
    /// cap: then `false`.
    async fn open(&self, id: &str, owner: Option<Owner>) -> bool {
        let known: Vec<Arc<str>> = self.owners().keys().cloned().collect();
        let ended: Vec<Arc<str>> = {
            let open = self.manager.sessions.read().await;
            known
                .into_iter()
                .filter(|id| !open.contains_key(&**id))
                .collect()
        };
        let mut owners = self.owners();
        for id in ended {
            owners.remove(&id);
        }
        let held = owners.values().filter(|held| **held == owner).count();
        if held >= self.max_per_token {
            return false;
        }
        owners.insert(id.into(), owner);
        true
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
    if sessions.owners().get(&id).copied() != Some(owner) {
        return not_found();
    }
    if method != Method::DELETE {
        return next.run(request).await;
    }
    if !sessions.manager.has_session(&id).await.unwrap_or(false) {
        sessions.owners().remove(&id);
        return not_found();
    }
    let response = next.run(request).await;
    if response.status().is_success() {
        sessions.owners().remove(&id);
    }
    response
}

/// Keeps the session `id` just opened, or closes it when it takes its
/// owner past the cap.
async fn opened_session(
    sessions: &SessionOwners,
    id: String,
    owner: Option<Owner>,
    response: Response,
) -> Response {
    if sessions.open(&id, owner).await {
        return response;
    }
    drop(response);
    if let Err(error) = sessions.manager.close_session(&id.into()).await {
        tracing::warn!("cannot close a session past the cap: {error}");
    }
    (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "Too Many Requests: this token already holds {} sessions, the most it may; end one (DELETE) first\n",
            sessions.max_per_token
        ),
    )
        .into_response()
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}
