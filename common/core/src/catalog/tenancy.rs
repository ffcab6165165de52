//! What a tenant can reach: every lookup of a record by an id a caller gave, scoped to
//! the caller's tenant, in one place. Another tenant's record, a malformed id and a
//! missing record all answer the same [`CatalogError::NotFound`], so an id reveals
//! nothing of whether another tenant has it. The API's routes call these and never
//! compare tenants themselves; datasets and images have theirs beside their records
//! ([`super::datasets::dataset`], [`super::datasets::image`]), re-exported here.

use super::CatalogError;
use crate::domain::Project;
use crate::ids::{JobId, PhotoId, ProjectId, TenantId};
use crate::job::Job;
use crate::photo::Photo;
use crate::ports::StateStore;
use crate::records;

pub use super::datasets::{dataset, image};

/// At most this much of a caller's id is repeated in an answer.
const SHOWN: usize = 80;

fn shown(id: &str) -> String {
    id.chars().take(SHOWN).collect()
}

/// The project `id` of `tenant`.
pub async fn project(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<Project, CatalogError> {
    let missing = || CatalogError::NotFound(format!("project {} does not exist", shown(id)));
    let id: ProjectId = id.parse().map_err(|_| missing())?;
    let item = store
        .get(&records::project_key(id))
        .await?
        .ok_or_else(missing)?;
    let p: Project = records::decode(&item)?;
    if &p.tenant != tenant {
        return Err(missing());
    }
    Ok(p)
}

/// The job `id` of `tenant`, of any kind.
pub async fn job(store: &dyn StateStore, tenant: &TenantId, id: &str) -> Result<Job, CatalogError> {
    job_as(store, tenant, id, None, "job").await
}

/// The job `id` of `tenant` if it is of `kind`; `noun` names it in the answer
/// ("reconstruction"): a job of another kind does not exist under that name.
pub async fn job_of_kind(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
    kind: &str,
    noun: &str,
) -> Result<Job, CatalogError> {
    job_as(store, tenant, id, Some(kind), noun).await
}

async fn job_as(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
    kind: Option<&str>,
    noun: &str,
) -> Result<Job, CatalogError> {
    let missing = || CatalogError::NotFound(format!("{noun} {} does not exist", shown(id)));
    let id: JobId = id.parse().map_err(|_| missing())?;
    let item = store
        .get(&records::job_key(id))
        .await?
        .ok_or_else(missing)?;
    let job = records::job_from(&item)?;
    if &job.tenant != tenant || kind.is_some_and(|k| job.kind != k) {
        return Err(missing());
    }
    Ok(job)
}

/// The photo `id` of `tenant`, with its project (whose subject revision says whether
/// the photo's files may be served).
pub async fn photo(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<(Photo, Project), CatalogError> {
    let missing = || {
        CatalogError::NotFound(format!(
            "photo {} does not exist (yet: ingest may still be running)",
            shown(id)
        ))
    };
    let pid: PhotoId = id.parse().map_err(|_| missing())?;
    let item = store
        .get(&records::photo_key(pid))
        .await?
        .ok_or_else(missing)?;
    let photo: Photo = records::decode(&item)?;
    let project = project(store, tenant, &photo.project.to_string())
        .await
        .map_err(|e| match e {
            CatalogError::NotFound(_) => missing(),
            other => other,
        })?;
    Ok((photo, project))
}
