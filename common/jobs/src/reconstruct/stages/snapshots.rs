//! The mapper's snapshots: found in its output as it runs, numbered and sealed one at a
//! time, so a client can watch a model grow and a resumed job starts from the last one.

use super::*;

impl Run<'_> {
    /// The latest sealed snapshot in the object store, materialised locally.
    pub(super) async fn latest_snapshot(
        &self,
        dir: &Path,
    ) -> Result<Option<(u64, PathBuf)>, TaskError> {
        let objects = self.ctx.ports().objects.clone();
        let prefix = checkpoint::snapshots_prefix(self.job);
        let latest = checkpoint::sealed_snapshots(objects.as_ref(), self.job)
            .await?
            .last()
            .copied();
        let Some(seq) = latest else { return Ok(None) };
        let local = dir.join("resume").join(seq.to_string());
        fresh_dir(&local)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            objects
                .get_to_file(&format!("{prefix}{seq}/{f}"), &local.join(f))
                .await?;
        }
        match model_bin::read(&local) {
            Ok(_) => Ok(Some((seq, local))),
            Err(e) => {
                self.ctx
                    .emit(EventKind::Warning {
                        message: format!(
                            "sealed snapshot {seq} does not parse ({e}); mapping starts over"
                        ),
                    })
                    .await?;
                Ok(None)
            }
        }
    }

    /// Watch COLMAP's snapshot folder; seal each complete snapshot (temp folder →
    /// `.complete` marker → atomic rename), upload it (marker last) and announce it.
    pub(super) fn seal_snapshots<'a>(
        &'a self,
        live: &'a Path,
        dir: &'a Path,
        first_seq: u64,
    ) -> impl FnOnce(
        tokio_util::sync::CancellationToken,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send + 'a>>
    + 'a {
        move |stop| {
            Box::pin(async move {
                let mut seen = BTreeSet::new();
                let mut seq = first_seq;
                let mut sealed = 0;
                let sealed_root = dir.join("snapshots");
                let _ = std::fs::create_dir_all(&sealed_root);
                loop {
                    let stopping = stop.is_cancelled();
                    let mut names: Vec<_> = std::fs::read_dir(live)
                        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
                        .unwrap_or_default();
                    names.sort();
                    for snap in names {
                        if seen.contains(&snap) {
                            continue;
                        }
                        // Only its counts are kept: the model is dropped before the awaits.
                        let summary = match model_bin::read(&snap) {
                            Ok(model) => SnapshotSummary {
                                registered_images: model.images.len() as u64,
                                points: model.points.len() as u64,
                                cameras: model.cameras.len() as u64,
                            },
                            Err(_) => continue,
                        };
                        seen.insert(snap.clone());
                        // A number no other attempt will ever use, or none: this
                        // attempt lost its lease and must not write snapshots.
                        match self.allocate_snapshot(seq).await {
                            Ok(n) => seq = n,
                            Err(e) => {
                                tracing::warn!(job = %self.job, error = %e.message, "snapshot not sealed");
                                continue;
                            }
                        }
                        if self
                            .seal_one(&snap, &sealed_root, seq, summary)
                            .await
                            .is_ok()
                        {
                            sealed += 1;
                            crate::photos::fault::crash_point(
                                crate::photos::fault::AFTER_SNAPSHOT_SEALED,
                            );
                        }
                    }
                    if stopping {
                        return sealed;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            })
        }
    }

    /// The next snapshot number, under this task's fence.
    pub(super) async fn allocate_snapshot(&self, after: u64) -> Result<u64, TaskError> {
        checkpoint::allocate_snapshot(self.ctx.ports().store.as_ref(), self.job, after, |w| {
            self.ctx.commit(w)
        })
        .await
    }

    pub(super) async fn seal_one(
        &self,
        snap: &Path,
        sealed_root: &Path,
        seq: u64,
        summary: SnapshotSummary,
    ) -> Result<(), TaskError> {
        let tmp = sealed_root.join(format!(".tmp_{seq}"));
        fresh_dir(&tmp)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            std::fs::copy(snap.join(f), tmp.join(f))
                .map_err(io(format!("copying snapshot {f}")))?;
        }
        std::fs::write(tmp.join(".complete"), b"").map_err(io("writing the snapshot marker"))?;
        let final_dir = sealed_root.join(seq.to_string());
        let _ = std::fs::remove_dir_all(&final_dir);
        std::fs::rename(&tmp, &final_dir).map_err(io("sealing the snapshot"))?;
        let prefix = format!(
            "{}/snapshots/{seq}",
            checkpoint::prefix(self.job, Stage::Map.name())
        );
        let objects = self.ctx.ports().objects.clone();
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            objects
                .put_file(&format!("{prefix}/{f}"), &final_dir.join(f))
                .await?;
        }
        // The marker last, and only once: a sealed snapshot is never sealed again.
        match objects
            .put_if_absent(&format!("{prefix}/.complete"), bytes::Bytes::new())
            .await
        {
            Ok(_) | Err(tessera_core::ports::ObjectStoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        self.ctx
            .emit(EventKind::SnapshotAvailable {
                key: prefix,
                snapshot: seq,
                summary: Some(summary),
            })
            .await?;
        Ok(())
    }
}
