//! `thumbnail_dims`: for projects where nobody opted out, publish the upload as it is,
//! with a thumbnail. It acts only on a row whose variant version is 0, so a message
//! re-sent from the archive never undoes what face processing wrote.

use super::{payload_photo, render, row, upload};
use async_trait::async_trait;
use tessera_core::Millis;
use tessera_core::event::Phase;
use tessera_core::photo::{Rendition, keys};
use tessera_core::ports::state_store::Write;
use tessera_core::task::Task;
use tessera_engine::{TaskContext, TaskError, TaskHandler, TaskOutput};

/// The handler.
pub struct ThumbnailDims;

#[async_trait]
impl TaskHandler for ThumbnailDims {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let id = payload_photo(ctx.task())?;
        let store = ctx.ports().store.as_ref();
        let photo = row::load(store, id).await?;
        if photo.variant_version != 0 {
            tracing::info!(photo = %id, version = photo.variant_version, "thumbnail_dims: face processing owns this photo; nothing to do");
            return Ok(TaskOutput::result(serde_json::json!({
                "photo": id, "skipped": "the photo has processed variants",
            })));
        }
        let started = ctx.phase_started(Phase::Publish).await?;
        let bytes = ctx.ports().objects.get(&photo.upload_key).await?;
        let name = photo.file_name.clone();
        let thumb = tokio::task::spawn_blocking(move || {
            let d = upload::decode(&name, &bytes)?;
            render::jpeg(&render::thumbnail(&d.rgb))
        })
        .await
        .map_err(|e| TaskError::transient(format!("thumbnail worker thread: {e}")))?
        .map_err(TaskError::permanent)?;
        let thumb_key = keys::upload_thumb(photo.project, id);
        ctx.ports().objects.put(&thumb_key, thumb.into()).await?;
        ctx.commit(vec![row::set(
            id,
            0,
            vec![("upload_thumb_key", row::json(&thumb_key))],
        )])
        .await?;
        let renditions = vec![Rendition {
            variant: None,
            key: photo.upload_key.clone(),
            thumb_key: thumb_key.clone(),
        }];
        ctx.phase_completed(Phase::Publish, started).await?;
        Ok(TaskOutput {
            result: serde_json::json!({ "photo": id, "published": photo.upload_key, "thumb": thumb_key }),
            writes: vec![row::set(
                id,
                0,
                vec![
                    ("renditions", row::json(&renditions)),
                    ("published_at", row::json(&Millis::now())),
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
