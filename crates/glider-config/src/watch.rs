//! The live config: one immutable snapshot published through `ArcSwap`, and a watcher
//! that reloads the file when it changes. It watches the parent directory (editors save
//! by rename), applies only hot keys, keeps the old config when the new file is broken,
//! and reports restart-only changes instead of applying them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::{Config, ConfigError};

/// Holder of the current config; cheap to clone and share.
#[derive(Clone)]
pub struct ConfigHandle {
    inner: Arc<Inner>,
}

struct Inner {
    current: ArcSwap<Config>,
    path: Option<PathBuf>,
    changed: watch::Sender<Arc<Config>>,
    /// Why the latest reload was rejected (`None` until one is), for the hot-swap
    /// record: a broken file never reaches the modules, yet it is a failed swap.
    rejected: watch::Sender<Option<String>>,
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadOutcome {
    /// The file did not change what is running.
    Unchanged,
    /// The new config runs; `needs_restart` lists the restart-only keys that changed
    /// and were not applied ([`crate::reload::RESTART_ONLY`]).
    Applied { needs_restart: Vec<&'static str> },
    /// The file is broken; the old config stays.
    Rejected { error: String },
}

impl ConfigHandle {
    /// A handle over `config`, reloadable from `path` if given.
    pub fn new(config: Config, path: Option<PathBuf>) -> Self {
        let config = Arc::new(config);
        let (changed, _) = watch::channel(config.clone());
        let (rejected, _) = watch::channel(None);
        ConfigHandle {
            inner: Arc::new(Inner {
                current: ArcSwap::new(config),
                path,
                changed,
                rejected,
            }),
        }
    }

    /// The snapshot a request should keep for its whole life.
    pub fn snapshot(&self) -> Arc<Config> {
        self.inner.current.load_full()
    }

    /// The file this config came from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// A receiver told of every applied change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Config>> {
        self.inner.changed.subscribe()
    }

    /// A receiver told of every rejected reload, with why.
    pub fn subscribe_rejections(&self) -> watch::Receiver<Option<String>> {
        self.inner.rejected.subscribe()
    }

    /// Re-read the file now and apply what can be applied.
    pub fn reload(&self) -> ReloadOutcome {
        let Some(path) = &self.inner.path else {
            return ReloadOutcome::Unchanged;
        };
        match Config::load(path).and_then(|next| refuse_no_backends(path, next)) {
            Ok(next) => self.apply(next),
            Err(err) => {
                tracing::error!(error = %err, "config reload rejected; the previous config stays");
                self.inner.rejected.send_replace(Some(err.to_string()));
                ReloadOutcome::Rejected {
                    error: err.to_string(),
                }
            }
        }
    }

    /// Apply a parsed config (hot keys only).
    pub fn apply(&self, next: Config) -> ReloadOutcome {
        let running = self.snapshot();
        let needs_restart = running.restart_only_changes(&next);
        for key in &needs_restart {
            tracing::warn!(key, "config change needs a restart; not applied");
        }
        let applied = running.hot_applicable(next);
        if applied == *running {
            return if needs_restart.is_empty() {
                ReloadOutcome::Unchanged
            } else {
                ReloadOutcome::Applied { needs_restart }
            };
        }
        let applied = Arc::new(applied);
        self.inner.current.store(applied.clone());
        self.inner.changed.send_replace(applied);
        tracing::info!("config reloaded");
        ReloadOutcome::Applied { needs_restart }
    }

    /// Watch the file and reload on change until the handle's last clone is dropped.
    /// Returns the OS watcher, which must be kept alive.
    pub fn watch(&self) -> Result<Option<FileWatcher>, ConfigError> {
        let Some(path) = self.inner.path.clone() else {
            return Ok(None);
        };
        let weak = Arc::downgrade(&self.inner);
        watch_path(&path, move || {
            let Some(inner) = weak.upgrade() else {
                return false;
            };
            let outcome = ConfigHandle { inner }.reload();
            tracing::debug!(?outcome, "config file changed");
            true
        })
        .map(Some)
    }
}

/// A file without backends is refused on reload: applying it would drop every backend,
/// and an editor that truncates before it writes shows the watcher just such a file.
/// (At start an empty file still runs, with no backends, as it always has.)
fn refuse_no_backends(path: &Path, next: Config) -> Result<Config, ConfigError> {
    if next.backends.is_empty() {
        return Err(ConfigError::Invalid {
            path: path.display().to_string(),
            problems: vec![
                "no backends: a reloaded file must define at least one (an empty or comment-only file is not applied)".to_owned(),
            ],
        });
    }
    Ok(next)
}

/// The directory `path` lies in, and its file name.
fn dir_and_name(path: &Path) -> (PathBuf, Option<std::ffi::OsString>) {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    (dir, path.file_name().map(|n| n.to_owned()))
}

/// Call `on_change` after each burst of changes counted once: editors write in bursts
/// (truncate, write, rename), so the burst settles for 150 ms first. Ends when
/// `changes` ends or `on_change` returns false.
async fn settle_and_call(
    mut changes: impl futures_util::Stream<Item = ()> + Unpin,
    on_change: impl Fn() -> bool,
) {
    use futures_util::{FutureExt, StreamExt};
    while changes.next().await.is_some() {
        tokio::time::sleep(Duration::from_millis(150)).await;
        while let Some(Some(())) = changes.next().now_or_never() {}
        if !on_change() {
            break;
        }
    }
}

/// The OS watch behind [`watch_path`]; the watching stops when it is dropped.
#[cfg(target_os = "linux")]
pub struct FileWatcher {
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Call `on_change` (on a tokio task) after `path` changes, a burst of writes counted
/// once. Watches the parent directory, since editors save by rename. Stops when
/// `on_change` returns false or the returned watcher is dropped.
///
/// On Linux, inotify is asked only for what a save does — a file written and closed,
/// created, moved in or out, deleted, or its attributes changed — and read on a tokio
/// task: not for every write or open in the directory, which the `notify` crate
/// subscribes to and wakes its own thread for. A log file next to the config (`glider
/// serve > glider.log` in the config's directory) otherwise woke that thread on every
/// line, once a request: 1.7 of a forwarded request's 3.6 context switches, and a
/// sixth of its throughput on one core (`bench/results/2026-12-04-perf3.md`).
#[cfg(target_os = "linux")]
pub fn watch_path(
    path: &Path,
    on_change: impl Fn() -> bool + Send + 'static,
) -> Result<FileWatcher, ConfigError> {
    use futures_util::StreamExt;
    use inotify::{Inotify, WatchMask};
    let (dir, file_name) = dir_and_name(path);
    let io_error = |e: std::io::Error| ConfigError::Read {
        path: path.display().to_string(),
        source: e,
    };
    let inotify = Inotify::init().map_err(io_error)?;
    inotify
        .watches()
        .add(
            &dir,
            WatchMask::CLOSE_WRITE
                | WatchMask::CREATE
                | WatchMask::MOVED_TO
                | WatchMask::MOVED_FROM
                | WatchMask::DELETE
                | WatchMask::ATTRIB,
        )
        .map_err(io_error)?;
    let events = inotify.into_event_stream([0u8; 4096]).map_err(io_error)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let changes = events
        .filter_map(move |event| {
            let ours = match event {
                Ok(event) => event.name.is_some() && event.name == file_name,
                // The watch itself failed (the queue overflowed): the file may have
                // changed; reading it again is the safe answer.
                Err(_) => true,
            };
            std::future::ready(ours.then_some(()))
        })
        .take_until(stopped);
    glider_sys::safego::spawn_once(
        "config watcher",
        settle_and_call(Box::pin(changes), on_change),
    );
    Ok(FileWatcher { _stop: stop })
}

/// The OS watch behind [`watch_path`]; the watching stops when it is dropped.
#[cfg(not(target_os = "linux"))]
pub type FileWatcher = notify::RecommendedWatcher;

/// Call `on_change` (on a tokio task) after `path` changes, a burst of writes counted
/// once. Watches the parent directory, since editors save by rename. Stops when
/// `on_change` returns false or the returned watcher is dropped.
#[cfg(not(target_os = "linux"))]
pub fn watch_path(
    path: &Path,
    on_change: impl Fn() -> bool + Send + 'static,
) -> Result<FileWatcher, ConfigError> {
    let (dir, file_name) = dir_and_name(path);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the file (another `glider` command, an editor opening it) is not a
        // change; only writes, creates, renames and removals are.
        if let Ok(event) = event
            && !matches!(event.kind, notify::EventKind::Access(_))
            && event
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_owned()) == file_name)
        {
            let _ = tx.send(());
        }
    })
    .map_err(|e| watch_error(path, e))?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| watch_error(path, e))?;
    let changes = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    glider_sys::safego::spawn_once("config watcher", settle_and_call(changes, on_change));
    Ok(watcher)
}

#[cfg(not(target_os = "linux"))]
fn watch_error(path: &Path, e: notify::Error) -> ConfigError {
    ConfigError::Read {
        path: path.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    }

    const BASE: &str =
        "backends:\n  - {name: l, type: ollama, base_url: 'http://127.0.0.1:1', models: [m]}\n";

    #[tokio::test]
    async fn reload_applies_hot_keys_and_rejects_broken_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("glider.yaml");
        write(&path, BASE);
        let handle = ConfigHandle::new(Config::load(&path).expect("valid"), Some(path.clone()));

        write(&path, &format!("{BASE}model_aliases: {{gpt-4o: m}}\n"));
        assert_eq!(
            handle.reload(),
            ReloadOutcome::Applied {
                needs_restart: vec![]
            }
        );
        assert_eq!(handle.snapshot().resolve_alias("gpt-4o"), "m");

        write(&path, "backends: [oops\n");
        assert!(matches!(handle.reload(), ReloadOutcome::Rejected { .. }));
        assert_eq!(handle.snapshot().resolve_alias("gpt-4o"), "m");

        write(&path, &format!("{BASE}server: {{proxy_port: 9}}\n"));
        let outcome = handle.reload();
        assert!(
            matches!(&outcome, ReloadOutcome::Applied { needs_restart } if needs_restart.len() == 1),
            "{outcome:?}"
        );
        assert_eq!(handle.snapshot().server.proxy_port, 8080);
        assert!(handle.snapshot().model_aliases.is_empty());
    }

    #[test]
    fn reload_rejects_a_file_without_backends_and_keeps_the_old_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("glider.yaml");
        write(&path, BASE);
        let handle = ConfigHandle::new(Config::load(&path).expect("valid"), Some(path.clone()));
        // An editor that truncates before it writes, a file commented out, an empty list.
        for text in [
            "",
            "\n  \n",
            "# all commented out\n# backends:\n",
            "backends: []\n",
        ] {
            std::fs::write(&path, text).expect("write");
            let outcome = handle.reload();
            assert!(
                matches!(&outcome, ReloadOutcome::Rejected { error } if error.contains("no backends")),
                "{text:?}: {outcome:?}"
            );
            assert_eq!(handle.snapshot().backends.len(), 1, "{text:?}");
        }
    }

    #[tokio::test]
    async fn watcher_sees_a_rename_save() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("glider.yaml");
        write(&path, BASE);
        let handle = ConfigHandle::new(Config::load(&path).expect("valid"), Some(path.clone()));
        let mut changes = handle.subscribe();
        let _watcher = handle.watch().expect("watch");
        write(&path, &format!("{BASE}model_aliases: {{a: m}}\n"));
        tokio::time::timeout(Duration::from_secs(20), changes.changed())
            .await
            .expect("reload within 20 s")
            .expect("sender alive");
        assert_eq!(handle.snapshot().resolve_alias("a"), "m");
    }

    #[tokio::test]
    async fn only_the_watched_file_counts_not_its_neighbours() {
        use std::io::Write;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("glider.yaml");
        write(&path, BASE);
        let calls = Arc::new(AtomicUsize::new(0));
        let (tx, mut called) = tokio::sync::mpsc::unbounded_channel();
        let counted = calls.clone();
        let _watcher = watch_path(&path, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(());
            true
        })
        .expect("watch");
        // A log next to the config, written line by line and rotated: never a change.
        let log_path = dir.path().join("glider.log");
        let mut log = std::fs::File::create(&log_path).expect("log");
        for line in 0..100 {
            writeln!(log, "request {line}").expect("log line");
        }
        drop(log);
        std::fs::rename(&log_path, dir.path().join("glider.log.1")).expect("rotate");
        // Longer than a burst settles: a call for any of that would have come by now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "the neighbour is not the config"
        );
        // The config saved in place (written and closed, no rename) is one change.
        std::fs::write(&path, format!("{BASE}model_aliases: {{a: m}}\n")).expect("save");
        tokio::time::timeout(Duration::from_secs(20), called.recv())
            .await
            .expect("a change within 20 s")
            .expect("watcher alive");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
