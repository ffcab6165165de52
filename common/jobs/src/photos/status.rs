//! A photo's state as the people who run a photo platform see it: ingesting, ingested,
//! processing, published, or failed *with the reason*. The row says how far a photo
//! got; the jobs about it say whether the last attempt failed and why (an upload that
//! was refused never gets a row, so only its ingest job knows it existed).
//!
//! Fail closed: a photo is `published` only while its files are servable at the
//! project's current subject revision; a photo whose last job failed reads as failed
//! even if older files exist, since those are not served either.

use super::{ObjectCreated, kinds};
use std::collections::HashMap;
use tessera_core::job::{Job, JobStatus};
use tessera_core::photo::{Photo, keys};
use tessera_core::{JobId, PhotoId, ProjectId, TenantId};
use tessera_engine::{Engine, EngineError};

/// Where a photo is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PhotoState {
    /// Uploaded; ingest has not written its row yet.
    Ingesting,
    /// Ingested; faces not detected yet.
    Ingested,
    /// Being decided (detected, matched, blurred) or re-decided after a change.
    Processing,
    /// Its files are served.
    Published,
    /// The last attempt failed; nothing is served.
    Failed {
        /// What failed and what to do.
        reason: String,
    },
}

/// One photo of a project, with its row where ingest wrote one.
#[derive(Debug, Clone)]
pub struct PhotoStatus {
    /// The photo.
    pub photo_id: PhotoId,
    /// Its file name as uploaded.
    pub name: String,
    /// The row, once ingested.
    pub row: Option<Photo>,
    /// Where it is.
    pub state: PhotoState,
    /// The last job about it.
    pub job_id: Option<JobId>,
}

/// The photo a job is about, for the per-photo job kinds; `None` for the others.
pub fn photo_of_job(job: &Job) -> Option<(PhotoId, Option<String>)> {
    match job.kind.as_str() {
        kinds::INGEST_JOB => {
            let event: ObjectCreated = serde_json::from_value(job.spec.clone()).ok()?;
            let key = event.object_key().ok()?;
            let (_, photo, name) = keys::parse_upload(&key).ok()?;
            Some((photo, Some(name)))
        }
        kinds::FACE_PROCESS_JOB | kinds::THUMBNAIL_DIMS_JOB | kinds::REPROCESS_JOB => {
            let photo = job.spec.get("photo")?.as_str()?.parse().ok()?;
            Some((photo, None))
        }
        _ => None,
    }
}

/// The state of a photo from its row (if any), whether the row's files are servable,
/// and its last job with that job's failure message.
pub fn state(
    row: Option<&Photo>,
    servable: bool,
    last_job: Option<(&Job, Option<&str>)>,
) -> PhotoState {
    if let Some((job, failure)) = last_job {
        match job.status() {
            JobStatus::Failed => {
                return PhotoState::Failed {
                    reason: failure
                        .unwrap_or("the photo's last job failed without a message")
                        .to_string(),
                };
            }
            JobStatus::Cancelled if !servable => {
                return PhotoState::Failed {
                    reason: "its processing was cancelled; reprocess it".into(),
                };
            }
            _ => {}
        }
    }
    match row {
        None => PhotoState::Ingesting,
        Some(_) if servable => PhotoState::Published,
        Some(p) if p.faces.is_none() => PhotoState::Ingested,
        Some(_) => PhotoState::Processing,
    }
}

/// The message of a failed job: its first failed task's last error.
pub async fn failure(engine: &Engine, job: &Job) -> Result<Option<String>, EngineError> {
    if job.status() != JobStatus::Failed {
        return Ok(None);
    }
    Ok(engine.job_tasks(job.id).await?.into_iter().find_map(|t| {
        t.last_error
            .filter(|_| {
                matches!(
                    t.state,
                    tessera_core::task::TaskState::Failed | tessera_core::task::TaskState::Dead
                )
            })
            .map(|e| e.message)
    }))
}

/// The last job about each photo of `project`, newest wins. Reads the tenant's job
/// list (a page at a time): jobs are the only record of an upload ingest refused.
pub async fn last_jobs(
    engine: &Engine,
    tenant: &TenantId,
    project: ProjectId,
) -> Result<HashMap<PhotoId, (Job, Option<String>)>, EngineError> {
    let mut out: HashMap<PhotoId, (Job, Option<String>)> = HashMap::new();
    let mut after = None;
    loop {
        let (jobs, next) = engine.list_jobs(tenant, after, 500).await?;
        for job in jobs.into_iter().filter(|j| j.project == Some(project)) {
            let Some((photo, name)) = photo_of_job(&job) else {
                continue;
            };
            let newer = out
                .get(&photo)
                .is_none_or(|(j, _)| j.created_at <= job.created_at);
            if newer {
                let name = name.or_else(|| out.get(&photo).and_then(|(_, n)| n.clone()));
                out.insert(photo, (job, name));
            }
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}

/// Every photo of a project with its state, newest first: the rows, and the uploads
/// whose ingest is running or failed.
pub async fn project_photos(
    engine: &Engine,
    tenant: &TenantId,
    project: ProjectId,
    subjects_rev: u64,
    rows: Vec<Photo>,
) -> Result<Vec<PhotoStatus>, EngineError> {
    let mut last = last_jobs(engine, tenant, project).await?;
    let mut out = Vec::new();
    for row in rows {
        let job = last.remove(&row.id);
        let failed = match &job {
            Some((j, _)) => failure(engine, j).await?,
            None => None,
        };
        let servable = row.servable(subjects_rev);
        out.push(PhotoStatus {
            photo_id: row.id,
            name: row.file_name.clone(),
            state: state(
                Some(&row),
                servable,
                job.as_ref().map(|(j, _)| (j, failed.as_deref())),
            ),
            job_id: job.map(|(j, _)| j.id),
            row: Some(row),
        });
    }
    // Uploads with no row: ingest is running, or refused them.
    for (photo, (job, name)) in last {
        if job.kind != kinds::INGEST_JOB || job.status() == JobStatus::Succeeded {
            continue;
        }
        let failed = failure(engine, &job).await?;
        out.push(PhotoStatus {
            photo_id: photo,
            name: name.unwrap_or_default(),
            row: None,
            state: state(None, false, Some((&job, failed.as_deref()))),
            job_id: Some(job.id),
        });
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.photo_id.to_string()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_photo_without_a_row_or_job_is_ingesting_and_a_failure_wins_over_old_files() {
        assert_eq!(state(None, false, None), PhotoState::Ingesting);
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
