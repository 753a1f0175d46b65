//! Talking to registries (the `oci` feature): pull, push and sign, with
//! retries, credentials and progress.
//!
//! What a pull reads (manifests, token answers, blobs, error bodies) is
//! read by [`super::read`], each with a ceiling, so a hostile registry
//! cannot make it use unbounded memory; pushing goes through oci-client.
//! Every digest received is checked (each manifest against the pin and the
//! `Docker-Content-Digest` header, each blob against its descriptor's
//! digest and size) before anything is stored, and plain HTTP is used only
//! for the registries the operator lists as insecure (loopback included).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

use super::layout::{
    ACCEPTED_MANIFESTS, MANIFEST_MEDIA_TYPE, Manifest, component_artifact, now_rfc3339,
};
use super::pulled::verify_signature;
use super::read::{Credentials, ReadError, Reader};
use super::signature::{payload, signature_layers, signature_manifest};
use super::{Digest, LockEntry, OciError, Reference, SigningKey, Store, TrustPolicy};
use crate::sandbox::content::MAX_COMPONENT_BYTES;

/// The `User-Agent` of every request.
const USER_AGENT: &str = concat!("toolcage/", env!("CARGO_PKG_VERSION"));
/// The most attempts of one request, on a 5xx answer or a timeout.
const ATTEMPTS: u32 = 3;
/// How long one request may take, its retries included; a download gets a
/// second more per MiB (at least 1 MiB/s, besides the 30 s a read may stall).
const REQUEST_TIME: Duration = Duration::from_secs(60);

/// How far a download has come.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// What is being pulled.
    pub reference: &'a Reference,
    /// Bytes received.
    pub done: u64,
    /// Bytes in all.
    pub total: u64,
}

type ProgressFn = Arc<dyn Fn(Progress<'_>) + Send + Sync>;

/// How a [`Client`] reaches registries. Default: HTTPS only, credentials
/// from Docker's `config.json` (`$DOCKER_CONFIG`, else `~/.docker`) where it
/// has some for the registry, else anonymous; no progress reports.
#[derive(Clone, Default)]
pub struct ClientOptions {
    insecure: Vec<String>,
    credentials: Vec<(String, Credentials)>,
    docker_config: Option<PathBuf>,
    progress: Option<ProgressFn>,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("insecure", &self.insecure)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl ClientOptions {
    /// Speaks plain HTTP to `registry` (`host:port`), as given in the
    /// config's `[oci] insecure_registries`. Loopback is not trusted
    /// implicitly. Default: none.
    pub fn insecure_registry(mut self, registry: impl Into<String>) -> Self {
        self.insecure.push(registry.into());
        self
    }

    /// Uses `credentials` for `registry` (`host:port`, as references name
    /// it), instead of Docker's `config.json`. They go to that registry (and
    /// the token service it names) only.
    pub fn credentials(mut self, registry: impl Into<String>, credentials: Credentials) -> Self {
        self.credentials.push((registry.into(), credentials));
        self
    }

    /// Reads credentials from this directory's `config.json` instead of
    /// `$DOCKER_CONFIG` or `~/.docker`.
    pub fn docker_config(mut self, dir: impl Into<PathBuf>) -> Self {
        self.docker_config = Some(dir.into());
        self
    }

    /// Calls `report` as a component downloads (at most every 64 KiB).
    pub fn progress(mut self, report: impl Fn(Progress<'_>) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(report));
        self
    }
}

/// Pulls, pushes and signs components in OCI registries.
pub struct Client {
    inner: oci_client::Client,
    /// Reads what a pull reads, each with a ceiling.
    reader: Reader,
    options: ClientOptions,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client with `options`.
    pub fn new(options: ClientOptions) -> Client {
        // reqwest's TLS takes rustls's process-wide provider: ring, as for
        // tools' own requests. One already installed is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(options.insecure.clone()),
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            user_agent: USER_AGENT,
            ..ClientConfig::default()
        };
        Client {
            inner: oci_client::Client::new(config),
            reader: Reader::new(options.insecure.clone(), USER_AGENT),
            options,
        }
    }

    /// The credentials for `registry`.
    fn credentials(&self, registry: &str) -> Credentials {
        let given = self.options.credentials.iter().find(|(r, _)| r == registry);
        match given {
            Some((_, credentials)) => credentials.clone(),
            None => docker_credentials(self.options.docker_config.clone(), registry)
                .unwrap_or(Credentials::Anonymous),
        }
    }

    /// The credentials for `registry`, as oci-client takes them.
    fn auth(&self, registry: &str) -> RegistryAuth {
        match self.credentials(registry) {
            Credentials::Anonymous => RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => RegistryAuth::Basic(username, password),
            Credentials::Bearer(token) => RegistryAuth::Bearer(token),
        }
    }

    /// Fetches `reference`'s manifest (at most [`super::MAX_MANIFEST_BYTES`]) and
    /// checks its digest against the pin and the registry's header; its
    /// bytes and digest.
    async fn manifest(&self, reference: &Reference) -> Result<(Vec<u8>, Digest), OciError> {
        let credentials = self.credentials(reference.registry());
        let accept = ACCEPTED_MANIFESTS.join(", ");
        let (bytes, header) = retry(REQUEST_TIME, || {
            self.reader.manifest(reference, &accept, &credentials)
        })
        .await
        .map_err(|e| read_error(reference, "the manifest", e))?;
        let digest = Digest::of(&bytes);
        if let Some(pin) = reference.digest()
            && pin != &digest
        {
            return Err(OciError::Pinned {
                reference: reference.to_string(),
                pinned: pin.to_string(),
                actual: digest.to_string(),
            });
        }
        if let Some(header) = header
            && header != digest.as_str()
        {
            return Err(OciError::HeaderDigest {
                reference: reference.to_string(),
                what: "manifest",
                header,
                actual: digest.to_string(),
            });
        }
        Ok((bytes, digest))
    }

    /// Resolves `reference` to its manifest's digest, checked.
    pub async fn resolve(&self, reference: &Reference) -> Result<Digest, OciError> {
        Ok(self.manifest(reference).await?.1)
    }

    /// Pulls `reference` into `store`: resolves it (to `locked`'s digest
    /// when given, else the reference's pin or its tag), checks every
    /// digest, the artifact's layout and, where `trust` has a key for it,
    /// its signature; and returns the lock entry that records it. Nothing
    /// is stored unless every check passed.
    pub async fn pull(
        &self,
        reference: &Reference,
        locked: Option<&Digest>,
        trust: &TrustPolicy,
        store: &Store,
    ) -> Result<LockEntry, OciError> {
        let target = match locked {
            Some(digest) => reference.with_digest(digest.clone()),
            None => reference.clone(),
        };
        let (manifest_bytes, digest) = self.manifest(&target).await?;
        let manifest = Manifest::parse(reference, &manifest_bytes)?;
        let layer = manifest.component_layer(reference)?.clone();
        let component: Digest = layer.digest.parse().expect("checked by component_layer");
        if layer.size > MAX_COMPONENT_BYTES {
            return Err(OciError::Layout {
                reference: reference.to_string(),
                reason: format!(
                    "its component is {} bytes; the most toolcage loads is {MAX_COMPONENT_BYTES}",
                    layer.size
                ),
            });
        }
        let bytes = match store.read(&component) {
            Ok(Some(bytes)) => bytes,
            _ => self.blob(reference, "component layer", &layer).await?,
        };

        // The signature, where a key covers the reference.
        let mut signature = None;
        let mut signature_blobs = Vec::new();
        if let Some(key) = trust.key_for(reference) {
            match self.signature(reference, &digest).await? {
                Some((manifest_bytes, layers)) => {
                    let signed: Vec<(Vec<u8>, Option<String>)> = layers
                        .iter()
                        .map(|(_, payload, signature)| (payload.clone(), signature.clone()))
                        .collect();
                    verify_signature(reference, key, &digest, &signed)?;
                    for (payload_digest, payload, _) in layers {
                        signature_blobs.push((payload_digest, payload));
                    }
                    let signature_digest = Digest::of(&manifest_bytes);
                    signature_blobs.push((signature_digest.clone(), manifest_bytes));
                    signature = Some((signature_digest, format!("key {}", key.key().id())));
                }
                None if key.requires_signature() => {
                    return Err(OciError::Signature {
                        reference: reference.to_string(),
                        reason: format!(
                            "no signature: the registry has no {} for {digest}, and the trust key {} for `{}` requires one",
                            digest.signature_tag(),
                            key.source(),
                            key.prefix()
                        ),
                    });
                }
                None => {}
            }
        }

        for (blob_digest, blob) in signature_blobs {
            store.write(&blob_digest, &blob)?;
        }
        store.write(&component, &bytes)?;
        store.write(&digest, &manifest_bytes)?;
        let (signature, signed_by) = signature.unzip();
        Ok(LockEntry {
            reference: reference.to_string(),
            digest,
            component,
            size: layer.size,
            signature,
            signed_by,
            pulled: now_rfc3339(),
        })
    }

    /// Downloads the component `layer` of `reference`, checked against its
    /// digest and size.
    async fn blob(
        &self,
        reference: &Reference,
        what: &'static str,
        layer: &super::layout::BlobDescriptor,
    ) -> Result<Vec<u8>, OciError> {
        let credentials = self.credentials(reference.registry());
        let time = REQUEST_TIME + Duration::from_secs(layer.size >> 20);
        let bytes = retry(time, || {
            let mut reported = 0;
            let report = move |done: u64| {
                if let Some(progress) = &self.options.progress
                    && (done - reported >= 64 << 10 || done == layer.size)
                {
                    progress(Progress {
                        reference,
                        done,
                        total: layer.size,
                    });
                    reported = done;
                }
            };
            self.reader.blob(
                reference,
                &layer.digest,
                layer.size,
                &credentials,
                what,
                report,
            )
        })
        .await
        .map_err(|e| read_error(reference, what, e))?;
        let actual = Digest::of(&bytes);
        if actual.as_str() != layer.digest || bytes.len() as u64 != layer.size {
            return Err(OciError::Digest {
                reference: reference.to_string(),
                what,
                expected: format!("{} ({} bytes)", layer.digest, layer.size),
                actual: format!("{actual} ({} bytes)", bytes.len()),
            });
        }
        Ok(bytes)
    }

    /// The signature image for `digest` in `reference`'s repository, if
    /// there is one: its manifest, and each payload's digest, bytes
    /// (checked against the digest) and signature. A payload that cannot be
    /// fetched is left out (another may still verify).
    #[allow(clippy::type_complexity)]
    async fn signature(
        &self,
        reference: &Reference,
        digest: &Digest,
    ) -> Result<Option<(Vec<u8>, Vec<(Digest, Vec<u8>, Option<String>)>)>, OciError> {
        let signatures = reference.at_tag(digest.signature_tag());
        let manifest_bytes = match self.manifest(&signatures).await {
            Ok((bytes, _)) => bytes,
            Err(OciError::Registry { reason, .. }) if reason.starts_with(NOT_FOUND) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let manifest = Manifest::parse(&signatures, &manifest_bytes)?;
        let mut layers = Vec::new();
        for (payload_digest, signature) in signature_layers(&manifest) {
            let descriptor = super::layout::BlobDescriptor {
                media_type: super::signature::PAYLOAD_MEDIA_TYPE.into(),
                digest: payload_digest.to_string(),
                size: manifest
                    .layers
                    .iter()
                    .find(|l| l.digest == payload_digest.as_str())
                    .map_or(0, |l| l.size.min(1 << 20)),
                annotations: BTreeMap::new(),
            };
            match self
                .blob(&signatures, "signature payload", &descriptor)
                .await
            {
                Ok(payload) => layers.push((payload_digest, payload, signature)),
                Err(error) => tracing::warn!("a signature layer is left out: {error}"),
            }
        }
        Ok(Some((manifest_bytes, layers)))
    }

    /// Publishes `component` as `reference` in the CNCF Wasm layout, with
    /// `annotations` on its manifest; the manifest's digest.
    pub async fn push(
        &self,
        component: &[u8],
        reference: &Reference,
        annotations: BTreeMap<String, String>,
    ) -> Result<Digest, OciError> {
        let (manifest, config) = component_artifact(component, annotations, &now_rfc3339());
        self.push_image(reference, &[component, &config], manifest)
            .await
    }

    /// Pushes `blobs`, then `manifest` as `reference`.
    async fn push_image(
        &self,
        reference: &Reference,
        blobs: &[&[u8]],
        manifest: Vec<u8>,
    ) -> Result<Digest, OciError> {
        let target = reference.to_client();
        let auth = self.auth(reference.registry());
        self.inner
            .store_auth_if_needed(target.resolve_registry(), &auth)
            .await;
        for blob in blobs {
            let digest = Digest::of(blob);
            let exists = self
                .inner
                .blob_exists(&target, digest.as_str())
                .await
                .unwrap_or(false);
            if !exists {
                let blob = bytes::Bytes::copy_from_slice(blob);
                retry(REQUEST_TIME, || {
                    self.inner.push_blob(&target, blob.clone(), digest.as_str())
                })
                .await
                .map_err(|e| registry_error(reference, "pushing a blob", e))?;
            }
        }
        let digest = Digest::of(&manifest);
        let manifest = bytes::Bytes::from(manifest);
        retry(REQUEST_TIME, || {
            self.inner.push_manifest_raw(
                &target,
                manifest.clone(),
                http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
            )
        })
        .await
        .map_err(|e| registry_error(reference, "pushing the manifest", e))?;
        Ok(digest)
    }

    /// Signs the manifest `reference` pins (`@sha256:…`, such as
    /// [`push`](Self::push) returned) with `key`, as `cosign sign --key`
    /// does: the simple-signing payload for that digest in that repository,
    /// pushed beside it under `sha256-<hex>.sig`, added to the signatures
    /// already there. A reference without a digest is refused: its tag
    /// could have moved since the push, and the signer would sign whatever
    /// the registry says it names now. Returns the digest signed and the
    /// signature's reference.
    pub async fn sign(
        &self,
        reference: &Reference,
        key: &SigningKey,
    ) -> Result<(Digest, Reference), OciError> {
        if reference.digest().is_none() {
            return Err(OciError::Reference {
                reference: reference.to_string(),
                reason: "sign a digest (oci://REGISTRY/REPO@sha256:…, as push prints it), not a tag: a tag can move between push and sign".into(),
            });
        }
        let (_, digest) = self.manifest(reference).await?;
        let signatures = reference.at_tag(digest.signature_tag());
        let existing = match self.manifest(&signatures).await {
            Ok((bytes, _)) => Some(Manifest::parse(&signatures, &bytes)?),
            Err(OciError::Registry { reason, .. }) if reason.starts_with(NOT_FOUND) => None,
            Err(e) => return Err(e),
        };
        let payload = payload(reference, &digest);
        let signature = key.sign(&payload);
        let (manifest, config) = signature_manifest(existing, &payload, &signature);
        self.push_image(&signatures, &[&payload, &config], manifest)
            .await?;
        Ok((digest, signatures))
    }
}

/// How a "not found" registry error begins.
const NOT_FOUND: &str = "not found";

/// An oci-client error as toolcage says it.
fn registry_error(reference: &Reference, what: &str, error: OciDistributionError) -> OciError {
    let reason = match &error {
        OciDistributionError::UnauthorizedError { url } => format!(
            "{what}: 401 unauthorized at {url}: give credentials (an `auths` entry in Docker's config.json, or --registry-user with --registry-password-stdin)"
        ),
        OciDistributionError::AuthenticationFailure(message) => {
            format!("{what}: authentication failed: {message}")
        }
        OciDistributionError::RegistryError { envelope, url }
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) =>
        {
            format!("{NOT_FOUND}: {what} is not in the registry ({url})")
        }
        OciDistributionError::RegistryError { envelope, url }
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            format!(
                "{what}: unauthorized at {url} ({envelope}): give credentials (an `auths` entry in Docker's config.json, or --registry-user with --registry-password-stdin)"
            )
        }
        OciDistributionError::ImageManifestNotFoundError(message) => {
            format!("{NOT_FOUND}: {what} is not in the registry ({message})")
        }
        OciDistributionError::ServerError { code: 404, url, .. } => {
            format!("{NOT_FOUND}: {what} is not in the registry ({url})")
        }
        OciDistributionError::ServerError { code, url, message } => {
            format!(
                "{what}: the registry answered {code} at {url}: {}",
                message.trim()
            )
        }
        OciDistributionError::RequestError(e) => {
            let mut reason = format!("{what}: cannot reach the registry: {e}");
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                reason.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            reason
        }
        e => format!("{what}: {e}"),
    };
    OciError::Registry {
        reference: reference.to_string(),
        reason,
    }
}

/// A read's error as toolcage says it.
fn read_error(reference: &Reference, what: &str, error: ReadError) -> OciError {
    let reason = match error {
        ReadError::TooLarge {
            what: body,
            limit,
            announced,
        } => {
            return OciError::TooLarge {
                reference: reference.to_string(),
                what: body,
                limit,
                announced,
            };
        }
        ReadError::Status { code: 404, url, .. } => {
            format!("{NOT_FOUND}: {what} is not in the registry ({url})")
        }
        ReadError::Status { code, url, body } => {
            format!("{what}: the registry answered {code} at {url}: {body}")
        }
        ReadError::Unauthorized(message) => format!("{what}: {message}"),
        ReadError::Transport(e) => {
            let mut reason = format!("{what}: cannot reach the registry: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                reason.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            reason
        }
        ReadError::TimedOut(message) => format!("{what}: {message}"),
    };
    OciError::Registry {
        reference: reference.to_string(),
        reason,
    }
}

/// An error that [`retry`] may try again after.
trait Retryable {
    fn retryable(&self) -> bool;
    fn timed_out(message: String) -> Self;
}

impl Retryable for OciDistributionError {
    fn retryable(&self) -> bool {
        match self {
            OciDistributionError::ServerError { code, .. } => *code >= 500,
            OciDistributionError::RequestError(e) => e.is_timeout() || e.is_connect(),
            _ => false,
        }
    }

    fn timed_out(message: String) -> Self {
        OciDistributionError::GenericError(Some(message))
    }
}

impl Retryable for ReadError {
    fn retryable(&self) -> bool {
        ReadError::retryable(self)
    }

    fn timed_out(message: String) -> Self {
        ReadError::TimedOut(message)
    }
}

/// Runs `attempt` up to [`ATTEMPTS`] times while it fails with a 5xx answer,
/// a timeout or a refused connection, backing off, within `time` in all.
async fn retry<T, E, F, Fut>(time: Duration, mut attempt: F) -> Result<T, E>
where
    E: Retryable + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + time;
    let mut backoff = Duration::from_millis(500);
    let mut tries = 0;
    loop {
        tries += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let error = match tokio::time::timeout(left, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => error,
            Err(_) => {
                return Err(E::timed_out(format!(
                    "the registry did not answer within {} s ({tries} attempts)",
                    time.as_secs()
                )));
            }
        };
        if !error.retryable() || tries >= ATTEMPTS || Instant::now() + backoff >= deadline {
            return Err(error);
        }
        tracing::info!("registry request failed ({error}); trying again in {backoff:?}");
        tokio::time::sleep(backoff).await;
        backoff *= 2;
    }
}

/// Credentials for `registry` from Docker's `config.json`: its `auths`
/// entry (`auth`, or `username` and `password`, or `registrytoken`).
fn docker_credentials(dir: Option<PathBuf>, registry: &str) -> Option<Credentials> {
    let dir = dir
        .or_else(|| std::env::var_os("DOCKER_CONFIG").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker")))?;
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let config: serde_json::Value = serde_json::from_str(&text).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let host = |key: &str| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().unwrap_or(key).to_string()
    };
    let entry = auths.iter().find(|(key, _)| host(key) == registry)?.1;
    let text = |field: &str| {
        entry
            .get(field)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    if let Some(token) = text("registrytoken") {
        return Some(Credentials::Bearer(token.to_string()));
    }
    if let Some(auth) = text("auth") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (username, password) = decoded.split_once(':')?;
        return Some(Credentials::Basic {
            username: username.to_string(),
            password: password.to_string(),
        });
    }
    Some(Credentials::Basic {
        username: text("username")?.to_string(),
        password: text("password")?.to_string(),
    })
}
