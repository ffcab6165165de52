//! `ingest`: an object-created event for an upload becomes a photo row, and the job that
//! processes it is chosen.
//!
//! Duplicate and reordered events are harmless: the photo id is in the upload key, the
//! row is created only if absent, an event older than the row's (by sequencer) is
//! ignored, and the follow-up job is deduplicated by its spec. A bad upload is refused
//! before anything is written.
//!
//! An upload key whose bytes changed after it was ingested (a second PUT through a
//! presigned URL, an overwrite in the bucket) is refused, and its photo is unpublished in
//! the same step: the published files were decided about other pixels.

use super::project::PhotoError;
use super::{ObjectCreated, follow_up_plan, row as photo_row, sequencer_older, upload, view};
use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tessera_core::Millis;
use tessera_core::event::Phase;
use tessera_core::photo::{Photo, Pipeline, keys};
use tessera_core::ports::state_store::{Condition, Write};
use tessera_core::records;
use tessera_engine::{TaskContext, TaskError, TaskHandler, TaskOutput};

/// The handler.
pub struct Ingest;

/// Why a late event for an erased photo is dropped; such a photo must leave no record
/// beyond its tombstone, so no refusal is written for it.
const ERASED_LATE: &str = "was erased; an event for it arrived late and is ignored";

fn refuse(key: &str, why: String) -> TaskError {
    TaskError::permanent(format!("upload `{key}` refused: {why}"))
}

#[async_trait]
impl TaskHandler for Ingest {
    /// A run of a second or two: its events go with its end.
    fn defers_events(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let event: ObjectCreated =
            serde_json::from_value(ctx.task().payload.clone()).map_err(|e| {
                TaskError::poison(format!(
                    "ingest payload is not an object-created event: {e}"
                ))
            })?;
        let key = event.object_key().map_err(TaskError::poison)?;
        let (project_id, photo_id, name) = keys::parse_upload(&key).map_err(TaskError::poison)?;
        let store = ctx.ports().store.as_ref();
        // First of all: an event for an erased photo or project (it may arrive after the
        // object is gone) leaves no trace, not even a refusal.
        for (target, what) in [
            (format!("photo/{photo_id}"), format!("photo {photo_id}")),
            (
                format!("project/{project_id}"),
                format!("the project of photo {photo_id}"),
            ),
        ] {
            if store
                .get(&tessera_core::catalog::erasure::marker_key(&target))
                .await?
                .is_some()
            {
                return Err(TaskError::permanent(format!("{what} {ERASED_LATE}")));
            }
        }
        let project = view::for_photo(store, ctx.ports().objects.as_ref(), project_id, photo_id)
            .await
            .map_err(|e| match e {
                PhotoError::NotFound(m) => refuse(&key, m),
                other => TaskError::from_classified(other),
            })?;
        let objects = ctx.ports().objects.as_ref();
        let Some(meta) = objects.head(&key).await? else {
            return Err(TaskError::poison(format!(
                "upload `{key}` is not in the object store (deleted, or the event is stale)"
            )));
        };
        // Refused before it is read: a 5 GB object put through a presigned URL must not
        // take the function (and the other messages of its batch) down.
        if meta.size > tessera_imaging::decode::MAX_BYTES {
            return Err(refuse(
                &key,
                format!(
                    "`{name}` is {} MiB, more than the {} MiB a photo may be; upload a smaller export",
                    meta.size >> 20,
                    tessera_imaging::decode::MAX_BYTES >> 20
                ),
            ));
        }
        let existing: Option<Photo> = match store.get(&records::photo_key(photo_id)).await? {
            Some(item) => Some(records::decode(&item)?),
            None => None,
        };
        if let Some(row) = &existing
            && sequencer_older(&event.sequencer, &row.sequencer)
        {
            tracing::info!(photo = %photo_id, sequencer = %event.sequencer, row_sequencer = %row.sequencer, "older event; ignored");
            return Ok(TaskOutput::result(serde_json::json!({
                "photo": photo_id, "ignored": "an older event for an upload already ingested",
            })));
        }
        let started = ctx.phase_started(Phase::Ingest).await?;
        let bytes = objects.get(&key).await?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let row = match existing {
            Some(row) => {
                if row.sha256 != sha256 {
                    ctx.commit(vec![photo_row::unpublish(photo_id)]).await?;
                    super::withdraw::delete_files(objects, &row)
                        .await
                        .map_err(TaskError::from_classified)?;
                    tracing::warn!(photo = %photo_id, key, "upload changed after ingest; photo unpublished and its files deleted");
                    return Err(refuse(
                        &key,
                        format!(
                            "photo {photo_id} was ingested with other content (sha256 {}); it is unpublished until its original upload is restored; upload a changed photo as a new photo",
                            &row.sha256[..12]
                        ),
                    ));
                }
                tracing::info!(photo = %photo_id, "duplicate event; the row exists");
                row
            }
            None => {
                let size = bytes.len() as u64;
                let check_name = name.clone();
                let decoded =
                    tokio::task::spawn_blocking(move || upload::decode(&check_name, &bytes))
                        .await
                        .map_err(|e| TaskError::transient(format!("decoder thread: {e}")))?
                        .map_err(|e| refuse(&key, e.0))?;
                let pipeline = if project.match_threshold.is_some() && project.opted_out == 0 {
                    Pipeline::ThumbnailDims
                } else {
                    Pipeline::FaceProcess
                };
                let row = Photo {
                    id: photo_id,
                    project: project_id,
                    upload_key: key.clone(),
                    file_name: name,
                    sha256: sha256.clone(),
                    bytes: size,
                    format: decoded.format.as_str().into(),
                    width: decoded.rgb.width(),
                    height: decoded.rgb.height(),
                    orientation: decoded.orientation.exif(),
                    rules: tessera_core::photo::RULES,
                    subjects_rev: 0,
                    sequencer: event.sequencer.clone(),
                    pipeline,
                    faces: None,
                    embeddings_key: None,
                    detector: None,
                    blur_regions: Vec::new(),
                    edits_rev: 0,
                    variant_version: 0,
                    renditions: Vec::new(),
                    upload_thumb_key: None,
                    staged_keys: Vec::new(),
                    replaced_keys: Vec::new(),
                    published_at: None,
                    rendered: None,
                    original_deleted_at: None,
                    failure: None,
                    created_at: Millis::now(),
                };
                super::fault::pause_point(super::fault::INGEST_BEFORE_ROW).await?;
                // An erased photo stays erased, whatever event arrives late.
                let mut writes = vec![
                    Write::Put {
                        item: records::photo_item(&row),
                        condition: Condition::Absent,
                    },
                    super::erase::not_erased(photo_id),
                ];
                if let Some(days) = project.upload_retention_days {
                    writes.push(tessera_core::catalog::retention::marker(&row, days));
                }
                ctx.commit(writes).await?;
                row
            }
        };
        let follow = ctx
            .submit(follow_up_plan(
                project.tenant.clone(),
                project_id,
                photo_id,
                &row.sha256,
                row.pipeline,
            ))
            .await?;
        ctx.phase_completed(Phase::Ingest, started).await?;
        tracing::info!(photo = %photo_id, project = %project_id, pipeline = ?row.pipeline, follow_up = %follow.job_id, "ingested");
        Ok(TaskOutput::result(serde_json::json!({
            "photo": photo_id, "pipeline": row.pipeline, "follow_up": follow.job_id,
            "width": row.width, "height": row.height, "orientation": row.orientation,
        })))
    }

    fn raises_notices(&self) -> bool {
        true
    }

    /// A refused upload is a photo that failed: `photo.failed`, with the reason its
    /// project records (an upload erased before it was read is no one's news).
    fn notices(
        &self,
        task: &tessera_core::task::Task,
        job: &tessera_core::job::Job,
    ) -> Vec<tessera_core::notify::Notice> {
        use tessera_core::task::TaskState;
        if !matches!(task.state, TaskState::Failed | TaskState::Dead) {
            return Vec::new();
        }
        let Some((project, photo_id, name, reason)) = refused_upload(task) else {
            return Vec::new();
        };
        vec![super::notices::failed(
            photo_id,
            project,
            task,
            job,
            reason,
            Some(&name),
        )]
    }

    /// An upload refused for good has no row: the refusal is recorded in its project, so
    /// the photo reads as failed with the reason instead of vanishing.
    fn compensate(&self, task: &tessera_core::task::Task) -> Vec<Write> {
        let Some((project, photo_id, name, reason)) = refused_upload(task) else {
            return Vec::new();
        };
        vec![super::status::record_refusal(
            &super::status::RefusedUpload {
                photo_id,
                project,
                name,
                reason,
                at: Millis::now(),
            },
        )]
    }
}

/// The upload task `task` was refused for good: (its project, photo id, file name, the
/// reason). `None` when it was erased before it was read, or names no upload.
fn refused_upload(
    task: &tessera_core::task::Task,
) -> Option<(
    tessera_core::ProjectId,
    tessera_core::PhotoId,
    String,
    String,
)> {
    let reason = task.failure_message("ingest ended without success");
    if reason.contains(ERASED_LATE) {
        return None;
    }
    let event = serde_json::from_value::<ObjectCreated>(task.payload.clone()).ok()?;
    let (project, photo_id, name) = event
        .object_key()
        .ok()
        .and_then(|k| keys::parse_upload(&k).ok())?;
    Some((project, photo_id, name, reason))
}
