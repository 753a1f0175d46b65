//! The first-wins tool registry, and loading components into it.
//!
//! Threat model: a tools directory may hold a component written to hijack a
//! well-known tool name (advisory GHSA-67q9-58vj-32qx shipped exactly this
//! fix in another agent's registry). A name registered first keeps its owner
//! for the registry's life: a later tool with the same name is not registered,
//! is reported as shadowed, and is logged as a warning naming both
//! components. Nothing replaces or removes a registered tool. Loading is
//! equally defensive: a bad file (not wasm, a core module, a missing export,
//! an unknown import, a trapping or looping `describe()`, an invalid
//! descriptor) is skipped with a diagnostic, and the other files still load.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::component::{Component, Source};
use super::error::{Error, LoadError};
use super::grants::{ComponentPolicy, Policy};
use super::interpreter::CodeMode;
use super::oci::{OciError, Pulled, Reference};
use super::schema::{self, CheckedTool};
use super::table::{Entry, Provider, ToolInfo, ToolTable};
use super::upstream::UpstreamTool;
use crate::sandbox::compile::ComponentError;
use crate::sandbox::content::{Content, ContentError};
use crate::sandbox::engine::Runtime;
use crate::sandbox::limits::{LimitOverrides, Limits};
use crate::sandbox::mount::{self, Mount};
use crate::sandbox::net::{Cidr, Grant, NetShared, Resolve, SystemResolver};
use crate::sandbox::outcome::with_stderr;
use crate::sandbox::secrets::{Injection, Secret, Secrets};
use crate::sandbox::slots::loading_slots;
use crate::sandbox::{
    self, Compiled, Files, Grants, GuestReturn, Invocation, Observer, Sandbox, SlotShape,
    WitDescriptor,
};

/// The most tools one component may declare: more is a bug or an attempt to
/// flood the registry and a model's context.
pub const MAX_TOOLS_PER_COMPONENT: usize = 256;

/// The tools of every loaded component, by name. Load with `&mut self`, then
/// share it (for example in an `Arc`) and call from any number of tasks:
/// `Registry` is `Send + Sync`, and each call runs in its own sandbox.
pub struct Registry {
    runtime: Runtime,
    policy: Policy,
    tools: Arc<ToolTable>,
}

/// A compiled component whose `describe()` checked out, with an entry for
/// each tool it declares (registered or not).
#[derive(Clone)]
pub(crate) struct Described {
    pub component: Arc<Component>,
    pub entries: Vec<Arc<Entry>>,
}

/// What loading one component did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    /// The component's name (the file stem).
    pub component: String,
    /// Where it came from.
    pub source: Source,
    /// Tools registered under this component, in its `describe()` order.
    pub registered: Vec<String>,
    /// Tools not registered because an earlier component owns the name.
    pub shadowed: Vec<Shadowed>,
    /// Why the whole component was skipped, if it was.
    #[serde(serialize_with = "serialize_error")]
    pub error: Option<LoadError>,
}

impl FileReport {
    /// Whether the component loaded (even if some of its names were shadowed).
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

fn serialize_error<S: serde::Serializer>(
    error: &Option<LoadError>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match error {
        Some(error) => s.collect_str(error),
        None => s.serialize_none(),
    }
}

/// A tool name that was already taken.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Shadowed {
    /// The name.
    pub tool: String,
    /// The component that owns it.
    pub owner: String,
}

/// Builds a [`Registry`]. Everything is denied until granted:
///
/// - limits: [`Limits::default()`] for every component (fuel 10 billion,
///   timeout 30 s, memory 256 MiB, output 1 MiB, logs 64 KiB per stream,
///   stack 1 MiB);
/// - mounts: none, so tools see no filesystem;
/// - network: none, so every request a tool makes is refused; grants
///   ([`allow_net`](Self::allow_net)) let it reach public addresses they
///   match, and special ones (loopback, private...) only when a grant names
///   the address or [`allow_private`](Self::allow_private) covers it;
/// - name lookup: the operating system's ([`SystemResolver`]); TLS roots:
///   the web PKI's;
/// - secrets: none, and no injection ([`secret`](Self::secret),
///   [`component_inject`](Self::component_inject)); while any are held,
///   every response a tool receives and everything a call hands back is
///   redacted of them;
/// - settings (`wasi:config/store`): none ([`component_setting`](Self::component_setting));
/// - calls to other tools (`toolcage:tool/tools`): none, so each is refused
///   ([`calls`](Self::calls), [`component_calls`](Self::component_calls)),
///   except those of code mode's `run_code` ([`code_mode`](Self::code_mode)),
///   whose scripts may call every tool, each under the operator's rules as
///   a direct call is;
/// - environment, arguments, stdin: none, and not configurable per tool;
/// - runtime: one of its own, [`Runtime::new()`], allowing
///   [`DEFAULT_MAX_CONCURRENT_CALLS`](crate::DEFAULT_MAX_CONCURRENT_CALLS)
///   calls at once.
#[derive(Debug, Default)]
pub struct RegistryBuilder {
    policy: Policy,
    runtime: Option<Runtime>,
}

impl RegistryBuilder {
    /// What the component named `component` gets beyond the shared grants.
    fn component(&mut self, component: impl Into<String>) -> &mut ComponentPolicy {
        self.policy.components.entry(component.into()).or_default()
    }

    /// Limits for every component. Default: [`Limits::default()`].
    pub fn limits(mut self, limits: Limits) -> Self {
        self.policy.limits = limits;
        self
    }

    /// Lends a directory to every component. Default: no mounts.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.policy.mounts.push(mount);
        self
    }

    /// Overrides some limits for the component named `component` (a file
    /// stem). Default: none.
    pub fn component_limits(
        mut self,
        component: impl Into<String>,
        limits: LimitOverrides,
    ) -> Self {
        let policy = self.component(component);
        policy.limits = policy.limits.then(&limits);
        self
    }

    /// Lends a directory to the component named `component` only, in
    /// addition to the shared mounts (replacing a shared mount at the same
    /// guest path). Default: none.
    pub fn component_mount(mut self, component: impl Into<String>, mount: Mount) -> Self {
        self.component(component).mounts.push(mount);
        self
    }

    /// Lets every component reach what `grant` matches. Default: nothing.
    pub fn allow_net(mut self, grant: Grant) -> Self {
        self.policy.allow_net.push(grant);
        self
    }

    /// Lets the component named `component` reach what `grant` matches, in
    /// addition to the shared grants. Default: nothing.
    pub fn component_allow_net(mut self, component: impl Into<String>, grant: Grant) -> Self {
        self.component(component).allow_net.push(grant);
        self
    }

    /// Lets granted names of every component resolve into `range`, a
    /// private or otherwise special range (an internal service's). Default:
    /// none; a granted name that resolves to a special address is refused.
    pub fn allow_private(mut self, range: Cidr) -> Self {
        self.policy.allow_private.push(range);
        self
    }

    /// Like [`allow_private`](Self::allow_private), for one component.
    pub fn component_allow_private(mut self, component: impl Into<String>, range: Cidr) -> Self {
        self.component(component).allow_private.push(range);
        self
    }

    /// Trusts the CA certificates in `path` (PEM) for tools' HTTPS requests,
    /// besides the web PKI roots: for internal services. Read when the
    /// registry is built. Default: the web PKI roots only.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.policy.net.ca_files.push(path.into());
        self
    }

    /// Holds `secret` for injections ([`component_inject`](Self::component_inject)),
    /// adding it to the registry's [`Secrets`]. Default: no secrets.
    pub fn secret(self, secret: Secret) -> Self {
        self.policy.secrets.set(secret);
        self
    }

    /// Takes the secrets from `secrets`, a handle the embedder keeps to
    /// replace them (a rotated token) while tools run; secrets given with
    /// [`secret`](Self::secret) before are dropped. Default: a set of the
    /// registry's own, empty.
    pub fn secrets(mut self, secrets: Secrets) -> Self {
        self.policy.secrets = secrets;
        self
    }

    /// Adds a secret to the requests of the component named `component`
    /// that `injection` matches; redacts every secret from what comes back.
    /// The secrets it uses must be held, and a grant of the component
    /// ([`allow_net`](Self::allow_net), [`component_allow_net`](Self::component_allow_net))
    /// must let its URL out, or [`build`](Self::build) fails. Default: none.
    pub fn component_inject(mut self, component: impl Into<String>, injection: Injection) -> Self {
        self.component(component).inject.push(injection);
        self
    }

    /// Sets `key` to `value` in the settings the component named `component`
    /// reads through `wasi:config/store`. Not for secrets: a value that
    /// references one (`{{ secrets.NAME }}`) fails [`build`](Self::build).
    /// Default: no settings.
    pub fn component_setting(
        mut self,
        component: impl Into<String>,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.component(component)
            .settings
            .insert(key.into(), value.into());
        self
    }

    /// Lets every component call the tools whose names match `pattern` (a
    /// tool name in which `*` stands for any run of characters), through
    /// `toolcage:tool/tools`. Each such call takes the one call path, with
    /// the callee's own grants. Default: none, so every call a component
    /// makes to a tool is refused, naming the missing grant. A pattern that
    /// is not a tool name pattern fails [`build`](Self::build).
    pub fn calls(mut self, pattern: impl Into<String>) -> Self {
        self.policy.calls.push(pattern.into());
        self
    }

    /// Lets the component named `component` call the tools whose names
    /// match `pattern`, as [`calls`](Self::calls) does for every one.
    /// Default: none.
    pub fn component_calls(
        mut self,
        component: impl Into<String>,
        pattern: impl Into<String>,
    ) -> Self {
        self.component(component).calls.push(pattern.into());
        self
    }

    /// Code mode ([`CodeMode`]): whether [`Registry::load_bundled`]
    /// registers `run_code` (with `search_tools` and `describe_tool`), what
    /// its scripts may call and how much they may print. Its calls are
    /// nested calls, under the operator's rules and the callee's grants, so
    /// code mode grants nothing a direct call would not get. Default:
    /// [`CodeMode::default()`]: on, every tool (`*`), 64 KiB of print.
    pub fn code_mode(mut self, code_mode: CodeMode) -> Self {
        self.policy.code_mode = code_mode;
        self
    }

    /// Resolves the names tools' requests go to with `resolver`. Default:
    /// [`SystemResolver`], the operating system's.
    pub fn resolver(mut self, resolver: impl Resolve) -> Self {
        self.policy.net.resolver = Some(Arc::new(resolver));
        self
    }

    /// Loads `oci://` references from what `toolcage pull` fetched: the
    /// lock, the store and the trust policy in `pulled`. Default: none, and
    /// a reference fails to load, saying so.
    pub fn pulled(mut self, pulled: Pulled) -> Self {
        self.policy.pulled = Some(Arc::new(pulled));
        self
    }

    /// Compiles and runs components on `runtime`, sharing its engines and
    /// compiled-component cache. Default: a runtime of the registry's own.
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Checks every mount and opens its directory, to be held for the
    /// registry's life, and starts the engine. A read-write mount that
    /// contains the runtime's disk cache is refused: a tool could write
    /// native code there that toolcage would run.
    pub fn build(self) -> Result<Registry, Error> {
        let mut policy = self.policy;
        policy.check_secrets()?;
        policy.check_calls()?;
        let runtime = match self.runtime {
            Some(runtime) => runtime,
            None => Runtime::new()?,
        };
        let mounts: Vec<&Mount> = policy
            .mounts
            .iter()
            .chain(policy.components.values().flat_map(|c| &c.mounts))
            .collect();
        mount::refuse_redirections(&mounts)?;
        if let Some(cache) = runtime.disk_cache_dir() {
            mount::refuse_writable_cache(&mounts, cache)?;
        }
        let mut held = HashMap::new();
        for mount in mounts {
            held.insert(mount.host().to_path_buf(), mount.open()?);
        }
        policy.held = held;
        let resolver = policy
            .net
            .resolver
            .clone()
            .unwrap_or_else(|| Arc::new(SystemResolver));
        policy.net_shared = Some(Arc::new(NetShared::new(
            resolver,
            &policy.net.ca_files,
            runtime.connection_counter().clone(),
        )?));
        Ok(Registry {
            runtime,
            policy,
            tools: Arc::default(),
        })
    }
}

impl Registry {
    /// The secrets injections take their values from: replace them here
    /// (a rotated token) and the next request uses the new values.
    pub fn secrets(&self) -> &Secrets {
        &self.policy.secrets
    }

    /// How many calls its runtime gave up on while their tool was blocked in
    /// a file operation that has not returned (see
    /// [`Runtime::stuck_calls`]): what a shutdown leaves behind.
    pub fn stuck_calls(&self) -> usize {
        self.runtime.stuck_calls()
    }

    /// What `oci://` references load from, if set.
    pub(crate) fn pulled(&self) -> Option<&Pulled> {
        self.policy.pulled.as_deref()
    }

    /// A builder that grants nothing: see [`RegistryBuilder`].
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Every registered tool, in registration order.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &ToolInfo> {
        self.tools.tools()
    }

    /// The table calls look their tools up in.
    pub(crate) fn table(&self) -> &Arc<ToolTable> {
        &self.tools
    }

    /// Code mode's settings, as the builder set them.
    pub fn code_mode(&self) -> &CodeMode {
        &self.policy.code_mode
    }

    /// The tool name patterns the tool called `name` may call (its
    /// component's grant); none for a name no tool has.
    pub(crate) fn calls_of(&self, name: &str) -> Arc<[String]> {
        self.entry(name)
            .map(|entry| entry.calls().clone())
            .unwrap_or_default()
    }

    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.entry(name).map(|entry| &entry.info)
    }

    /// What every component may reach (the shared grants and private
    /// ranges, not any component's own), with the resolver and TLS: the
    /// egress policy a remote upstream server is reached through.
    #[cfg(feature = "mcp-client")]
    pub(crate) fn shared_network(&self) -> Option<Arc<crate::sandbox::net::NetPolicy>> {
        let policy = &self.policy;
        Some(Arc::new(crate::sandbox::net::NetPolicy {
            grants: policy.allow_net.clone(),
            allow_private: policy.allow_private.clone(),
            injections: Vec::new(),
            secrets: policy.secrets.clone(),
            shared: policy.net_shared.clone()?,
        }))
    }

    /// Ends the connections to every upstream MCP server its tools come
    /// from, each within `bound` (a stdio server that outlives its input's
    /// end by `bound` is killed), all at once. What a frontend does when it
    /// stops; a later call starts a server again.
    pub async fn close_mcp_servers(&self, bound: std::time::Duration) {
        let mut links: Vec<&Arc<UpstreamTool>> = Vec::new();
        for entry in self.entries() {
            if let Provider::Upstream(tool) = &entry.provider
                && !links
                    .iter()
                    .any(|known| Arc::ptr_eq(&known.link, &tool.link))
            {
                links.push(tool);
            }
        }
        futures::future::join_all(links.iter().map(|tool| tool.link.close(bound))).await;
    }

    /// The limits a component runs with unless the operator set its own.
    pub fn default_limits(&self) -> Limits {
        self.policy.limits
    }

    /// The limits the tool called `name` runs with (its component's).
    pub fn limits(&self, name: &str) -> Option<&Limits> {
        self.entry(name).map(Entry::limits)
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&Entry> {
        self.shared_entry(name).map(|entry| &**entry)
    }

    /// The entry of the tool called `name`, as shared (a call that runs on
    /// another task holds it).
    pub(crate) fn shared_entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.tools.get(name)
    }

    /// Loads the component in `bytes` under the name `component`.
    pub async fn load_bytes(&mut self, component: &str, bytes: impl Into<Vec<u8>>) -> FileReport {
        let bytes = Content::of_bytes(bytes.into())
            .await
            .map_err(LoadError::from);
        self.load_source(component.to_string(), Source::Bytes, bytes)
            .await
    }

    /// Loads the component file at `path`; its name is the file stem.
    pub async fn load_file(&mut self, path: impl AsRef<Path>) -> FileReport {
        let path = path.as_ref();
        let bytes = Content::of_file(path).await.map_err(LoadError::from);
        self.load_source(
            component_name(path),
            Source::File(path.to_path_buf()),
            bytes,
        )
        .await
    }

    /// Loads every `*.wasm` file of `dir` (except hidden ones, `.*`), in
    /// sorted file-name order. Only an unreadable directory is an `Err`; a
    /// bad file is reported and skipped.
    pub async fn load_dir(&mut self, dir: impl AsRef<Path>) -> Result<Vec<FileReport>, Error> {
        let dir = dir.as_ref();
        let read_error = |source| Error::ToolsDir {
            path: dir.to_path_buf(),
            source,
        };
        let mut files: Vec<PathBuf> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_error)? {
            let path = entry.map_err(read_error)?.path();
            if is_component_file(&path) {
                files.push(path);
            }
        }
        files.sort();
        Ok(self.load_files(files).await)
    }

    /// Loads the component `reference` resolves to in the lock, from the
    /// store, once it passed every check (see
    /// [`Pulled::read`](crate::oci::Pulled::read)); its name is the
    /// repository's last segment.
    pub async fn load_reference(&mut self, reference: &Reference) -> FileReport {
        let (name, source, content) = self.read_reference(reference).await;
        self.load_source(name, source, content).await
    }

    /// Loads a directory's components, or a reference's.
    pub async fn load_tools(&mut self, source: &ToolsSource) -> Result<Vec<FileReport>, Error> {
        match source {
            ToolsSource::Dir(dir) => self.load_dir(dir).await,
            ToolsSource::Oci(reference) => Ok(vec![self.load_reference(reference).await]),
        }
    }

    /// The component `reference` names, read and checked through the lock
    /// (off the async executor: it hashes every byte), with its name and
    /// source.
    pub(crate) async fn read_reference(
        &self,
        reference: &Reference,
    ) -> (String, Source, Result<Content, LoadError>) {
        let name = reference.component_name().to_string();
        let mut source = Source::Oci {
            reference: reference.to_string(),
            digest: String::new(),
        };
        let Some(pulled) = self.policy.pulled.clone() else {
            let error = OciError::NotLocked {
                reference: reference.to_string(),
                lock: PathBuf::from(super::oci::LOCK_FILE_NAME),
            };
            return (name, source, Err(LoadError::Distribution(error)));
        };
        let wanted = reference.clone();
        let read = tokio::task::spawn_blocking(move || pulled.read(&wanted))
            .await
            .unwrap_or_else(|e| {
                Err(OciError::Store {
                    path: PathBuf::new(),
                    reason: format!("the reading thread failed: {e}"),
                })
            });
        let content = match read {
            Ok(verified) => {
                if let Source::Oci { digest, .. } = &mut source {
                    *digest = verified.digest.to_string();
                }
                Content::of_bytes(verified.bytes)
                    .await
                    .map_err(LoadError::from)
            }
            Err(error) => Err(LoadError::Distribution(error)),
        };
        (name, source, content)
    }

    /// Loads `files` in order, first name wins, compiling and describing up
    /// to one per core at once.
    async fn load_files(&mut self, files: Vec<PathBuf>) -> Vec<FileReport> {
        let sources = files.into_iter().map(|path| async move {
            let name = component_name(&path);
            let bytes = Content::of_file(&path).await.map_err(LoadError::from);
            (name, Source::File(path), bytes)
        });
        self.load_sources(sources).await
    }

    /// Prepares the components from `sources` concurrently (up to one per
    /// core), and registers them one by one in the order given.
    pub(crate) async fn load_sources<F>(
        &mut self,
        sources: impl IntoIterator<Item = F>,
    ) -> Vec<FileReport>
    where
        F: Future<Output = (String, Source, Result<Content, LoadError>)>,
    {
        use futures::StreamExt;
        let parallel = loading_slots();
        let this = &*self;
        let prepared: Vec<_> = futures::stream::iter(sources)
            .map(|source| async move {
                let (name, source, bytes) = source.await;
                let prepared = this.prepare(name.clone(), source.clone(), bytes).await;
                (name, source, prepared)
            })
            .buffered(parallel)
            .collect()
            .await;
        prepared
            .into_iter()
            .map(|(name, source, prepared)| self.report(name, source, prepared))
            .collect()
    }

    pub(crate) async fn load_source(
        &mut self,
        name: String,
        source: Source,
        bytes: Result<Content, LoadError>,
    ) -> FileReport {
        let prepared = self.prepare(name.clone(), source.clone(), bytes).await;
        self.report(name, source, prepared)
    }

    /// Registers what `prepare` made of a component, and reports it.
    fn report(
        &mut self,
        name: String,
        source: Source,
        prepared: Result<Described, LoadError>,
    ) -> FileReport {
        let mut report = FileReport {
            component: name,
            source,
            registered: Vec::new(),
            shadowed: Vec::new(),
            error: None,
        };
        match prepared {
            Ok(prepared) => self.register(&prepared, &mut report),
            Err(error) => {
                tracing::warn!(component = %report.component, source = %report.source, "skipped: {error}");
                report.error = Some(error);
            }
        }
        report
    }

    /// Compiles the component and checks what its `describe()` returns.
    pub(crate) async fn prepare(
        &self,
        name: String,
        source: Source,
        content: Result<Content, LoadError>,
    ) -> Result<Described, LoadError> {
        let limits = self.policy.limits_for(&name);
        let (pre, hash) = self.compile(content?, &source, &limits).await?;
        let tools = self.describe(&name, &source, pre.clone(), limits).await?;
        let grants = Grants {
            limits,
            mounts: self.policy.mounts_for(&name),
            network: self.policy.network_for(&name),
            settings: self.policy.settings_for(&name, &source),
            secrets: self.policy.secrets.clone(),
        };
        let held = grants
            .mounts
            .iter()
            .map(|mount| (mount.clone(), self.policy.held[mount.host()].clone()))
            .collect();
        let files = Files::new(held).map_err(LoadError::mount)?;
        let calls = self.policy.calls_for(&name, &source);
        let component = Arc::new(Component {
            grants_hash: grants_hash(&grants, &calls),
            calls,
            imports_tools: sandbox::imports_tools(&pre),
            name,
            source,
            hash,
            sandbox: Arc::new(Sandbox {
                pre,
                grants,
                files,
                slots: self.runtime.slots().clone(),
            }),
        });
        let entries = tools
            .into_iter()
            .map(|tool| Arc::new(Entry::of_component(tool, &component)))
            .collect();
        Ok(Described { component, entries })
    }

    /// Compiles `content` for slots of `limits`' shape; with its hash.
    async fn compile(
        &self,
        content: Content,
        source: &Source,
        limits: &Limits,
    ) -> Result<(Compiled, String), LoadError> {
        let hash = content.hash.clone();
        let shape = SlotShape::of(limits);
        match (self.runtime.compile(content, shape).await, source) {
            // Replaced between hashing and reading (an editor saving): once
            // more, with what the file holds now.
            (Err(ComponentError::Content(ContentError::Changed)), Source::File(path)) => {
                let content = Content::of_file(path).await?;
                let hash = content.hash.clone();
                Ok((self.runtime.compile(content, shape).await?, hash))
            }
            (pre, _) => Ok((pre?, hash)),
        }
    }

    /// Runs `describe()` (with the component's limits and no filesystem)
    /// and checks every descriptor it returns.
    async fn describe(
        &self,
        name: &str,
        source: &Source,
        pre: Compiled,
        limits: Limits,
    ) -> Result<Vec<CheckedTool>, LoadError> {
        let describing = Arc::new(Sandbox {
            pre,
            grants: Grants {
                limits,
                mounts: Vec::new(),
                network: None,
                settings: self.policy.settings_for(name, source),
                secrets: self.policy.secrets.clone(),
            },
            files: None,
            slots: self.runtime.slots().clone(),
        });
        let ran = sandbox::run(&describing, Invocation::Describe, Observer::default(), None).await;
        let descriptors = match ran.result {
            Ok(GuestReturn::Descriptors(descriptors)) => descriptors,
            Ok(GuestReturn::Outcome(_)) => unreachable!("describe returns descriptors"),
            Err(stopped) => {
                return Err(LoadError::Describe {
                    kind: stopped.kind,
                    message: with_stderr(stopped.message, &ran.logs.stderr),
                });
            }
        };
        check_descriptors(descriptors)
    }

    /// Registers the tools whose names are free; first wins.
    fn register(&mut self, prepared: &Described, report: &mut FileReport) {
        let component = &prepared.component;
        self.register_entries(&component.name, &prepared.entries, report);
    }

    /// Registers `entries`, offered by `offerer`, first name wins.
    pub(crate) fn register_entries(
        &mut self,
        offerer: &str,
        entries: &[Arc<Entry>],
        report: &mut FileReport,
    ) {
        for entry in entries {
            let name = entry.info.descriptor.name.clone();
            if let Some(owner) = self.entry(&name).map(|e| e.info.component.clone()) {
                tracing::warn!(
                    tool = %name,
                    owner = %owner,
                    skipped = %offerer,
                    source = %entry.info.source,
                    "tool name already registered by `{owner}`; the later definition from `{offerer}` is ignored (first wins)",
                );
                report.shadowed.push(Shadowed { tool: name, owner });
                continue;
            }
            Arc::make_mut(&mut self.tools).push(entry.clone());
            report.registered.push(name);
        }
    }

    /// The registered tools' entries, in registration order.
    pub(crate) fn entries(&self) -> &[Arc<Entry>] {
        self.tools.entries()
    }

    /// A registry with this one's runtime and grants, holding `entries`
    /// (whose names must be distinct), in that order.
    pub(crate) fn with_entries(&self, entries: Vec<Arc<Entry>>) -> Registry {
        Registry {
            runtime: self.runtime.clone(),
            policy: self.policy.clone(),
            tools: Arc::new(ToolTable::from_entries(entries)),
        }
    }
}

/// A place tools are loaded from: a directory of `*.wasm` components, or a
/// component in an OCI registry (`oci://…`), loaded through the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolsSource {
    /// A directory of component files.
    Dir(PathBuf),
    /// A pulled component.
    Oci(Reference),
}

impl ToolsSource {
    /// `oci://…` as a reference, anything else as a directory.
    pub fn parse(text: &str) -> Result<ToolsSource, OciError> {
        if Reference::is_reference(text) {
            Ok(ToolsSource::Oci(text.parse()?))
        } else {
            Ok(ToolsSource::Dir(PathBuf::from(text)))
        }
    }

    /// The reference, if it is one.
    pub fn reference(&self) -> Option<&Reference> {
        match self {
            ToolsSource::Oci(reference) => Some(reference),
            ToolsSource::Dir(_) => None,
        }
    }
}

impl std::str::FromStr for ToolsSource {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Self, OciError> {
        ToolsSource::parse(text)
    }
}

impl std::fmt::Display for ToolsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolsSource::Dir(dir) => write!(f, "{}", dir.display()),
            ToolsSource::Oci(reference) => write!(f, "{reference}"),
        }
    }
}

impl From<PathBuf> for ToolsSource {
    fn from(dir: PathBuf) -> Self {
        ToolsSource::Dir(dir)
    }
}

impl From<&Path> for ToolsSource {
    fn from(dir: &Path) -> Self {
        ToolsSource::Dir(dir.to_path_buf())
    }
}

impl From<&PathBuf> for ToolsSource {
    fn from(dir: &PathBuf) -> Self {
        ToolsSource::Dir(dir.clone())
    }
}

impl From<Reference> for ToolsSource {
    fn from(reference: Reference) -> Self {
        ToolsSource::Oci(reference)
    }
}

/// Whether a directory entry is a component to load: `*.wasm`, and not a
/// hidden file (`.*`, where editors and copies in progress write). Other
/// temporary names (`*~`, `*.tmp`, `*.part`) do not end in `.wasm`.
pub(crate) fn is_component_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.ends_with(".wasm") && !name.starts_with('.') && name.len() > ".wasm".len()
}

/// A component's name: its file stem.
pub(crate) fn component_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The descriptors of one component, checked: at least one, at most
/// [`MAX_TOOLS_PER_COMPONENT`], each valid and named once.
fn check_descriptors(descriptors: Vec<WitDescriptor>) -> Result<Vec<CheckedTool>, LoadError> {
    if descriptors.is_empty() {
        return Err(LoadError::NoTools);
    }
    if descriptors.len() > MAX_TOOLS_PER_COMPONENT {
        return Err(LoadError::TooManyTools(descriptors.len()));
    }
    let mut tools: Vec<CheckedTool> = Vec::with_capacity(descriptors.len());
    for wit in descriptors {
        let tool = wit.name.clone();
        if tools.iter().any(|t| t.descriptor.name == tool) {
            return Err(LoadError::InvalidDescriptor {
                tool,
                reason: "declared twice by this component".into(),
            });
        }
        let checked = schema::check_descriptor(wit)
            .map_err(|reason| LoadError::InvalidDescriptor { tool, reason })?;
        tools.push(checked);
    }
    Ok(tools)
}

/// BLAKE3 of what the operator granted a component, hex: the same tool under
/// other grants may answer differently (the result cache keys on it).
fn grants_hash(grants: &Grants, calls: &[String]) -> String {
    let granted = format!(
        "{:?}{:?}{:?}{:?}{calls:?}",
        grants.limits, grants.mounts, grants.network, grants.settings
    );
    blake3::hash(granted.as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    //! What loading refuses before any guest runs; the integration tests
    //! (`tests/all/loading.rs`) load real components.

    use super::*;

    #[tokio::test]
    async fn bytes_that_are_not_a_component_are_skipped_with_why() {
        let mut registry = Registry::builder().build().expect("a registry");
        let report = registry.load_bytes("junk", b"hello".to_vec()).await;
        assert!(
            matches!(report.error, Some(LoadError::NotWasm)),
            "{report:?}"
        );
        let core = b"\0asm\x01\0\0\0".to_vec();
        let report = registry.load_bytes("core", core).await;
        assert!(
            matches!(report.error, Some(LoadError::CoreModule)),
            "{report:?}"
        );
        assert_eq!(registry.tools().len(), 0);
        assert!(registry.tool("junk").is_none() && registry.shared_entry("core").is_none());
    }

    #[tokio::test]
    async fn a_tools_directory_that_cannot_be_read_is_an_error_naming_it() {
        let mut registry = Registry::builder().build().expect("a registry");
        let missing = std::env::temp_dir().join("toolcage-no-such-dir-7f3a");
        match registry.load_dir(&missing).await {
            Err(Error::ToolsDir { path, .. }) => assert_eq!(path, missing),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_directory_loads_only_wasm_files_and_reports_each() {
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(dir.path().join("notes.txt"), "not a tool").unwrap();
        std::fs::write(dir.path().join("bad.wasm"), "not wasm either").unwrap();
        let mut registry = Registry::builder().build().expect("a registry");
        let reports = registry.load_dir(dir.path()).await.expect("readable");
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0].component, "bad");
        assert!(matches!(reports[0].error, Some(LoadError::NotWasm)));
    }

    #[test]
    fn tools_sources_tell_references_from_directories() {
        assert!(matches!(
            ToolsSource::parse("tools").unwrap(),
            ToolsSource::Dir(_)
        ));
        let reference = ToolsSource::parse("oci://registry.example/tools/fs:1").unwrap();
        assert!(matches!(reference, ToolsSource::Oci(_)));
        assert!(ToolsSource::parse("oci://").is_err());
    }
}
