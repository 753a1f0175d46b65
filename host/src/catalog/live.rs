//! The live registry: tool directories that can change while they serve.
//!
//! A [`LiveRegistry`] holds an immutable [`Registry`] snapshot behind an
//! atomically swapped pointer. A call takes the snapshot when it starts and
//! finishes on it; a reload compiles and checks new files off the serving
//! path, then swaps in a new snapshot in one step. Readers never wait for a
//! reload, and a reload never waits for calls.
//!
//! Threat model: whoever can write to a tools directory can add, replace and
//! remove components at any moment, in pieces, with any name. So:
//! - a name keeps its owner for as long as that owner offers it: a new or
//!   changed file never takes a registered name, whatever its file name sorts
//!   as, and the tools the registry started with (the bundled ones) are never
//!   taken. A name whose owner goes away passes to the next component
//!   offering it in load order (directories in the order given, files by name
//!   within each);
//! - a changed file is compiled and its `describe()` run, under the same
//!   limits as at start-up, before anything changes: a bad version is
//!   reported and the old one keeps serving;
//! - a change is a change of content (BLAKE3), not of modification time;
//! - a file rejected once is not retried until its content changes, so a
//!   broken file costs one compile, not one per reload;
//! - hidden and temporary files (`.*`, `*~`, `*.tmp`, `*.part`) are never
//!   loaded: write a component elsewhere and rename it into the directory.
//!
//! An `oci://` reference among the directories is served like a file whose
//! content is what the lock resolves it to: a `toolcage pull` that changes
//! the lock is a change of that file (read, checked and compiled before
//! anything changes, with the same first-wins rules), and one that changes
//! nothing is no change.
//!
//! After a restart, load order alone decides who owns a name, so the owners
//! can differ from the ones a long-running registry kept.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use tokio::sync::{Mutex, broadcast};

use super::component::Source;
use super::error::{Error, LoadError};
use super::oci::{OciError, Reference};
use super::registry::{
    Described, FileReport, Registry, Shadowed, ToolsSource, component_name, is_component_file,
};
use super::table::Entry;
use crate::sandbox::content::Content;
use crate::sandbox::outcome::ErrorKind;

/// A registry whose tool directories can be reloaded while it serves, by
/// [`reload`](Self::reload) or a [`watch`](Self::watch)er. Cloning shares it.
///
/// Made from a plain [`Registry`] (`LiveRegistry::from`), it has no
/// directories and never changes: every API that serves tools takes a
/// `LiveRegistry`, so a fixed registry and a live one are served alike.
#[derive(Clone)]
pub struct LiveRegistry {
    inner: Arc<Inner>,
}

/// A live registry, not kept alive by whoever holds this: what a task that
/// follows a source (an upstream server's tool list) holds.
#[cfg(feature = "mcp-client")]
pub(crate) struct WeakLive(std::sync::Weak<Inner>);

#[cfg(feature = "mcp-client")]
impl WeakLive {
    pub(crate) fn upgrade(&self) -> Option<LiveRegistry> {
        self.0.upgrade().map(|inner| LiveRegistry { inner })
    }
}

struct Inner {
    current: ArcSwap<Registry>,
    sources: Vec<ToolsSource>,
    /// One reload at a time.
    state: Mutex<State>,
    changes: broadcast::Sender<Arc<ReloadReport>>,
    /// Loads and reloads done, and the component files they rejected.
    reloads: AtomicU64,
    rejected_files: AtomicU64,
    /// Whether tools were added that follow a source of their own (an
    /// upstream server's tool list), so that they may change.
    follows: std::sync::atomic::AtomicBool,
}

struct State {
    /// The tools the registry started with (bundled, or loaded by the
    /// embedder): first in every snapshot, never taken, never reloaded.
    fixed: Vec<Arc<Entry>>,
    /// The components loaded from the directories, in load order.
    files: Vec<LiveFile>,
    /// Tools added after the directories' (an upstream MCP server's), in
    /// the order added: each gets a name no earlier tool has, and keeps it
    /// while it is offered.
    late: Vec<Arc<Entry>>,
    /// The content last rejected at each path, not retried until it changes.
    rejected: HashMap<PathBuf, (Stamp, String)>,
    /// New stamps seen by a reload that waits for files to settle: a file
    /// is read once a later look finds it unchanged.
    observed: HashMap<PathBuf, Stamp>,
}

/// A component loaded from a tools directory.
#[derive(Clone)]
struct LiveFile {
    /// Which of the sources it is in.
    dir: usize,
    /// Its path; for a reference, the reference.
    path: PathBuf,
    /// What the file looked like when it was read.
    stamp: Stamp,
    prepared: Described,
}

/// What a file looked like: if this is unchanged, so is its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
    changed: (i64, i64),
}

impl Stamp {
    /// A file that does not exist.
    const NONE: Stamp = Stamp {
        len: 0,
        modified: None,
        inode: 0,
        changed: (0, 0),
    };

    pub(crate) fn of(metadata: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            len: metadata.len(),
            modified: metadata.modified().ok(),
            inode: metadata.ino(),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReloadReport {
    /// How the tool set changed: what `tools/list` returns, or the component
    /// behind a name. Empty when the reload changed nothing.
    pub changes: Vec<ToolChange>,
    /// Every file compiled in this reload (new, or with new content), with
    /// the tools it registered and the names it found taken, or why it was
    /// rejected (a rejected new version leaves the old one serving).
    pub loaded: Vec<FileReport>,
    /// Components whose files went away.
    pub removed: Vec<String>,
    /// Files modified too recently to be read whole (still being written),
    /// left for the next reload.
    pub pending: Vec<PathBuf>,
    /// Directories that could not be read; their components keep serving.
    pub errors: Vec<String>,
}

impl ReloadReport {
    /// Whether the tool set changed.
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }
}

/// A change to one tool name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolChange {
    /// The tool name.
    pub tool: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// The component that now provides it, or (when removed) that did.
    pub component: String,
    /// Where that component came from.
    pub source: Source,
}

/// What happened to a tool name in a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A name that was not served before.
    Added,
    /// Served by a new version of its component, or by another component.
    Replaced,
    /// No longer served.
    Removed,
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChangeKind::Added => "added",
            ChangeKind::Replaced => "replaced",
            ChangeKind::Removed => "removed",
        })
    }
}

impl From<Registry> for LiveRegistry {
    fn from(registry: Registry) -> Self {
        LiveRegistry::from(Arc::new(registry))
    }
}

impl From<Arc<Registry>> for LiveRegistry {
    fn from(registry: Arc<Registry>) -> Self {
        LiveRegistry::new(registry, Vec::new())
    }
}

impl LiveRegistry {
    fn new(registry: Arc<Registry>, sources: Vec<ToolsSource>) -> Self {
        let state = State {
            fixed: registry.entries().to_vec(),
            files: Vec::new(),
            late: Vec::new(),
            rejected: HashMap::new(),
            observed: HashMap::new(),
        };
        LiveRegistry {
            inner: Arc::new(Inner {
                current: ArcSwap::new(registry),
                sources,
                state: Mutex::new(state),
                changes: broadcast::channel(64).0,
                reloads: AtomicU64::new(0),
                rejected_files: AtomicU64::new(0),
                follows: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Serves `base`'s tools (for example the bundled ones) first and for
    /// good, then loads every component of `sources`, in order (directories'
    /// files by name; first name wins), to be reloaded later. References
    /// load through `base`'s [`pulled`](crate::RegistryBuilder::pulled)
    /// lock. Only an unreadable directory is an `Err`; a bad file or
    /// reference is reported and skipped.
    pub async fn load(
        base: Registry,
        sources: impl IntoIterator<Item = impl Into<ToolsSource>>,
    ) -> Result<(LiveRegistry, Vec<FileReport>), Error> {
        let sources: Vec<ToolsSource> = sources.into_iter().map(Into::into).collect();
        for source in &sources {
            if let ToolsSource::Dir(dir) = source {
                std::fs::read_dir(dir).map_err(|source| Error::ToolsDir {
                    path: dir.clone(),
                    source,
                })?;
            }
        }
        let live = LiveRegistry::new(Arc::new(base), sources);
        let report = live.reload_with(false).await;
        Ok((live, report.loaded))
    }

    /// The tools now: a snapshot that stays as it is while the registry
    /// changes. Take it once per call (or batch) and finish on it.
    pub fn current(&self) -> Arc<Registry> {
        self.inner.current.load_full()
    }

    /// How many times the directories were loaded or reloaded (the first
    /// load included), changing the tools or not.
    pub fn reloads(&self) -> u64 {
        self.inner.reloads.load(Ordering::Relaxed)
    }

    /// How many component files those loads rejected, each version of a
    /// file counted once (a rejected file is not retried until it changes).
    pub fn rejected_files(&self) -> u64 {
        self.inner.rejected_files.load(Ordering::Relaxed)
    }

    /// The tools directories and references, in load order.
    pub fn sources(&self) -> &[ToolsSource] {
        &self.inner.sources
    }

    /// Whether its tools can never change: it has no directories or
    /// references, and follows no upstream server's tool list.
    pub fn is_fixed(&self) -> bool {
        self.inner.sources.is_empty() && !self.inner.follows.load(Ordering::Relaxed)
    }

    /// What a watcher watches: the directories, and the lock's directory
    /// when there are references.
    pub(crate) fn watched(&self) -> Vec<PathBuf> {
        let mut watched: Vec<PathBuf> = Vec::new();
        for source in &self.inner.sources {
            let dir = match source {
                ToolsSource::Dir(dir) => dir.clone(),
                ToolsSource::Oci(_) => match self.lock_path() {
                    Some(lock) => match lock.parent() {
                        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                        _ => PathBuf::from("."),
                    },
                    None => continue,
                },
            };
            if !watched.contains(&dir) {
                watched.push(dir);
            }
        }
        watched
    }

    /// The lock references load through, if any.
    fn lock_path(&self) -> Option<PathBuf> {
        self.current()
            .pulled()
            .map(|pulled| pulled.lock_path().to_path_buf())
    }

    /// What `look` needs: the sources and the lock.
    pub(crate) fn lookout(&self) -> Lookout {
        Lookout {
            sources: self.inner.sources.clone(),
            lock: self.lock_path(),
        }
    }

    /// Receives the report of every reload that changed the tool set, once
    /// the new tools are being served.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<ReloadReport>> {
        self.inner.changes.subscribe()
    }

    /// Reads the directories again and serves what changed: new files,
    /// new content, removed files. Files are read as they are now; a
    /// [`watch`](Self::watch)er instead waits for files being written to
    /// settle.
    pub async fn reload(&self) -> ReloadReport {
        self.reload_with(false).await
    }

    /// [`reload`](Self::reload); with `settle`, a file whose metadata
    /// changed since the last look is left for the next one (listed in
    /// [`ReloadReport::pending`]) and read once it stays the same.
    pub(crate) async fn reload_with(&self, settle: bool) -> ReloadReport {
        let mut guard = self.inner.state.lock().await;
        let state = &mut *guard;
        let mut report = ReloadReport::default();
        let base = self.current();

        // What each directory holds now, and what must be read.
        let (mut files, candidates) = self.scan(state, settle, &mut report).await;
        let mut reports: Vec<(usize, FileReport)> = Vec::new();
        let mut compiled: Vec<(usize, PathBuf)> = Vec::new();
        for (candidate, name, source, hash, read) in prepare_all(&base, candidates).await {
            let Candidate {
                slot,
                dir,
                path,
                stamp,
                ..
            } = candidate;
            match read {
                Read::Unchanged => {
                    // Touched, not changed: the version serving stays.
                    if let Some(file) = &mut files[slot] {
                        file.stamp = stamp;
                    }
                }
                Read::StillRejected => {
                    if let Some(rejected) = state.rejected.get_mut(&path) {
                        rejected.0 = stamp;
                    }
                }
                Read::Described(Ok(prepared)) => {
                    state.rejected.remove(&path);
                    compiled.push((slot, path.clone()));
                    files[slot] = Some(LiveFile {
                        dir,
                        path,
                        stamp,
                        prepared,
                    });
                }
                Read::Described(Err(error)) => {
                    // The old version, if any, stays in its slot. Only what
                    // the content decides is remembered; a busy host or a
                    // read error is tried again at the next reload.
                    tracing::warn!(component = %name, source = %path.display(), "rejected: {error}");
                    if depends_on_content(&error) {
                        state.rejected.insert(path.clone(), (stamp, hash));
                    }
                    let report = FileReport {
                        component: name,
                        source,
                        registered: Vec::new(),
                        shadowed: Vec::new(),
                        error: Some(error),
                    };
                    reports.push((slot, report));
                }
            }
        }
        let files: Vec<LiveFile> = files.into_iter().flatten().collect();
        report.removed = state
            .files
            .iter()
            .filter(|old| !files.iter().any(|f| f.path == old.path))
            .map(|old| old.prepared.component.name.clone())
            .collect();

        // The next snapshot, and what each compiled file got in it.
        let entries = owners(&state.fixed, &base, &files, &state.late);
        for (slot, path) in compiled {
            if let Some(file) = files.iter().find(|f| f.path == path) {
                reports.push((slot, file_report(file, &entries)));
            }
        }
        reports.sort_by_key(|(slot, _)| *slot);
        report.loaded = reports.into_iter().map(|(_, report)| report).collect();
        report.changes = diff(&base, &entries);
        if report.changed() {
            self.inner
                .current
                .store(Arc::new(base.with_entries(entries)));
        }
        state.files = files;
        drop(guard);
        log(&report);
        let rejected = report.loaded.iter().filter(|file| !file.is_ok()).count();
        self.inner.reloads.fetch_add(1, Ordering::Relaxed);
        self.inner
            .rejected_files
            .fetch_add(rejected as u64, Ordering::Relaxed);
        if report.changed() {
            self.inner.changes.send(Arc::new(report.clone())).ok();
        }
        report
    }

    /// A handle on this registry that does not keep it alive.
    #[cfg(feature = "mcp-client")]
    pub(crate) fn downgrade(&self) -> WeakLive {
        WeakLive(Arc::downgrade(&self.inner))
    }

    /// The late entries `offerer` (a component name) added, as they are now.
    #[cfg(feature = "mcp-client")]
    pub(crate) async fn late_entries(&self, offerer: &str) -> Vec<Arc<Entry>> {
        let state = self.inner.state.lock().await;
        let late = state.late.iter().filter(|e| e.info.component == offerer);
        late.cloned().collect()
    }

    /// Adds `entries` after every tool the registry has, first name wins,
    /// and swaps in the snapshot that holds them; `report` (of what offers
    /// them) comes back saying which were registered and which shadowed.
    #[cfg(feature = "mcp-client")]
    pub(crate) async fn add_late(
        &self,
        report: FileReport,
        entries: Vec<Arc<Entry>>,
    ) -> FileReport {
        self.inner.follows.store(true, Ordering::Relaxed);
        self.set_late(report, entries).await
    }

    /// Replaces the late entries `offerer` added with `entries` (an
    /// entry kept from before keeps the name it owns), as
    /// [`add_late`](Self::add_late) adds them; logs what it did.
    #[cfg(feature = "mcp-client")]
    pub(crate) async fn replace_late(&self, offerer: &str, entries: Vec<Arc<Entry>>) {
        let source = match entries.first() {
            Some(entry) => entry.info.source.clone(),
            None => Source::Bytes,
        };
        let report = FileReport {
            component: offerer.to_string(),
            source,
            registered: Vec::new(),
            shadowed: Vec::new(),
            error: None,
        };
        let report = self.set_late(report, entries).await;
        tracing::info!(
            offerer = %offerer,
            registered = report.registered.len(),
            shadowed = report.shadowed.len(),
            "its tools changed; the registry now has them"
        );
    }

    #[cfg(feature = "mcp-client")]
    async fn set_late(&self, mut report: FileReport, entries: Vec<Arc<Entry>>) -> FileReport {
        let mut state = self.inner.state.lock().await;
        state.late.retain(|e| e.info.component != report.component);
        state.late.extend(entries.iter().cloned());
        let base = self.current();
        let next = owners(&state.fixed, &base, &state.files, &state.late);
        for entry in &entries {
            owned_or_shadowed(entry, &next, &mut report);
        }
        let changes = diff(&base, &next);
        self.inner.current.store(Arc::new(base.with_entries(next)));
        drop(state);
        if !changes.is_empty() {
            let report = ReloadReport {
                changes,
                ..ReloadReport::default()
            };
            self.inner.changes.send(Arc::new(report)).ok();
        }
        report
    }

    /// Lists the directories: a slot per component file in load order,
    /// holding its current version (if any), and the files to read (new, or
    /// whose metadata changed).
    async fn scan(
        &self,
        state: &mut State,
        settle: bool,
        report: &mut ReloadReport,
    ) -> (Vec<Option<LiveFile>>, Vec<Candidate>) {
        let lookout = self.lookout();
        let count = lookout.sources.len();
        let listings = tokio::task::spawn_blocking(move || look(&lookout))
            .await
            .unwrap_or_else(|e| {
                let error = format!("the listing thread failed: {e}");
                (0..count).map(|_| Err(error.clone())).collect()
            });
        let mut files: Vec<Option<LiveFile>> = Vec::new();
        let mut candidates = Vec::new();
        let mut listed = Vec::new();
        for (dir_index, listing) in listings.into_iter().enumerate() {
            let listing = match listing {
                Ok(listing) => listing,
                Err(error) => {
                    let dir = &self.inner.sources[dir_index];
                    report
                        .errors
                        .push(format!("cannot read tools directory {dir}: {error}"));
                    let kept = state.files.iter().filter(|f| f.dir == dir_index);
                    listed.extend(kept.clone().map(|f| f.path.clone()));
                    files.extend(kept.cloned().map(Some));
                    continue;
                }
            };
            for (path, stamp) in listing {
                listed.push(path.clone());
                let old = state.files.iter().find(|f| f.path == path);
                let unchanged = old.is_some_and(|old| old.stamp == stamp)
                    || state.rejected.get(&path).is_some_and(|(s, _)| *s == stamp);
                let unsettled = settle && state.observed.get(&path) != Some(&stamp);
                if unchanged || unsettled {
                    if unchanged {
                        state.observed.remove(&path);
                    } else {
                        state.observed.insert(path.clone(), stamp);
                        report.pending.push(path);
                    }
                    if let Some(old) = old {
                        files.push(Some(old.clone()));
                    }
                    continue;
                }
                state.observed.remove(&path);
                candidates.push(Candidate {
                    slot: files.len(),
                    dir: dir_index,
                    reference: self.inner.sources[dir_index].reference().cloned(),
                    old_hash: old.map(|old| old.prepared.component.hash.clone()),
                    rejected_hash: state.rejected.get(&path).map(|(_, hash)| hash.clone()),
                    path,
                    stamp,
                });
                files.push(old.cloned());
            }
        }
        state.rejected.retain(|path, _| listed.contains(path));
        state.observed.retain(|path, _| listed.contains(path));
        (files, candidates)
    }
}

/// A file (or reference) to read, and the slot its version takes.
struct Candidate {
    slot: usize,
    dir: usize,
    /// The reference, when it is one.
    reference: Option<Reference>,
    path: PathBuf,
    stamp: Stamp,
    /// The hash of the version serving, if any.
    old_hash: Option<String>,
    /// The hash of the content last rejected at this path, if any.
    rejected_hash: Option<String>,
}

/// What reading a candidate found.
enum Read {
    /// The content of the version serving.
    Unchanged,
    /// The content rejected last time.
    StillRejected,
    /// New content, compiled and described (or why not).
    Described(Result<Described, LoadError>),
}

/// Reads, compares and (when new) compiles and describes `candidates`, up
/// to one per core at once, under `base`'s grants; in order, each with its
/// component name, source and content hash.
async fn prepare_all(
    base: &Registry,
    candidates: Vec<Candidate>,
) -> Vec<(Candidate, String, Source, String, Read)> {
    use futures::StreamExt;
    let parallel = crate::sandbox::slots::loading_slots();
    futures::stream::iter(candidates)
        .map(|candidate| async move {
            let (name, source, bytes) = match &candidate.reference {
                Some(reference) => base.read_reference(reference).await,
                None => (
                    component_name(&candidate.path),
                    Source::File(candidate.path.clone()),
                    Content::of_file(&candidate.path)
                        .await
                        .map_err(LoadError::from),
                ),
            };
            let hash = match &bytes {
                Ok(bytes) => bytes.hash.clone(),
                Err(_) => String::new(),
            };
            let read = if bytes.is_ok() && candidate.old_hash.as_ref() == Some(&hash) {
                Read::Unchanged
            } else if bytes.is_ok() && candidate.rejected_hash.as_ref() == Some(&hash) {
                Read::StillRejected
            } else {
                Read::Described(base.prepare(name.clone(), source.clone(), bytes).await)
            };
            (candidate, name, source, hash, read)
        })
        .buffered(parallel)
        .collect()
        .await
}

/// Whether a load failure is decided by the component's bytes (so the same
/// bytes would fail again), rather than by the moment (a read error, a
/// mount that vanished). A `describe()` that runs out of time counts as the
/// component's: it should take milliseconds, and it runs in a slot kept for
/// loading, so calls cannot make it wait.
fn depends_on_content(error: &LoadError) -> bool {
    match error {
        LoadError::Io(_) | LoadError::Mount(_) | LoadError::Changed => false,
        // A reference's "content" is its lock entry (its stamp is the
        // lock's): what the lock decides is retried when the lock changes;
        // what the store lacks, at every reload.
        LoadError::Distribution(OciError::NotStored { .. } | OciError::Store { .. }) => false,
        LoadError::Distribution(_) => true,
        LoadError::Describe { kind, .. } => *kind != ErrorKind::Cancelled,
        _ => true,
    }
}

/// What a look at the sources needs.
#[derive(Debug, Clone)]
pub(crate) struct Lookout {
    sources: Vec<ToolsSource>,
    lock: Option<PathBuf>,
}

/// The component files of each directory, in load order, with their
/// stamps (regular files only: a directory, a FIFO or a dangling link named
/// `*.wasm` is not a component), or why a directory could not be read. A
/// reference is one "file", named by the reference, stamped with the lock's
/// stamp: it is read again whenever the lock changes.
pub(crate) fn look(lookout: &Lookout) -> Vec<Result<Vec<(PathBuf, Stamp)>, String>> {
    let lock_stamp = || {
        lookout
            .lock
            .as_ref()
            .and_then(|lock| std::fs::metadata(lock).ok())
            .map_or(Stamp::NONE, |meta| Stamp::of(&meta))
    };
    lookout
        .sources
        .iter()
        .map(|source| {
            let dir = match source {
                ToolsSource::Dir(dir) => dir,
                ToolsSource::Oci(reference) => {
                    return Ok(vec![(PathBuf::from(reference.to_string()), lock_stamp())]);
                }
            };
            let mut files = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
                let path = entry.map_err(|e| e.to_string())?.path();
                if is_component_file(&path)
                    && let Ok(metadata) = std::fs::metadata(&path)
                    && metadata.is_file()
                {
                    files.push((path, Stamp::of(&metadata)));
                }
            }
            files.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(files)
        })
        .collect()
}

/// The tools of the next snapshot, in load order. A name's owner is: a
/// fixed tool; else its owner in `current`, if that file (or late tool)
/// still offers it; else the first file offering it; else the first late
/// tool.
fn owners(
    fixed: &[Arc<Entry>],
    current: &Registry,
    files: &[LiveFile],
    late: &[Arc<Entry>],
) -> Vec<Arc<Entry>> {
    let mut owners: HashMap<&str, &Arc<Entry>> = HashMap::new();
    for entry in fixed {
        owners.insert(&entry.info.descriptor.name, entry);
    }
    for entry in current.entries() {
        let name = entry.info.descriptor.name.as_str();
        let path = match &entry.info.source {
            Source::File(path) => path.clone(),
            Source::Oci { reference, .. } => PathBuf::from(reference),
            Source::Mcp { .. } => {
                if let Some(offered) = late.iter().find(|e| Arc::ptr_eq(e, entry)) {
                    owners.entry(name).or_insert(offered);
                }
                continue;
            }
            Source::Bytes | Source::Bundled => continue,
        };
        let offered = files
            .iter()
            .filter(|f| f.path == path)
            .flat_map(|f| &f.prepared.entries)
            .find(|e| e.info.descriptor.name == name);
        if let Some(offered) = offered {
            owners.entry(name).or_insert(offered);
        }
    }
    let offered = || files.iter().flat_map(|f| &f.prepared.entries).chain(late);
    for entry in offered() {
        owners.entry(&entry.info.descriptor.name).or_insert(entry);
    }
    fixed
        .iter()
        .chain(offered())
        .filter(|entry| {
            owners
                .get(entry.info.descriptor.name.as_str())
                .is_some_and(|owner| Arc::ptr_eq(owner, entry))
        })
        .cloned()
        .collect()
}

/// Notes in `report` whether `entry` owns its name among `entries` (the
/// next snapshot's), or another does: then it is shadowed, and logged.
fn owned_or_shadowed(entry: &Arc<Entry>, entries: &[Arc<Entry>], report: &mut FileReport) {
    let name = &entry.info.descriptor.name;
    match entries.iter().find(|e| &e.info.descriptor.name == name) {
        Some(owner) if Arc::ptr_eq(owner, entry) => report.registered.push(name.clone()),
        Some(owner) => {
            tracing::warn!(
                tool = %name,
                owner = %owner.info.component,
                skipped = %report.component,
                source = %report.source,
                "tool name already registered by `{}`; the definition from `{}` is ignored (first wins)",
                owner.info.component,
                report.component
            );
            report.shadowed.push(Shadowed {
                tool: name.clone(),
                owner: owner.info.component.clone(),
            });
        }
        None => {}
    }
}

/// What `file` registered among `entries`, and which of its names others own.
fn file_report(file: &LiveFile, entries: &[Arc<Entry>]) -> FileReport {
    let component = &file.prepared.component;
    let mut report = FileReport {
        component: component.name.clone(),
        source: component.source.clone(),
        registered: Vec::new(),
        shadowed: Vec::new(),
        error: None,
    };
    for entry in &file.prepared.entries {
        owned_or_shadowed(entry, entries, &mut report);
    }
    report
}

/// How the tool set changes from `current` to `next`.
fn diff(current: &Registry, next: &[Arc<Entry>]) -> Vec<ToolChange> {
    let change = |entry: &Entry, kind| ToolChange {
        tool: entry.info.descriptor.name.clone(),
        kind,
        component: entry.info.component.clone(),
        source: entry.info.source.clone(),
    };
    let by_name = |entries: &'_ [Arc<Entry>]| -> HashMap<String, Arc<Entry>> {
        entries
            .iter()
            .map(|e| (e.info.descriptor.name.clone(), e.clone()))
            .collect()
    };
    let (before, after) = (by_name(current.entries()), by_name(next));
    let mut changes: Vec<ToolChange> = next
        .iter()
        .filter_map(|entry| match before.get(&entry.info.descriptor.name) {
            None => Some(change(entry, ChangeKind::Added)),
            Some(old) if !Arc::ptr_eq(old, entry) => Some(change(entry, ChangeKind::Replaced)),
            Some(_) => None,
        })
        .collect();
    changes.extend(
        current
            .entries()
            .iter()
            .filter(|old| !after.contains_key(&old.info.descriptor.name))
            .map(|old| change(old, ChangeKind::Removed)),
    );
    changes
}

/// Logs what a reload did: a line at `info` for the reload and for each
/// change, at `warn` for what could not be read.
fn log(report: &ReloadReport) {
    let rejected = report.loaded.iter().filter(|r| !r.is_ok()).count();
    tracing::info!(
        changes = report.changes.len(),
        compiled = report.loaded.len() - rejected,
        rejected,
        removed = report.removed.len(),
        pending = report.pending.len(),
        "tools directories reloaded"
    );
    for change in &report.changes {
        tracing::info!(
            tool = %change.tool,
            component = %change.component,
            source = %change.source,
            "tool {}", change.kind
        );
    }
    for component in &report.removed {
        tracing::info!(component = %component, "component removed");
    }
    for error in &report.errors {
        tracing::warn!("{error}");
    }
}

#[cfg(test)]
mod tests {
    //! Reloading a directory, with files no guest needs to run for; the
    //! integration tests (`tests/all/reload.rs`) reload real components.

    use super::*;

    #[tokio::test]
    async fn a_reload_sees_a_bad_file_arrive_and_leave_and_keeps_serving() {
        let dir = tempfile::tempdir().expect("a directory");
        let base = Registry::builder().build().expect("a registry");
        let (live, loaded) = LiveRegistry::load(base, [dir.path()])
            .await
            .expect("readable");
        assert!(loaded.is_empty());
        let before = live.current();
        assert_eq!(live.sources().len(), 1);

        std::fs::write(dir.path().join("bad.wasm"), "not wasm").unwrap();
        let report = live.reload().await;
        assert!(
            !report.changed(),
            "a rejected file changes no tool: {report:?}"
        );
        assert_eq!(report.loaded.len(), 1);
        assert!(matches!(report.loaded[0].error, Some(LoadError::NotWasm)));
        assert_eq!(live.rejected_files(), 1);
        assert_eq!(live.current().tools().len(), before.tools().len());

        std::fs::remove_file(dir.path().join("bad.wasm")).unwrap();
        let report = live.reload().await;
        assert!(report.loaded.is_empty(), "{report:?}");
    }

    #[tokio::test]
    async fn an_unreadable_source_is_refused_at_load() {
        let base = Registry::builder().build().expect("a registry");
        let missing = std::env::temp_dir().join("toolcage-no-such-dir-91c2");
        let error = LiveRegistry::load(base, [missing.as_path()]).await.err();
        assert!(matches!(error, Some(Error::ToolsDir { .. })), "{error:?}");
    }
}
