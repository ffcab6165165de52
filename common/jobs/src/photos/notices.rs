//! The notices a photo's jobs raise about it: failed for good, and a served version
//! withheld. Written here once for every job that raises them (ingest, processing,
//! a regions edit), so that one event has one key and one payload whoever raises it.

use tessera_core::job::Job;
use tessera_core::notify::{Notice, NoticeType};
use tessera_core::photo::Photo;
use tessera_core::task::Task;
use tessera_core::{Millis, PhotoId, ProjectId};

/// `photo.failed` for photo `id` whose task `task` of `job` ended without success,
/// for `reason`: one notice per time its job ends so (a resumed job that fails again is
/// news).
pub(crate) fn failed(
    id: PhotoId,
    project: ProjectId,
    task: &Task,
    job: &Job,
    reason: String,
    file_name: Option<&str>,
) -> Notice {
    let mut data = serde_json::json!({ "photo_id": id, "reason": reason });
    if let Some(name) = file_name {
        data["file_name"] = name.into();
    }
    Notice::new(
        NoticeType::PhotoFailed,
        &format!(
            "photo/{id}/failed/{}/{}",
            task.job_id, job.counters.requeued
        ),
        job.tenant.clone(),
        Some(project),
        task.finished_at.unwrap_or_else(Millis::now),
        data,
    )
}

/// `photo.unpublished` for the version of `photo` served now: one notice per version
/// withheld, whatever withholds it (a re-decision, a regions edit).
pub(crate) fn unpublished(photo: &Photo, tenant: &tessera_core::TenantId, reason: &str) -> Notice {
    let version = photo.variant_version;
    Notice::new(
        NoticeType::PhotoUnpublished,
        &format!(
            "photo/{}/{}/{version}",
            photo.id,
            NoticeType::PhotoUnpublished.as_str()
        ),
        tenant.clone(),
        Some(photo.project),
        Millis::now(),
        serde_json::json!({
            "photo_id": photo.id, "variant_version": version,
            "file_name": photo.file_name, "reason": reason,
        }),
    )
}
