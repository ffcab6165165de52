//! The ingest stage: the dataset's images checked and copied in, with the facts (size,
//! camera, GPS) the later stages and the report need.

use super::*;

impl Run<'_> {
    pub(super) async fn ingest(&self) -> Result<Value, TaskError> {
        let objects = self.ctx.ports().objects.clone();
        let dir = self.scratch.join("images");
        fresh_dir(&dir)?;
        let photos = crate::reconstruct::image_set::list(
            self.ctx.ports().store.as_ref(),
            objects.as_ref(),
            &self.ctx.job().tenant,
            &self.spec.image_set,
            self.spec.image_set_digest.as_deref(),
        )
        .await?;
        let total = photos.len() as u64;
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        let ingest_started = self.ctx.phase_started(Phase::Ingest).await?;
        for (i, photo) in photos.iter().enumerate() {
            let (name, key) = (photo.name.clone(), &photo.key);
            // A record whose bytes are gone (a deletion that failed half-way) is refused
            // by name like any unusable photo, not a reason to fail the run.
            let fetched = match objects.get(key).await {
                Ok(b) => Ok(b),
                Err(tessera_core::ports::object_store::ObjectStoreError::NotFound(_)) => {
                    Err(format!(
                        "`{name}`: its bytes are missing from the store; delete the image and register it again"
                    ))
                }
                Err(e) => return Err(e.into()),
            };
            let checked = fetched.and_then(|bytes| {
                images::check(&name, &bytes)
                    .map(|size| (bytes, size))
                    .map_err(|why| why.to_string())
            });
            match checked {
                Ok((bytes, (width, height))) => {
                    let (focal_mm, gps) = images::exif_facts(&bytes);
                    let upright = if self.spec.respect_exif_orientation {
                        let n = name.clone();
                        let b = bytes.clone();
                        tokio::task::spawn_blocking(move || images::upright(&n, &b))
                            .await
                            .map_err(|e| TaskError::transient(format!("worker thread: {e}")))?
                            .map_err(TaskError::from_classified)?
                    } else {
                        None
                    };
                    // A turned photo is stored upright beside the stage's checkpoint, so
                    // later stages (and retries) fetch the turned bytes.
                    let (bytes, key, width, height) = match upright {
                        Some(u) => {
                            let k = format!(
                                "{}/upright/{name}",
                                checkpoint::prefix(self.job, Stage::Ingest.name())
                            );
                            objects.put(&k, u.jpeg.clone().into()).await?;
                            (bytes::Bytes::from(u.jpeg), k, u.width, u.height)
                        }
                        None => (bytes, key.clone(), width, height),
                    };
                    std::fs::write(dir.join(&name), &bytes)
                        .map_err(io(format!("writing {name}")))?;
                    accepted.push(PhotoFacts {
                        name,
                        key,
                        sha256: hex::encode(Sha256::digest(&bytes)),
                        width,
                        height,
                        focal_mm,
                        gps,
                        focal_plane: images::focal_plane(&bytes),
                    });
                }
                Err(why) => {
                    self.ctx
                        .emit(EventKind::Warning {
                            message: format!("skipping {why}"),
                        })
                        .await?;
                    rejected.push(json!({ "name": name, "why": why }));
                }
            }
            self.ctx
                .progress(Phase::Ingest, i as u64 + 1, Some(total), None)
                .await?;
        }
        self.ctx
            .phase_completed(Phase::Ingest, ingest_started)
            .await?;
        if accepted.len() < 2 {
            let why: Vec<String> = rejected
                .iter()
                .filter_map(|r| r["why"].as_str().map(str::to_owned))
                .collect();
            return Err(TaskError::permanent(format!(
                "a reconstruction needs at least 2 photos; `{}` holds {} usable of {} files{}",
                self.spec.image_set,
                accepted.len(),
                total,
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join("; "))
                }
            )));
        }
        let with_gps = accepted.iter().filter(|p| p.gps.is_some()).count();
        if matches!(self.spec.pairs, PairStrategy::Spatial { .. }) && with_gps < 2 {
            return Err(TaskError::permanent(format!(
                "spatial pairs need EXIF GPS, and only {with_gps} of {} photos have it; use `--pairs sequential` or `exhaustive`",
                accepted.len()
            )));
        }
        // Asked for, georeferencing needs GPS; chosen, the georeference stage says so.
        if matches!(self.spec.georef, Georef::Gps { .. })
            && !self.spec.georef_if_possible
            && with_gps < 3
        {
            return Err(TaskError::permanent(format!(
                "georeferencing from GPS needs at least 3 photos with EXIF GPS, and {with_gps} of {} have it; leave out `--georef gps`",
                accepted.len()
            )));
        }
        let megapixels = accepted
            .iter()
            .map(|p| (p.width * p.height) as f64 / 1e6)
            .sum::<f64>()
            / accepted.len() as f64;
        self.ctx
            .metric("images_accepted", accepted.len() as f64, None)
            .await?;
        let result = json!({ "images": accepted, "rejected": rejected, "mean_megapixels": megapixels, "with_gps": with_gps });
        self.publish(Stage::Ingest, &dir, &[], result).await
    }
}
