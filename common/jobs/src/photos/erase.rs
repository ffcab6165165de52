//! Erasing a photo, or a whole project with everything in it.
//!
//! A photo's row goes in one transaction with its erasure marker and audit entry
//! (`tessera_core::catalog::erasure`); then its upload, its upload thumbnail and every
//! rendition are deleted. Nothing serves it from the moment the row is gone, a worker
//! processing it fails on the missing row, and the marker keeps a late ingest from
//! bringing it back.

use super::project::{PhotoError, subjects};
use super::status::RefusedUpload;
use tessera_core::audit::{self, Actor};
use tessera_core::catalog::erasure::{self, Erasure, Swept};
use tessera_core::catalog::{datasets, quotas};
use tessera_core::photo::{Photo, keys};
use tessera_core::ports::state_store::{Condition, Index, Query, Write};
use tessera_core::ports::{ObjectStore, StateStore};
use tessera_core::{Millis, PhotoId, ProjectId, records};

/// What erasing a photo removes.
pub fn photo_erasure(project: ProjectId, photo: PhotoId) -> Erasure {
    Erasure {
        target: format!("photo/{photo}"),
        prefixes: vec![
            keys::derived_prefix(project, photo),
            format!("uploads/{project}/{photo}/"),
        ],
        partitions: Vec::new(),
        erased_at: Millis::now(),
        swept: false,
    }
}

/// Erase one photo (the caller checked it belongs to the actor's tenant).
pub async fn erase_photo(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    photo: &Photo,
    actor: &Actor,
) -> Result<Swept, PhotoError> {
    let e = photo_erasure(photo.project, photo.id);
    quotas::ensure_usage(store, &actor.tenant)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", photo.id)))?;
    store
        .transact(vec![
            Write::Delete {
                key: records::photo_key(photo.id),
                condition: Condition::Exists,
            },
            quotas::add(&actor.tenant, quotas::counters::PHOTOS, -1),
            erasure::marker(&e),
            audit::entry(
                actor,
                "photo.erase",
                e.target.clone(),
                serde_json::json!({ "project": photo.project, "file_name": photo.file_name }),
            ),
        ])
        .await
        .map_err(|err| {
            if err.is_conflict() {
                PhotoError::NotFound(format!("photo {} does not exist", photo.id))
            } else {
                err.into()
            }
        })?;
    let swept = erasure::sweep(store, objects, &e)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", photo.id)))?;
    // The finalized upload it may have been added from holds the same bytes.
    tessera_core::catalog::uploads::erase_blob(store, objects, &actor.tenant, &photo.sha256)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", photo.id)))?;
    tracing::info!(photo = %photo.id, project = %photo.project, objects = swept.objects, "photo erased");
    Ok(swept)
}

/// Erase an upload ingest refused (the caller checked its project belongs to the
/// actor's tenant): its record and its bytes, with an erasure marker so that a late
/// event for it is ignored, audited like a photo's erasure.
pub async fn erase_refused(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    refused: &RefusedUpload,
    actor: &Actor,
) -> Result<Swept, PhotoError> {
    let e = photo_erasure(refused.project, refused.photo_id);
    // The finalized upload it may have been added from holds the same bytes: found by
    // their hash (a refusal records none), and erased first, so that a failure here
    // leaves the refusal to erase again.
    let (uploaded, _) = objects.list(&refused.objects_prefix(), None, 10).await?;
    // Larger than any photo added from a blob (a 5 GB PUT through a presigned URL):
    // no blob holds it, and it is not read into memory.
    for o in uploaded
        .into_iter()
        .filter(|o| o.size <= tessera_imaging::decode::MAX_BYTES)
    {
        use sha2::Digest as _;
        let bytes = objects.get(&o.key).await?;
        let sha = hex::encode(sha2::Sha256::digest(&bytes));
        tessera_core::catalog::uploads::erase_blob(store, objects, &actor.tenant, &sha)
            .await
            .map_err(|err| {
                PhotoError::Invalid(format!("erasing photo {}: {err}", refused.photo_id))
            })?;
    }
    quotas::ensure_usage(store, &actor.tenant)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", refused.photo_id)))?;
    store
        .transact(vec![
            Write::Delete {
                key: tessera_core::catalog::refusals::refusal_key(refused.photo_id),
                condition: Condition::Exists,
            },
            quotas::add(&actor.tenant, quotas::counters::PHOTOS, -1),
            erasure::marker(&e),
            audit::entry(
                actor,
                "photo.erase",
                e.target.clone(),
                serde_json::json!({ "project": refused.project, "file_name": refused.name, "refused": true }),
            ),
        ])
        .await
        .map_err(|err| {
            if err.is_conflict() {
                PhotoError::NotFound(format!("photo {} does not exist", refused.photo_id))
            } else {
                err.into()
            }
        })?;
    let swept = erasure::sweep(store, objects, &e)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", refused.photo_id)))?;
    tracing::info!(photo = %refused.photo_id, project = %refused.project, objects = swept.objects, "refused upload erased");
    Ok(swept)
}

/// Delete a project that holds nothing: no photos, no refused uploads, no datasets and
/// no opted-out subjects (whose embeddings are biometric data; nothing may outlive its
/// project unreachable). Anything left is named, with what to do; the check and the
/// delete are one decision, conditioned on the project as read.
pub async fn delete_empty_project(
    store: &dyn StateStore,
    project: ProjectId,
) -> Result<(), PhotoError> {
    let item = store
        .get(&records::project_key(project))
        .await?
        .ok_or_else(|| PhotoError::NotFound(format!("project {project} does not exist")))?;
    let p: tessera_core::domain::Project = records::decode(&item)?;
    let mut left = Vec::new();
    for (partition, what) in [
        (datasets::datasets_partition(project), "datasets"),
        (records::project_photos_partition(project), "photos"),
    ] {
        if !store
            .query(&Query::partition(Index::ByParent, partition, 1))
            .await?
            .items
            .is_empty()
        {
            left.push(what.to_string());
        }
    }
    let refused = super::status::refusals(store, project).await?.len();
    if refused > 0 {
        left.push(format!("{refused} refused upload(s)"));
    }
    let subjects = subjects(store, project).await?.len();
    if subjects > 0 {
        left.push(format!(
            "{subjects} opted-out subject(s) with their face embeddings"
        ));
    }
    if !left.is_empty() {
        return Err(PhotoError::Conflict(format!(
            "project {project} still has {}; delete them first, or erase everything with DELETE /v1/projects/{project}?cascade=true",
            left.join(", ")
        )));
    }
    store
        .transact(vec![
            Write::Delete {
                key: records::project_key(project),
                condition: Condition::Rev(item.rev),
            },
            Write::Delete {
                key: records::project_name_key(&p.tenant, &p.name),
                condition: Condition::None,
            },
        ])
        .await
        .map_err(|e| {
            if e.is_conflict() {
                PhotoError::Conflict(format!(
                    "project {project} changed while it was being deleted (someone enrolled or changed its settings); look again"
                ))
            } else {
                e.into()
            }
        })?;
    Ok(())
}

/// What erasing a project removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ProjectErased {
    /// Photos erased.
    pub photos: usize,
    /// Datasets erased.
    pub datasets: usize,
    /// Opted-out subjects removed (with their reference photos).
    pub subjects: usize,
    /// Refused uploads erased.
    pub refused: usize,
    /// Objects deleted.
    pub objects: usize,
}

/// Erase a project and everything in it: photos, datasets with their images, opted-out
/// subjects with their reference photos, then the project itself.
pub async fn erase_project(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    project: ProjectId,
    actor: &Actor,
) -> Result<ProjectErased, PhotoError> {
    let mut done = ProjectErased::default();
    loop {
        let page = store
            .query(&Query::partition(
                Index::ByParent,
                records::project_photos_partition(project),
                100,
            ))
            .await?;
        if page.items.is_empty() {
            break;
        }
        for item in &page.items {
            let photo: Photo = records::decode(item)?;
            match erase_photo(store, objects, &photo, actor).await {
                Ok(s) => done.objects += s.objects,
                Err(PhotoError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            done.photos += 1;
        }
    }
    loop {
        let page = store
            .query(&Query::partition(
                Index::ByParent,
                datasets::datasets_partition(project),
                100,
            ))
            .await?;
        if page.items.is_empty() {
            break;
        }
        for item in &page.items {
            let d: datasets::Dataset = records::decode(item)?;
            let s = datasets::erase(store, objects, &d, actor)
                .await
                .map_err(|e| {
                    PhotoError::Invalid(format!("erasing dataset {}: {e}", d.dataset_id))
                })?;
            done.objects += s.objects;
            done.datasets += 1;
        }
    }
    // Refused uploads name their files: nothing of them stays either.
    quotas::ensure_usage(store, &actor.tenant)
        .await
        .map_err(|e| PhotoError::Invalid(format!("erasing project {project}: {e}")))?;
    for r in super::status::refusals(store, project).await? {
        store
            .transact(vec![
                super::status::forget_refusal(r.photo_id),
                quotas::add(&actor.tenant, quotas::counters::PHOTOS, -1),
            ])
            .await?;
        done.refused += 1;
    }
    for s in subjects(store, project).await? {
        store
            .transact(vec![Write::Delete {
                key: records::subject_key(project, s.id),
                condition: Condition::None,
            }])
            .await?;
        for r in &s.references {
            if tessera_core::catalog::uploads::check_sha("reference", r).is_ok() {
                tessera_core::catalog::uploads::erase_blob(store, objects, &actor.tenant, r)
                    .await
                    .map_err(|e| PhotoError::Invalid(format!("removing reference {r}: {e}")))?;
            }
        }
        done.subjects += 1;
    }
    let e = Erasure {
        target: format!("project/{project}"),
        prefixes: vec![format!("photos/{project}/"), format!("uploads/{project}/")],
        partitions: Vec::new(),
        erased_at: Millis::now(),
        swept: false,
    };
    store
        .transact(vec![
            erasure::marker(&e),
            audit::entry(
                actor,
                "project.erase",
                e.target.clone(),
                serde_json::to_value(done).expect("serializable"),
            ),
        ])
        .await?;
    tessera_core::projects::delete(store, project).await?;
    let swept = erasure::sweep(store, objects, &e)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing project {project}: {err}")))?;
    done.objects += swept.objects;
    tracing::info!(project = %project, photos = done.photos, datasets = done.datasets, subjects = done.subjects, "project erased");
    Ok(done)
}
