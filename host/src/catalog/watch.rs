//! Watching tool directories: a [`LiveRegistry`] reloads when they change.
//!
//! File-system events (inotify, through the `notify` crate) or, where a file
//! system has none (some network and container mounts), polling the files'
//! metadata, start a reload once the directories have been quiet for the
//! debounce interval (at most a second while changes keep coming), and the
//! directories are looked at every 30 s in any case. A burst of changes (a
//! copy of many files, an editor's save dance) becomes one reload. A file
//! whose size or times changed since the last look is not read yet: it may
//! still be being written, and is read one interval later if it stayed the
//! same.
//!
//! Threat model: events are only hints to look again. What gets served is
//! decided by the reload, which reads the directories itself and applies
//! the live registry's rules (see [`crate::LiveRegistry`]); a flood of
//! events costs at most one reload per second.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::error::Error;
use super::live::{LiveRegistry, Lookout, Stamp, look};

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

    /// Reloads once the directories have been quiet this long, and reads a
    /// changed file only once it stayed the same this long. Default: 200 ms.
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
        let mut tasks = Vec::new();
        let events = match options.poll {
            Some(interval) => {
                // What changes from now on is seen: the first look is now.
                let lookout = self.lookout();
                let first = look(&lookout);
                tasks.push(tokio::spawn(poll(lookout, first, interval, wake)));
                None
            }
            None => Some(events(self.watched(), wake)?),
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
    let handler = move |event: notify::Result<notify::Event>| {
        // An error may hide a change: look again.
        let relevant = match &event {
            Err(_) => true,
            Ok(event) => is_relevant(event),
        };
        if relevant {
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
    lookout: Lookout,
    mut last: Fingerprint,
    interval: Duration,
    wake: mpsc::UnboundedSender<()>,
) {
    let lookout = std::sync::Arc::new(lookout);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let lookout = lookout.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || look(&lookout)).await else {
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

/// Whether an event may change what the directories serve: anything but a
/// read. Not only component names: a directory swapped under its name, a
/// symbolic link retargeted (as Kubernetes does with `..data`), or a
/// dropped event queue (`need_rescan`) can change them too.
fn is_relevant(event: &notify::Event) -> bool {
    let reads_only = matches!(
        event.kind,
        EventKind::Access(
            AccessKind::Open(_) | AccessKind::Read | AccessKind::Close(AccessMode::Read)
        )
    );
    event.need_rescan() || !reads_only
}

/// Reloads once the directories have been quiet for `debounce` after a
/// change (or for at most [`MAX_DELAY`] while changes keep coming), again
/// one `debounce` later while files are still being written, and every
/// [`RESCAN`] in any case.
async fn reload_on_changes(
    live: LiveRegistry,
    mut woken: mpsc::UnboundedReceiver<()>,
    debounce: Duration,
) {
    // Whatever changed between loading and watching is looked at first.
    let mut pending = true;
    loop {
        if !pending {
            // A change, or the periodic look.
            if let Ok(None) = tokio::time::timeout(RESCAN, woken.recv()).await {
                return;
            }
        }
        // Wait for the directories to be quiet for a whole interval.
        let started = tokio::time::Instant::now();
        loop {
            match tokio::time::timeout(debounce, woken.recv()).await {
                Ok(Some(())) if started.elapsed() < MAX_DELAY => continue,
                Ok(None) => return,
                Ok(Some(())) | Err(_) => break,
            }
        }
        let report = live.reload_with(true).await;
        pending = !report.pending.is_empty();
    }
}

/// The longest a stream of changes delays a reload.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// How often the directories are looked at without any event: a directory
/// replaced under its name stops sending events, and a file system can
/// drop them.
const RESCAN: Duration = Duration::from_secs(30);
