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
use tessera_engine::Engine;

/// The erasure target of a photo.
fn target(photo: PhotoId) -> String {
    format!("photo/{photo}")
}

/// The check that makes a transaction fail once `photo` is erased: its marker is
/// written in the transaction that deletes its row, so while the row was ever written,
/// "not erased" is "the row exists", at the price of a check on a small (absent) item.
pub fn not_erased(photo: PhotoId) -> Write {
    erasure::not_erased(&target(photo))
}

/// What erasing a photo removes.
pub fn photo_erasure(project: ProjectId, photo: PhotoId) -> Erasure {
    Erasure {
        target: target(photo),
        prefixes: vec![
            keys::derived_prefix(project, photo),
            format!("uploads/{project}/{photo}/"),
        ],
        // Which cluster each of its faces joined (`super::clusters`).
        partitions: vec![("table".into(), records::photo_key(photo).pk)],
        erased_at: Millis::now(),
        swept: false,
    }
}

/// Erase one photo (the caller checked it belongs to the actor's tenant), taking its
/// faces out of their clusters.
pub async fn erase_photo(
    engine: &Engine,
    photo: &Photo,
    actor: &Actor,
) -> Result<Swept, PhotoError> {
    let ports = engine.ports();
    erase_photo_in(
        ports.store.as_ref(),
        ports.objects.as_ref(),
        photo,
        actor,
        Some(engine),
    )
    .await
}

/// Erase one photo. `clusters`: the engine that takes its faces out of their clusters
/// (and re-decides the project where that withdraws a release), or `None` when its whole
/// project is being erased and its clusters go whole after its photos
/// ([`super::clusters::erase_all`]).
async fn erase_photo_in(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    photo: &Photo,
    actor: &Actor,
    clusters: Option<&Engine>,
) -> Result<Swept, PhotoError> {
    let e = photo_erasure(photo.project, photo.id);
    // Its faces' embeddings leave its clusters before the row goes, so that a crash
    // between the erasure's commit and the step below leaves none of them behind (nothing
    // else would find them once the sweep deletes the records of which clusters they
    // joined); and again after, for a run of the photo's processing that joined them
    // meanwhile (a join checks the row, so none can land after the commit).
    if let Some(engine) = clusters {
        super::clusters::forget_photo(engine, photo).await?;
    }
    commit_erasure(
        store,
        &e,
        actor,
        photo.id,
        vec![
            Write::Delete {
                key: records::photo_key(photo.id),
                condition: Condition::Exists,
            },
            // A refusal of an earlier event for the same upload goes with it.
            super::status::forget_refusal(photo.id),
        ],
        serde_json::json!({ "project": photo.project, "file_name": photo.file_name }),
    )
    .await?;
    super::fault::crash_point(super::fault::AFTER_ERASURE_COMMIT);
    if let Some(engine) = clusters {
        super::clusters::forget_photo(engine, photo).await?;
    }
    let swept = erasure::sweep(store, objects, &e)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", photo.id)))?;
    // The finalized upload it may have been added from holds the same bytes.
    tessera_core::catalog::uploads::erase_blob(store, objects, &actor.tenant, &photo.sha256)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", photo.id)))?;
    release_photo(store, &actor.tenant).await;
    tracing::info!(photo = %photo.id, project = %photo.project, objects = swept.objects, "photo erased");
    Ok(swept)
}

/// Commit a photo's erasure: `writes` (the record's removal) with the erasure marker and
/// the audit entry, in one transaction; a record already gone is `NotFound`.
async fn commit_erasure(
    store: &dyn StateStore,
    e: &Erasure,
    actor: &Actor,
    photo: PhotoId,
    mut writes: Vec<Write>,
    detail: serde_json::Value,
) -> Result<(), PhotoError> {
    writes.push(erasure::marker(e));
    writes.push(audit::entry(actor, "photo.erase", e.target.clone(), detail));
    store.transact(writes).await.map_err(|err| {
        if err.is_conflict() {
            PhotoError::NotFound(format!("photo {photo} does not exist"))
        } else {
            err.into()
        }
    })
}

/// Give one photo back to the tenant's quota (on its usage record; admissions count on
/// shards of it). Outside the erasure's transaction and best effort: an erasure must
/// never fail, or wait, on contention for a counter (a missed release only leaves the
/// count high, never lets anything past the quota).
async fn release_photo(store: &dyn StateStore, tenant: &tessera_core::TenantId) {
    let done = async {
        quotas::ensure_usage(store, tenant).await?;
        store
            .transact(vec![quotas::add(tenant, quotas::counters::PHOTOS, -1)])
            .await?;
        Ok::<_, tessera_core::catalog::CatalogError>(())
    };
    if let Err(e) = done.await {
        tracing::warn!(tenant = %tenant, error = %e, "photo quota not released; the count stays one high");
    }
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
    if store
        .get(&records::photo_key(refused.photo_id))
        .await?
        .is_some()
    {
        return Err(PhotoError::Conflict(format!(
            "photo {} was ingested after this refusal; erase it as a photo",
            refused.photo_id
        )));
    }
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
    commit_erasure(
        store,
        &e,
        actor,
        refused.photo_id,
        vec![
            Write::Delete {
                key: tessera_core::catalog::refusals::refusal_key(refused.photo_id),
                condition: Condition::Exists,
            },
            // A later event of the same upload that was ingested owns these bytes: then
            // it is that photo which is erased, by its row.
            Write::Check {
                key: records::photo_key(refused.photo_id),
                condition: Condition::Absent,
            },
        ],
        serde_json::json!({ "project": refused.project, "file_name": refused.name, "refused": true }),
    )
    .await?;
    let swept = erasure::sweep(store, objects, &e)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing photo {}: {err}", refused.photo_id)))?;
    release_photo(store, &actor.tenant).await;
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
    // With no photo left, what clusters remain hold faces of none (a join that raced an
    // erasure): they go with the project.
    super::clusters::erase_all(store, project).await?;
    remove_project(
        store,
        &item,
        &p,
        Vec::new(),
        "someone enrolled or changed its settings; look again",
    )
    .await
}

/// Delete the project as read (`item`), its name and `extra`, with the marker whose
/// second sweep removes what lands under its prefixes later (an upload through a URL
/// handed out before), in one transaction; a change since the read is a conflict that
/// says `then`.
async fn remove_project(
    store: &dyn StateStore,
    item: &tessera_core::ports::state_store::Item,
    p: &tessera_core::domain::Project,
    extra: Vec<Write>,
    then: &str,
) -> Result<(), PhotoError> {
    let mut writes = vec![
        Write::Delete {
            key: records::project_key(p.id),
            condition: Condition::Rev(item.rev),
        },
        Write::Delete {
            key: records::project_name_key(&p.tenant, &p.name),
            condition: Condition::None,
        },
        erasure::marker(&project_erasure(p.id)),
    ];
    writes.extend(tessera_core::privacy_view::delete_all(p.id));
    writes.extend(extra);
    store.transact(writes).await.map_err(|e| {
        if e.is_conflict() {
            PhotoError::Conflict(format!(
                "project {} changed while it was being removed; {then}",
                p.id
            ))
        } else {
            e.into()
        }
    })
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

/// What erasing a whole project removes, and the marker that keeps late arrivals out:
/// every object under its prefixes (a presigned upload that lands after the project is
/// gone is deleted by the marker's second sweep a day later).
fn project_erasure(project: ProjectId) -> Erasure {
    Erasure {
        target: format!("project/{project}"),
        prefixes: vec![
            format!("photos/{project}/"),
            format!("uploads/{project}/"),
            // Subject sets: the opted-out subjects' embeddings.
            tessera_core::privacy_view::subject_sets_prefix(project),
        ],
        // Its cluster heads (each photo's erasure takes its faces out of them, and the
        // project's erasure deletes what remains with their views; this catches a head
        // written by a join that raced the erasure).
        partitions: records::project_clusters_partitions(project)
            .into_iter()
            .map(|p| ("table".to_string(), p))
            .collect(),
        erased_at: Millis::now(),
        swept: false,
    }
}

/// Whether `actor` may erase `project` with everything in it: erasing subjects takes
/// their protection away, so a project with subjects needs an admin. Asked before
/// anything of the project is erased (its runs go first); answers its subjects.
pub async fn authorize_project_erasure(
    store: &dyn StateStore,
    project: ProjectId,
    actor: &Actor,
) -> Result<Vec<tessera_core::photo::Subject>, PhotoError> {
    let enrolled = subjects(store, project).await?;
    tessera_core::weakening::authorize(
        actor,
        &format!("erasing project {project} with everything in it"),
        if enrolled.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "its {} opted-out subject(s) would be erased, and with them their protection",
                enrolled.len()
            )]
        },
    )?;
    Ok(enrolled)
}

/// Erase a project and everything in it: photos, refused uploads, datasets with their
/// images, opted-out subjects with their reference photos.
///
/// Erasing subjects takes their protection away, so a project with subjects is erased
/// only with an admin's authority. The project record goes *first*, in one transaction
/// with its erasure marker: from then on nothing can be added to it (ingest refuses an
/// upload for a project that does not exist) and a change racing the erasure fails
/// before anything is destroyed, instead of leaving a project whose subjects are gone.
pub async fn erase_project(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    project: ProjectId,
    actor: &Actor,
) -> Result<ProjectErased, PhotoError> {
    let item = store
        .get(&records::project_key(project))
        .await?
        .ok_or_else(|| PhotoError::NotFound(format!("project {project} does not exist")))?;
    let p: tessera_core::domain::Project = records::decode(&item)?;
    let enrolled = authorize_project_erasure(store, project, actor).await?;
    let e = project_erasure(project);
    remove_project(
        store,
        &item,
        &p,
        vec![audit::entry(
            actor,
            "project.erase",
            e.target.clone(),
            serde_json::json!({ "name": p.name, "subjects": enrolled.len() }),
        )],
        "nothing was erased, try again",
    )
    .await?;
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
            match erase_photo_in(store, objects, &photo, actor, None).await {
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
    // Clusters left without photos (a join that raced an erasure): their views too.
    super::clusters::erase_all(store, project).await?;
    // Refused uploads: their bytes and the blobs they came from, like any photo's.
    for r in super::status::refusals(store, project).await? {
        match erase_refused(store, objects, &r, actor).await {
            Ok(s) => done.objects += s.objects,
            Err(PhotoError::NotFound(_) | PhotoError::Conflict(_)) => {
                store
                    .transact(vec![super::status::forget_refusal(r.photo_id)])
                    .await?;
            }
            Err(e) => return Err(e),
        }
        done.refused += 1;
    }
    for s in enrolled {
        store
            .transact(vec![
                Write::Delete {
                    key: records::subject_key(project, s.id),
                    condition: Condition::None,
                },
                audit::entry(
                    actor,
                    "subject.remove",
                    format!("project/{project}/subject/{}", s.id),
                    serde_json::json!({ "label": s.label, "with": "project.erase" }),
                ),
            ])
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
    let swept = erasure::sweep(store, objects, &e)
        .await
        .map_err(|err| PhotoError::Invalid(format!("erasing project {project}: {err}")))?;
    done.objects += swept.objects;
    tracing::info!(project = %project, photos = done.photos, datasets = done.datasets, subjects = done.subjects, refused = done.refused, "project erased");
    Ok(done)
}
