//! `face_process` and `reprocess`: decide every face, blur, write the files of a new
//! version, publish last.
//!
//! Order of writes (each row write is conditional on the variant version, and fenced):
//! 1. faces, if the photo has none yet (detection happens once per photo; reprocess of
//!    a photo that was never detected detects for the first time);
//! 2. the new version: `variant_version + 1`, `published_at = null`, and every key of
//!    the new version *staged* before any upload;
//! 3. per rendition: upload the file and its thumbnail, then point the row at them (the
//!    keys they replace go to `replaced_keys`);
//! 4. with the task's success, in one transaction: `published_at = now`, nothing
//!    staged. The cleanup task deletes replaced and orphaned objects afterwards.
//!
//! A crash anywhere leaves the row unpublished or pointing at complete files; a retry
//! starts a newer version, so no object a row points at is ever overwritten.

use super::render::{self, VariantPlan};
use super::{FaceService, fault, payload_photo, project, row, upload};
use async_trait::async_trait;
use std::sync::Arc;
use tessera_core::Millis;
use tessera_core::event::Phase;
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Face, Photo, Rendition, keys};
use tessera_core::ports::state_store::Write;
use tessera_core::privacy::{self, FaceDecision, MatchPolicy, SubjectEmbeddings};
use tessera_core::task::Task;
use tessera_engine::{TaskContext, TaskError, TaskHandler, TaskOutput};

/// Which job this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// First processing after ingest.
    FaceProcess,
    /// Subjects or regions changed: re-decide and re-blur from stored faces.
    Reprocess,
}

/// The handler of both modes.
pub struct Process {
    /// The face models (loaded once per process).
    pub faces: Arc<FaceService>,
    /// Which job.
    pub mode: Mode,
}

fn blocking_err(e: tokio::task::JoinError) -> TaskError {
    TaskError::transient(format!("worker thread: {e}"))
}

/// Faces of `img` as stored on the row (decisions filled in later).
fn detect(
    models: &tessera_faces::FaceModels,
    img: &image::RgbImage,
) -> Result<Vec<Face>, tessera_faces::FaceError> {
    let (w, h) = img.dimensions();
    models
        .detect(img)?
        .into_iter()
        .map(|d| {
            Ok(Face {
                bbox: FracRect::from_pixels(d.bbox, w, h),
                landmarks: d.landmarks.map(|[x, y]| [x / w as f32, y / h as f32]),
                score: d.score,
                embedding: models.embed(img, &d.landmarks)?,
                decision: FaceDecision::FailClosed,
            })
        })
        .collect()
}

#[async_trait]
impl TaskHandler for Process {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let id = payload_photo(ctx.task())?;
        let ports = ctx.ports();
        let store = ports.store.as_ref();
        let photo = row::load(store, id).await?;
        let proj = project::load(store, photo.project)
            .await
            .map_err(TaskError::from_classified)?;
        let subjects: Vec<SubjectEmbeddings> = project::subjects(store, photo.project)
            .await?
            .into_iter()
            .map(|s| SubjectEmbeddings {
                subject: s.id,
                embeddings: s.embeddings,
            })
            .collect();
        let policy = MatchPolicy::from_threshold(proj.match_threshold);

        let bytes = ports.objects.get(&photo.upload_key).await?;
        let name = photo.file_name.clone();
        let img = Arc::new(
            tokio::task::spawn_blocking(move || upload::decode(&name, &bytes))
                .await
                .map_err(blocking_err)?
                .map_err(TaskError::permanent)?
                .rgb,
        );

        // 1. Faces: detected once per photo, kept for every later re-blur.
        let mut faces = match &photo.faces {
            Some(f) => f.clone(),
            None => {
                let started = ctx.phase_started(Phase::FaceDetection).await?;
                let models = self.faces.models()?;
                let detector = models.detector_kind().as_str();
                let pixels = img.clone();
                let found = tokio::task::spawn_blocking(move || detect(&models, &pixels))
                    .await
                    .map_err(blocking_err)?
                    .map_err(TaskError::from_classified)?;
                ctx.commit(vec![row::set(
                    id,
                    photo.variant_version,
                    vec![
                        ("faces", row::json(&found)),
                        ("detector", row::json(&detector)),
                    ],
                )])
                .await?;
                ctx.metric("faces", found.len() as f64, None).await?;
                ctx.phase_completed(Phase::FaceDetection, started).await?;
                tracing::info!(photo = %id, faces = found.len(), detector, "faces detected");
                found
            }
        };
        for f in &mut faces {
            f.decision = privacy::decide(&f.embedding, &subjects, policy);
        }
        let plans = render::plan(&faces, &photo.blur_regions, proj.blur_expand);
        ctx.checkpoint().await?;

        // 2. A new version, unpublished, with every key staged before any upload.
        let version = photo.variant_version + 1;
        let mut replaced = photo.replaced_keys.clone();
        let mut renditions = photo.renditions.clone();
        let staged: Vec<String> = plans
            .iter()
            .flat_map(|p| {
                let (k, t) = keys::rendition(photo.project, id, version, p.variant);
                [k, t]
            })
            .collect();
        let mut bump = vec![
            ("variant_version", row::json(&version)),
            ("published_at", serde_json::Value::Null),
            ("staged_keys", row::json(&staged)),
            ("faces", row::json(&faces)),
        ];
        let started = ctx.phase_started(Phase::Blur).await?;
        let mut upload_thumb = photo.upload_thumb_key.clone();
        if plans.is_empty() && upload_thumb.is_none() {
            let key = keys::upload_thumb(photo.project, id);
            let pixels = img.clone();
            let thumb =
                tokio::task::spawn_blocking(move || render::jpeg(&render::thumbnail(&pixels)))
                    .await
                    .map_err(blocking_err)?
                    .map_err(TaskError::permanent)?;
            ports.objects.put(&key, thumb.into()).await?;
            bump.push(("upload_thumb_key", row::json(&key)));
            upload_thumb = Some(key);
        }
        ctx.commit(vec![row::set(id, photo.variant_version, bump)])
            .await?;

        // 3. Files, each pointed at as soon as it is stored.
        if plans.is_empty() {
            replace(
                &photo,
                &mut renditions,
                &mut replaced,
                Rendition {
                    variant: None,
                    key: photo.upload_key.clone(),
                    thumb_key: upload_thumb.clone().expect("made above"),
                },
            );
        }
        for VariantPlan { variant, blur } in &plans {
            let pixels = img.clone();
            let blur = blur.clone();
            let out = tokio::task::spawn_blocking(move || render::render(&pixels, &blur))
                .await
                .map_err(blocking_err)?
                .map_err(TaskError::permanent)?;
            let (key, thumb_key) = keys::rendition(photo.project, id, version, *variant);
            ports.objects.put(&key, out.file.into()).await?;
            ports.objects.put(&thumb_key, out.thumb.into()).await?;
            fault::crash_point(fault::AFTER_VARIANT_UPLOAD);
            replace(
                &photo,
                &mut renditions,
                &mut replaced,
                Rendition {
                    variant: *variant,
                    key,
                    thumb_key,
                },
            );
            ctx.commit(vec![row::set(
                id,
                version,
                vec![
                    ("renditions", row::json(&renditions)),
                    ("replaced_keys", row::json(&replaced)),
                ],
            )])
            .await?;
            ctx.checkpoint().await?;
        }
        // Renditions for subjects no longer in the photo go.
        let wanted: Vec<_> = if plans.is_empty() {
            vec![None]
        } else {
            plans.iter().map(|p| p.variant).collect()
        };
        renditions.retain(|r| {
            let keep = wanted.contains(&r.variant);
            if !keep {
                retire(&photo, &mut replaced, r);
            }
            keep
        });
        ctx.phase_completed(Phase::Blur, started).await?;

        // 4. Publish: with the task's success, after every file is stored.
        let published_at = Millis::now();
        tracing::info!(photo = %id, version, files = renditions.len(), faces = faces.len(), "publishing");
        let summary = summary(&photo, version, &faces, &renditions, self.mode);
        Ok(TaskOutput {
            result: summary,
            writes: vec![row::set(
                id,
                version,
                vec![
                    ("renditions", row::json(&renditions)),
                    ("replaced_keys", row::json(&replaced)),
                    ("staged_keys", row::json(&Vec::<String>::new())),
                    ("published_at", row::json(&published_at)),
                ],
            )],
        })
    }

    fn compensate(&self, task: &Task) -> Vec<Write> {
        payload_photo(task)
            .map(row::unpublish)
            .into_iter()
            .collect()
    }
}

/// Queue a rendition's objects for deletion (never the upload or its thumbnail).
fn retire(photo: &Photo, replaced: &mut Vec<String>, old: &Rendition) {
    for k in [&old.key, &old.thumb_key] {
        if !photo.is_protected(k) && !replaced.contains(k) {
            replaced.push(k.clone());
        }
    }
}

/// Point the renditions at `new`, retiring what it replaces.
fn replace(
    photo: &Photo,
    renditions: &mut Vec<Rendition>,
    replaced: &mut Vec<String>,
    new: Rendition,
) {
    match renditions.iter_mut().find(|r| r.variant == new.variant) {
        Some(old) => {
            retire(photo, replaced, old);
            *old = new;
        }
        None => renditions.push(new),
    }
}

fn summary(
    photo: &Photo,
    version: u64,
    faces: &[Face],
    renditions: &[Rendition],
    mode: Mode,
) -> serde_json::Value {
    serde_json::json!({
        "photo": photo.id,
        "mode": format!("{mode:?}"),
        "variant_version": version,
        "faces": faces.len(),
        "blurred_in_public": faces.iter().filter(|f| f.decision.blurred_in(None)).count(),
        "files": renditions.len(),
    })
}
