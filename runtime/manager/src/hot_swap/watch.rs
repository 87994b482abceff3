//! Change notifications for the directories holding a provider's files.
//!
//! Directories, not files, are watched: kubelet replaces a ConfigMap volume's content
//! by renaming the `..data` symlink, which a watch on the old files would never see.
//! Every change in a watched directory wakes the reloader, which debounces and compares
//! content hashes, so spurious events cost one read. Reads (open, access, close
//! without writing) are not changes: the host reads credential files beside the
//! provider on every request, and the reloader reads the files it watches.

use std::path::PathBuf;
use std::sync::Arc;

use notify::{RecursiveMode, Watcher};
use tokio::sync::Notify;

/// Keeps the watches alive; dropping it stops them.
pub struct DirWatcher {
    _watcher: notify::RecommendedWatcher,
}

/// Watches `dirs` (non-recursively), waking `changed` on every event.
pub fn watch(dirs: &[PathBuf], changed: Arc<Notify>) -> notify::Result<DirWatcher> {
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if matches!(event.kind, notify::EventKind::Access(_)) => {}
            Ok(_) => changed.notify_one(),
            Err(err) => {
                tracing::warn!(error = %err, "file watch error; relying on the periodic rescan");
                changed.notify_one();
            }
        })?;
    for dir in dirs {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
    }
    Ok(DirWatcher { _watcher: watcher })
}
