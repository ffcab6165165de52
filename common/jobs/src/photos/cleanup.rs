//! `cleanup`: after a version is published, delete the objects the row no longer points
//! at: the ones it replaced, and orphans a crashed attempt uploaded but never recorded.
//! Never the upload or its thumbnail, never a key the row points at or has staged.

use super::{payload_photo, row};
use async_trait::async_trait;
use std::collections::BTreeSet;
use tessera_core::photo::keys;
use tessera_engine::{TaskContext, TaskError, TaskHandler, TaskOutput};

/// The handler.
pub struct Cleanup;

#[async_trait]
impl TaskHandler for Cleanup {
    /// A run of a second or two: its events go with its end.
    fn defers_events(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let id = payload_photo(ctx.task())?;
        let ports = ctx.ports();
        // List first, then read the row: a newer run stages its keys on the row before
        // uploading them, so anything it uploaded that the listing saw is staged there.
        let Some(first) = row::find(ports.store.as_ref(), id).await? else {
            return Ok(row::erased(id));
        };
        let prefix = keys::derived_prefix(first.project, id);
        let mut listed = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, next) = ports.objects.list(&prefix, after.as_deref(), 1000).await?;
            listed.extend(page.into_iter().map(|m| m.key));
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let Some(photo) = row::find(ports.store.as_ref(), id).await? else {
            return Ok(row::erased(id));
        };
        let keep: BTreeSet<&str> = photo
            .referenced_keys()
            .into_iter()
            .chain(photo.staged_keys.iter().map(String::as_str))
            .collect();
        let doomed: BTreeSet<String> = listed
            .iter()
            .chain(&photo.replaced_keys)
            .filter(|k| !keep.contains(k.as_str()) && !photo.is_protected(k))
            .cloned()
            .collect();
        for k in &doomed {
            ports.objects.delete(k).await?;
        }
        let remaining: Vec<&String> = photo
            .replaced_keys
            .iter()
            .filter(|k| !doomed.contains(*k))
            .collect();
        tracing::info!(photo = %id, deleted = doomed.len(), "cleanup");
        Ok(TaskOutput {
            result: serde_json::json!({ "photo": id, "deleted": doomed }),
            writes: vec![row::set(
                id,
                photo.variant_version,
                vec![("replaced_keys", row::json(&remaining))],
            )],
            moved_on: Vec::new(),
            taken_over: None,
        })
    }
}
