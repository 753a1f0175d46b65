//! Watching tool directories: a [`LiveRegistry`] reloads when they change.
//!
//! File-system events (inotify, through the `notify` crate) or, where a file
//! system has none (some network and container mounts), polling the files'
//! metadata, start a
//! reload once the directory has been quiet for the debounce interval. A
//! burst of changes (a copy of many files, an editor's save dance) becomes
//! one reload. A file modified within the interval is not read yet: it is
//! still being written, and is tried again one interval later.
//!
//! Threat model: events are only hints to look again. What gets served is
//! decided by the reload, which reads the directories itself and applies
//! the live registry's rules (see [`crate::LiveRegistry`]); a flood of
//! events costs at most one reload per interval.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use crate::live::Stamp;
use crate::registry::is_component_file;
use crate::{Error, LiveRegistry};

/// How a [`LiveRegistry`] watches its directories. Default: file-system
/// events, with a 200 ms debounce.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    debounce: Duration,
    poll: Option<Duration>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Self::DEFAULT_DEBOUNCE,
            poll: None,
        }
    }
}

impl WatchOptions {
    /// The default debounce interval: 200 ms.
    pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

    /// Reloads once the directories have been quiet this long, and leaves
    /// files modified more recently for later. Default: 200 ms.
    pub fn debounce(mut self, interval: Duration) -> Self {
        self.debounce = interval;
        self
    }

    /// Looks at the directories every `interval` (listing them and reading
    /// each component file's metadata, not its content) instead of waiting
    /// for file-system events, for file systems that send none. Default:
    /// events.
    pub fn poll(mut self, interval: Duration) -> Self {
        self.poll = Some(interval);
        self
    }
}

/// Watches a [`LiveRegistry`]'s directories while it lives; dropping it
/// stops watching. Made by [`LiveRegistry::watch`].
pub struct Watcher {
    /// The file-system event source, when not polling.
    _events: Option<Box<dyn notify::Watcher + Send + Sync>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

impl LiveRegistry {
    /// Reloads whenever the directories change, until the returned
    /// [`Watcher`] is dropped. Call it within a Tokio runtime. Fails if a
    /// directory cannot be watched.
    pub fn watch(&self, options: WatchOptions) -> Result<Watcher, Error> {
        let (wake, woken) = mpsc::unbounded_channel();
        let dirs: Vec<PathBuf> = self.dirs().to_vec();
        let mut tasks = Vec::new();
        let events = match options.poll {
            Some(interval) => {
                // What changes from now on is seen: the first look is now.
                let first = fingerprint(&dirs);
                tasks.push(tokio::spawn(poll(dirs, first, interval, wake)));
                None
            }
            None => Some(events(dirs, wake)?),
        };
        tasks.push(tokio::spawn(reload_on_changes(
            self.clone(),
            woken,
            options.debounce,
        )));
        Ok(Watcher {
            _events: events,
            tasks,
        })
    }
}

/// File-system events on `dirs`, each relevant one sent to `wake`.
fn events(
    dirs: Vec<PathBuf>,
    wake: mpsc::UnboundedSender<()>,
) -> Result<Box<dyn notify::Watcher + Send + Sync>, Error> {
    let watched = dirs.clone();
    let handler = move |event: notify::Result<notify::Event>| {
        // An error (a queue overflow) may hide a change: look again.
        if event.is_err() || event.is_ok_and(|event| is_relevant(&event, &watched)) {
            wake.send(()).ok();
        }
    };
    let error = |dir: &Path, e: notify::Error| Error::ToolsDir {
        path: dir.to_path_buf(),
        source: std::io::Error::other(format!("cannot watch it: {e}")),
    };
    let first = dirs.first().map_or(Path::new("."), PathBuf::as_path);
    let mut watcher = notify::recommended_watcher(handler).map_err(|e| error(first, e))?;
    for dir in &dirs {
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| error(dir, e))?;
    }
    Ok(Box::new(watcher))
}

/// Sends to `wake` whenever what `dirs` list (names, sizes, inodes,
/// modification and change times of the component files) differs from the
/// last look, `interval` before.
async fn poll(
    dirs: Vec<PathBuf>,
    mut last: Fingerprint,
    interval: Duration,
    wake: mpsc::UnboundedSender<()>,
) {
    let dirs = std::sync::Arc::new(dirs);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let dirs = dirs.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || fingerprint(&dirs)).await else {
            continue;
        };
        if now != last {
            last = now;
            if wake.send(()).is_err() {
                return;
            }
        }
    }
}

/// What the component files of each directory look like, or why it could
/// not be read.
type Fingerprint = Vec<Result<Vec<(PathBuf, Stamp)>, String>>;

fn fingerprint(dirs: &[PathBuf]) -> Fingerprint {
    dirs.iter()
        .map(|dir| {
            let mut files = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
                let path = entry.map_err(|e| e.to_string())?.path();
                if is_component_file(&path)
                    && let Ok(metadata) = std::fs::metadata(&path)
                {
                    files.push((path, Stamp::of(&metadata)));
                }
            }
            files.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(files)
        })
        .collect()
}

/// Whether an event may change what the directories serve: a change to a
/// component file, or to a directory itself. Reads are not.
fn is_relevant(event: &notify::Event, dirs: &[PathBuf]) -> bool {
    let reads_only = matches!(
        event.kind,
        EventKind::Access(
            AccessKind::Open(_) | AccessKind::Read | AccessKind::Close(AccessMode::Read)
        )
    );
    !reads_only
        && event
            .paths
            .iter()
            .any(|path| is_component_file(path) || dirs.iter().any(|dir| dir == path))
}

/// Reloads after each quiet `debounce` following a change, and again one
/// `debounce` later while files are still being written.
async fn reload_on_changes(
    live: LiveRegistry,
    mut woken: mpsc::UnboundedReceiver<()>,
    debounce: Duration,
) {
    let mut pending = false;
    loop {
        if !pending && woken.recv().await.is_none() {
            return;
        }
        // Wait for the directories to be quiet for a whole interval.
        loop {
            match tokio::time::timeout(debounce, woken.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let report = live.reload_with(Some(debounce)).await;
        pending = !report.pending.is_empty();
    }
}
