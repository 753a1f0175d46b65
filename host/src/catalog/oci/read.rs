//! Everything `pull` reads from a registry, read with a ceiling (the `oci`
//! feature). oci-client reads manifests, token answers and error bodies
//! whole and builds its own HTTP client, with no hook to bound a read; so
//! the reads of a pull (the manifest, the token, the blobs, and each error
//! body) are made here, over reqwest (the version oci-client uses), each
//! body read chunk by chunk and refused as soon as it passes its ceiling:
//! - a manifest: [`MAX_MANIFEST_BYTES`], 4 MiB, the distribution spec's
//!   guidance for what a registry should accept;
//! - a token answer: [`MAX_TOKEN_BYTES`], 64 KiB;
//! - an error body: the first [`MAX_ERROR_BYTES`] (64 KiB) are kept for the
//!   message, and no more is read;
//! - a blob: its descriptor's size.
//!
//! A `Content-Length` past the ceiling is refused before the body is read.
//! Pushing still goes through oci-client.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use http::header::{ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};

use super::Reference;

/// Credentials for a registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// None.
    Anonymous,
    /// A user name and password (or token), sent as HTTP Basic or traded
    /// for a bearer token as the registry asks.
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
    /// A bearer token, sent as it is.
    Bearer(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => write!(f, "Basic({username}, …)"),
            Credentials::Bearer(_) => f.write_str("Bearer(…)"),
        }
    }
}

/// The largest manifest `pull` reads: 4 MiB.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The largest token answer `pull` reads: 64 KiB.
pub const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// How much of an error answer's body is read: 64 KiB.
pub const MAX_ERROR_BYTES: u64 = 64 << 10;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    /// The body passed its ceiling; no more of it was read.
    #[error(
        "the registry's {what} is larger than the {limit} bytes toolcage reads{}; refused without reading more",
        announced.map(|n| format!(" (it announced {n} bytes)")).unwrap_or_default()
    )]
    TooLarge {
        what: &'static str,
        limit: u64,
        announced: Option<u64>,
    },
    /// The registry answered with an error status.
    #[error("the registry answered {code} at {url}: {body}")]
    Status {
        code: u16,
        url: String,
        body: String,
    },
    /// The registry asked for credentials that were not given or not
    /// accepted.
    #[error("{0}")]
    Unauthorized(String),
    /// The request could not be made or its answer not read.
    #[error("{0}")]
    Transport(#[from] reqwest::Error),
    /// The retries ran out of time.
    #[error("{0}")]
    TimedOut(String),
}

impl ReadError {
    /// Whether trying again may help: a 5xx answer, a timeout, a refused
    /// connection.
    pub(super) fn retryable(&self) -> bool {
        match self {
            ReadError::Status { code, .. } => *code >= 500,
            ReadError::Transport(e) => e.is_timeout() || e.is_connect(),
            _ => false,
        }
    }
}

/// Reads from registries with ceilings, keeping each repository's token.
pub(super) struct Reader {
    http: reqwest::Client,
    insecure: Vec<String>,
    /// The `Authorization` that worked, per registry and repository.
    authorizations: Mutex<HashMap<(String, String), String>>,
}

impl Reader {
    pub(super) fn new(insecure: Vec<String>, user_agent: &'static str) -> Reader {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(30))
            .user_agent(user_agent)
            .build()
            .unwrap_or_default();
        Reader {
            http,
            insecure,
            authorizations: Mutex::default(),
        }
    }

    fn base(&self, reference: &Reference) -> (String, String, String) {
        let client = reference.to_client();
        let registry = client.resolve_registry().to_string();
        let scheme = match self.insecure.contains(&registry) {
            true => "http",
            false => "https",
        };
        let repository = client.repository().to_string();
        (
            format!("{scheme}://{registry}/v2/{repository}"),
            registry,
            repository,
        )
    }

    /// The manifest `reference` names (by its digest, else its tag), at
    /// most [`MAX_MANIFEST_BYTES`]; its bytes and the registry's
    /// `Docker-Content-Digest`, if it sent one.
    pub(super) async fn manifest(
        &self,
        reference: &Reference,
        accept: &str,
        credentials: &Credentials,
    ) -> Result<(Vec<u8>, Option<String>), ReadError> {
        let (base, registry, repository) = self.base(reference);
        let client = reference.to_client();
        let name = match client.digest() {
            Some(digest) => digest.to_string(),
            None => client.tag().unwrap_or("latest").to_string(),
        };
        let url = format!("{base}/manifests/{name}");
        let response = self
            .get(&url, accept, &registry, &repository, credentials)
            .await?;
        let header = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        read_into(response, &mut body, "manifest", MAX_MANIFEST_BYTES, |_| {}).await?;
        Ok((body, header))
    }

    /// The blob `digest` of `reference`'s repository, at most `size` bytes,
    /// into `sink` (`report` called with the bytes so far).
    pub(super) async fn blob(
        &self,
        reference: &Reference,
        digest: &str,
        size: u64,
        credentials: &Credentials,
        what: &'static str,
        report: impl FnMut(u64),
    ) -> Result<Vec<u8>, ReadError> {
        let (base, registry, repository) = self.base(reference);
        let url = format!("{base}/blobs/{digest}");
        let response = self
            .get(&url, "*/*", &registry, &repository, credentials)
            .await?;
        let mut body = Vec::new();
        read_into(response, &mut body, what, size, report).await?;
        Ok(body)
    }

    /// GETs `url`, answering the registry's challenge once if it makes one;
    /// a response with a success status.
    async fn get(
        &self,
        url: &str,
        accept: &str,
        registry: &str,
        repository: &str,
        credentials: &Credentials,
    ) -> Result<reqwest::Response, ReadError> {
        let key = (registry.to_string(), repository.to_string());
        let mut authorization = self
            .authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
            .or_else(|| match credentials {
                Credentials::Bearer(token) => Some(format!("Bearer {token}")),
                _ => None,
            });
        for round in 0..2 {
            let mut request = self.http.get(url).header(ACCEPT, accept);
            if let Some(authorization) = &authorization {
                request = request.header(AUTHORIZATION, authorization);
            }
            let response = request.send().await?;
            let status = response.status();
            if status.is_success() {
                if let Some(authorization) = authorization {
                    self.authorizations
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, authorization);
                }
                return Ok(response);
            }
            if status == reqwest::StatusCode::UNAUTHORIZED && round == 0 {
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                error_body(response).await;
                let Some(challenge) = challenge else { break };
                authorization = Some(self.authorize(&challenge, repository, credentials).await?);
                continue;
            }
            let body = error_body(response).await;
            if status == reqwest::StatusCode::UNAUTHORIZED
                || status == reqwest::StatusCode::FORBIDDEN
            {
                return Err(ReadError::Unauthorized(format!(
                    "{} unauthorized at {url} ({}): give credentials (an `auths` entry in Docker's config.json, or --registry-user with --registry-password-stdin)",
                    status.as_u16(),
                    body.trim()
                )));
            }
            return Err(ReadError::Status {
                code: status.as_u16(),
                url: url.to_string(),
                body: body.trim().to_string(),
            });
        }
        Err(ReadError::Unauthorized(format!(
            "401 unauthorized at {url}: give credentials (an `auths` entry in Docker's config.json, or --registry-user with --registry-password-stdin)"
        )))
    }

    /// The `Authorization` that answers `challenge` (`WWW-Authenticate`):
    /// Basic credentials as they are, or a bearer token from the realm it
    /// names (the Docker token flow), the answer read with a ceiling.
    async fn authorize(
        &self,
        challenge: &str,
        repository: &str,
        credentials: &Credentials,
    ) -> Result<String, ReadError> {
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let basic = match credentials {
            Credentials::Basic { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            _ => None,
        };
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.ok_or_else(|| {
                ReadError::Unauthorized(
                    "401 unauthorized: the registry asks for credentials: give them (an `auths` entry in Docker's config.json, or --registry-user with --registry-password-stdin)".into(),
                )
            });
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(ReadError::Unauthorized(format!(
                "401 unauthorized: the registry asks for `{scheme}` authentication, which toolcage does not speak"
            )));
        }
        let params = challenge_params(params);
        let realm = params.get("realm").ok_or_else(|| {
            ReadError::Unauthorized("the registry's bearer challenge names no realm".into())
        })?;
        let mut query = vec![("scope", format!("repository:{repository}:pull"))];
        if let Some(service) = params.get("service") {
            query.push(("service", service.clone()));
        }
        let url = reqwest::Url::parse_with_params(realm, &query).map_err(|e| {
            ReadError::Unauthorized(format!(
                "the registry's token realm `{realm}` is no URL: {e}"
            ))
        })?;
        let mut request = self.http.get(url);
        if let Some(basic) = &basic {
            request = request.header(AUTHORIZATION, basic);
        }
        let response = request.send().await?;
        if !response.status().is_success() {
            let status = response.status();
            let body = error_body(response).await;
            return Err(ReadError::Unauthorized(format!(
                "unauthorized: the token service at {realm} answered {}: {}",
                status.as_u16(),
                body.trim()
            )));
        }
        let mut body = Vec::new();
        read_into(response, &mut body, "token answer", MAX_TOKEN_BYTES, |_| {}).await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body).map_err(|e| {
            ReadError::Unauthorized(format!(
                "the token service at {realm} answered no token: {e}"
            ))
        })?;
        let token = token.token.or(token.access_token).ok_or_else(|| {
            ReadError::Unauthorized(format!("the token service at {realm} answered no token"))
        })?;
        Ok(format!("Bearer {token}"))
    }
}

/// Reads `response`'s body into `body`, refusing it (and reading no more)
/// past `limit` bytes.
async fn read_into(
    mut response: reqwest::Response,
    body: &mut Vec<u8>,
    what: &'static str,
    limit: u64,
    mut report: impl FnMut(u64),
) -> Result<(), ReadError> {
    let announced = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .or(response.content_length());
    if announced.is_some_and(|n| n > limit) {
        return Err(ReadError::TooLarge {
            what,
            limit,
            announced,
        });
    }
    body.reserve(announced.unwrap_or(0) as usize);
    while let Some(chunk) = response.chunk().await? {
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(ReadError::TooLarge {
                what,
                limit,
                announced: None,
            });
        }
        body.extend_from_slice(&chunk);
        report(body.len() as u64);
    }
    Ok(())
}

/// The first [`MAX_ERROR_BYTES`] of an error answer's body, as text; the
/// rest is not read.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = (MAX_ERROR_BYTES as usize).saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BYTES as usize {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// A challenge's `key="value"` parameters.
fn challenge_params(text: &str) -> HashMap<String, String> {
    let mut params = HashMap::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        params.insert(key, value.to_string());
        rest = next.trim_start().trim_start_matches(',');
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: Vec<u8>, length: Option<u64>) -> reqwest::Response {
        let mut response = http::Response::new(body);
        if let Some(length) = length {
            response
                .headers_mut()
                .insert(http::header::CONTENT_LENGTH, length.into());
        }
        reqwest::Response::from(response)
    }

    #[tokio::test]
    async fn a_body_past_its_ceiling_is_refused() {
        let mut body = Vec::new();
        read_into(
            answer(vec![1; 100], None),
            &mut body,
            "manifest",
            100,
            |_| {},
        )
        .await
        .unwrap();
        assert_eq!(body.len(), 100);
        let mut body = Vec::new();
        let error = read_into(
            answer(vec![1; 101], None),
            &mut body,
            "manifest",
            100,
            |_| {},
        )
        .await
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("manifest is larger than the 100 bytes"),
            "{error}"
        );
        // An announced length past the ceiling is refused before reading.
        let mut body = Vec::new();
        let error = read_into(
            answer(vec![1; 10], Some(1 << 30)),
            &mut body,
            "token answer",
            100,
            |_| {},
        )
        .await
        .unwrap_err();
        assert!(
            error.to_string().contains("announced 1073741824"),
            "{error}"
        );
        assert!(body.is_empty());
        let long = error_body(answer(vec![b'x'; 1 << 20], None)).await;
        assert_eq!(long.len() as u64, MAX_ERROR_BYTES);
    }

    #[test]
    fn reads_a_bearer_challenge() {
        let params = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(params["realm"], "https://auth.example/token");
        assert_eq!(params["service"], "registry.example");
        assert_eq!(params["scope"], "repository:a/b:pull,push");
    }
}
