//! A photo's state as the people who run a photo platform see it: ingesting, ingested,
//! processing, published, or failed *with the reason*. Read from records alone, never
//! from the job list: the row says how far a photo got and, after a final failure of
//! its processing, why (`Photo::failure`, written with the failure by the handler's
//! compensation); an upload ingest refused never gets a row, so its refusal is kept as
//! a [`RefusedUpload`] in the project, written the same way.
//!
//! Fail closed: a photo is `published` only while its files are servable at the
//! project's current subject revision.

use serde::Serialize;
use tessera_core::PhotoId;
use tessera_core::domain::Project;
use tessera_core::photo::Photo;
use tessera_core::ports::state_store::{Index, Query, StateStore, StoreError};

/// Where a photo is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PhotoState {
    /// Uploaded; ingest has not written its row yet.
    Ingesting,
    /// Ingested; faces not detected yet.
    Ingested,
    /// Being decided (detected, matched, blurred) or re-decided after a change.
    Processing,
    /// Withheld until it is re-decided after a subject change, while the sweep that
    /// re-decides the project's photos has ended without finishing (cancelled, or dead
    /// after its last attempt): read as `processing`, which it is again once that sweep
    /// is resumed, with the reason and how to resume it. Without it the photo would say
    /// `processing` for ever with nobody processing it.
    #[serde(rename = "processing")]
    Stalled {
        /// Which sweep ended, why, and what to do.
        reason: String,
    },
    /// Its files are served.
    Published,
    /// Refused or failed for good; nothing is served.
    Failed {
        /// What failed and what to do.
        reason: String,
    },
}

/// The state of a photo of `project` as the project is now: what every way in (the
/// API, the CLI, the console) says of it. A row whose files were decided before the
/// latest opt-out is not `published`, whatever its `published_at` says; and while the
/// sweep that would re-decide it has stalled, it says so.
pub fn current(row: &Photo, project: &Project) -> PhotoState {
    let now = state(row, row.servable(project.subjects_rev));
    match project.stalled_sweep() {
        Some(stall)
            if now == PhotoState::Processing
                && row.needs_reprocess(project.subjects_rev)
                && stall.left(&row.id.to_string()) =>
        {
            PhotoState::Stalled {
                reason: format!("{}: {}", row.file_name, stall.explain()),
            }
        }
        _ => now,
    }
}

/// The state of a photo from its row and whether the row's files are servable now.
pub fn state(row: &Photo, servable: bool) -> PhotoState {
    match (&row.failure, servable) {
        (_, true) => PhotoState::Published,
        (Some(reason), false) => PhotoState::Failed {
            reason: reason.clone(),
        },
        (None, false) if row.original_deleted_at.is_some() => PhotoState::Failed {
            reason: format!(
                "{}: its original was deleted under the project's retention, so it cannot be decided again; it stays unpublished",
                row.file_name
            ),
        },
        // Never decided: faces not detected yet. A photo published without a search (a
        // project with nobody opted out needs none) and withheld by an opt-out since
        // is being decided again, not waiting for its first look.
        (None, false)
            if row.faces.is_none() && row.published_at.is_none() && row.renditions.is_empty() =>
        {
            PhotoState::Ingested
        }
        (None, false) => PhotoState::Processing,
    }
}

pub use tessera_core::catalog::refusals::{
    RefusedUpload, forget_refusal, record_refusal, refusal, refusals,
};

/// One photo of a project and where it is.
#[derive(Debug, Clone)]
pub enum Listed {
    /// A photo with a row.
    Row(Box<Photo>, PhotoState),
    /// An upload refused before it got a row.
    Refused(RefusedUpload),
}

impl Listed {
    /// The photo's id.
    pub fn photo_id(&self) -> PhotoId {
        match self {
            Listed::Row(p, _) => p.id,
            Listed::Refused(r) => r.photo_id,
        }
    }
}

/// One page of a project's photos with their states, newest first: the rows, and the
/// refused uploads that never got one. At most `limit` photos after the photo id `after`
/// (the previous page's cursor), and the cursor after this page (`None` at the end). Both partitions are sorted by photo id, so reading `limit` of each after the
/// cursor holds every photo of the page: a photo among the newest `limit` of the merge is
/// among the newest `limit` of its own partition.
pub async fn project_photos_page(
    store: &dyn StateStore,
    project: &Project,
    after: Option<PhotoId>,
    limit: usize,
) -> Result<(Vec<Listed>, Option<PhotoId>), StoreError> {
    let after = after.map(|p| p.to_string());
    let (rows, more_rows) = newest::<Photo>(
        store,
        tessera_core::records::project_photos_partition(project.id),
        after.as_deref(),
        limit,
    )
    .await?;
    let (refused, more_refused) = newest::<RefusedUpload>(
        store,
        tessera_core::catalog::refusals::refused_partition(project.id),
        after.as_deref(),
        limit,
    )
    .await?;
    let mut out = merged(rows, refused, project);
    let more = out.len() > limit || more_rows || more_refused;
    out.truncate(limit);
    let next = if more {
        out.last().map(Listed::photo_id)
    } else {
        None
    };
    Ok((out, next))
}

/// Up to `limit` records of a by-parent partition, largest sort key first, after
/// `after`; and whether more may follow.
async fn newest<T: serde::de::DeserializeOwned>(
    store: &dyn StateStore,
    partition: String,
    after: Option<&str>,
    limit: usize,
) -> Result<(Vec<T>, bool), StoreError> {
    let mut q = Query::partition(Index::ByParent, partition, limit);
    q.descending = true;
    q.after = after.map(str::to_string);
    let mut out = Vec::new();
    loop {
        let page = store.query(&q).await?;
        for item in &page.items {
            out.push(tessera_core::records::decode(item)?);
        }
        match page.next {
            Some(n) if out.len() < limit => {
                q.after = Some(n);
                q.limit = limit - out.len();
            }
            Some(_) => return Ok((out, true)),
            None => return Ok((out, false)),
        }
    }
}

/// Rows with their states and the refusals that never got a row, newest first. A later
/// upload of the same photo that was ingested has a row: the row wins.
fn merged(rows: Vec<Photo>, refused: Vec<RefusedUpload>, project: &Project) -> Vec<Listed> {
    let mut out: Vec<Listed> = Vec::new();
    for row in rows {
        let s = current(&row, project);
        out.push(Listed::Row(Box::new(row), s));
    }
    let with_rows: std::collections::HashSet<PhotoId> = out.iter().map(Listed::photo_id).collect();
    for r in refused {
        if !with_rows.contains(&r.photo_id) {
            out.push(Listed::Refused(r));
        }
    }
    out.sort_by_key(|l| std::cmp::Reverse(l.photo_id()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Photo {
        serde_json::from_value(serde_json::json!({
            "id": PhotoId::new(), "project": tessera_core::ProjectId::new(), "upload_key": "u",
            "file_name": "a.jpg", "sha256": "0", "bytes": 1, "format": "jpeg", "width": 1,
            "height": 1, "sequencer": "0", "pipeline": "thumbnail_dims", "faces": null,
            "detector": null, "blur_regions": [], "edits_rev": 0, "variant_version": 1,
            "renditions": [], "upload_thumb_key": null, "staged_keys": [], "replaced_keys": [],
            "published_at": null, "created_at": 1, "rules": tessera_core::photo::RULES,
            "subjects_rev": 0,
        }))
        .unwrap()
    }

    fn project_at(subjects_rev: u64) -> Project {
        serde_json::from_value(serde_json::json!({
            "id": tessera_core::ProjectId::new(), "tenant": "local", "name": "p",
            "match_threshold": 0.363, "blur_expand": 0.35, "subjects_rev": subjects_rev,
            "opted_out": 1, "created_at": 1,
        }))
        .unwrap()
    }

    #[test]
    fn a_photo_published_without_a_search_and_withheld_by_an_opt_out_is_processing() {
        let mut row = row();
        assert_eq!(current(&row, &project_at(0)), PhotoState::Ingested);
        row.published_at = Some(tessera_core::Millis(5));
        assert_eq!(current(&row, &project_at(0)), PhotoState::Published);
        // An opt-out since: not served, and being decided again.
        assert_eq!(current(&row, &project_at(1)), PhotoState::Processing);
    }

    #[test]
    fn a_photo_a_stalled_sweep_did_not_reach_says_which_job_to_resume() {
        let mut row = row();
        row.published_at = Some(tessera_core::Millis(5));
        let mut project = project_at(2);
        project.sweep_stalled = Some(tessera_core::domain::SweepStall {
            subjects_rev: 2,
            job_id: "j-1".into(),
            reason: "job cancelled".into(),
            at: tessera_core::Millis(9),
            after: None,
        });
        let state = current(&row, &project);
        let v = serde_json::to_value(&state).unwrap();
        assert_eq!(v["status"], "processing", "{v}");
        let reason = v["reason"].as_str().unwrap();
        assert!(
            reason.contains("a.jpg")
                && reason.contains("job cancelled")
                && reason.contains("/v1/jobs/j-1:resume"),
            "{reason}"
        );
        // A photo an earlier part of the sweep reached (up to where the part that ended
        // started) has its own re-decision: processing, with no stall of its own.
        if let Some(stall) = project.sweep_stalled.as_mut() {
            stall.after = Some(row.id.to_string());
        }
        assert_eq!(current(&row, &project), PhotoState::Processing);
        if let Some(stall) = project.sweep_stalled.as_mut() {
            stall.after = None;
        }
        // Decided at the current subjects: the stall is not this photo's.
        row.subjects_rev = 2;
        assert_eq!(current(&row, &project), PhotoState::Published);
        // A stall of an older sweep is superseded by the current revision's sweep.
        row.subjects_rev = 0;
        project.subjects_rev = 3;
        assert_eq!(current(&row, &project), PhotoState::Processing);
    }

    #[test]
    fn a_failure_reads_as_failed_with_its_reason() {
        let v = serde_json::to_value(PhotoState::Failed {
            reason: "not an image".into(),
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "status": "failed", "reason": "not an image" })
        );
    }
}
