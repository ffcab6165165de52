//! How a photo enters, for every way in: the CLI (a file), the API (a finalized upload
//! or an object in the tenant's incoming folder, or a presigned PUT) and S3's
//! notification of an upload. Each of them used to decide for itself which names are
//! usable, whether the tenant's photo quota counts and how much of an object it reads;
//! here those decisions are made once.
//!
//! Invariants:
//! - an original is stored only under a key [`upload_key`] accepted, after the tenant's
//!   photo quota admitted it;
//! - nothing reads more than [`MAX_BYTES`] + 1 bytes of a photo it has not admitted;
//! - every photo's ingest job is [`super::ingest_plan`] of the event S3 would send.

use super::{ObjectCreated, ingest_plan, project, view};
use bytes::Bytes;
use tessera_core::catalog::CatalogError;
use tessera_core::domain::Project;
use tessera_core::error::{Classify, ErrorClass};
use tessera_core::photo::keys;
use tessera_core::ports::ObjectStore;
use tessera_core::ports::object_store::{ObjectStoreError, validate_key};
use tessera_core::{JobId, Millis, PhotoId, ProjectId, TenantId};
use tessera_engine::{Engine, EngineError, Submitted, TaskError};

pub use tessera_imaging::decode::MAX_BYTES;

/// Why a photo was not taken in.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// The file name cannot be part of a key (a `/`, a control character, too long…).
    #[error("`{name}` is not a usable photo file name ({why}); rename the file and add it again")]
    BadName {
        /// The name as given (at most 200 characters of it).
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The photo is larger than any photo may be.
    #[error(
        "{what} is {} MiB, more than the {} MiB a photo may be; send a smaller export of it",
        size >> 20,
        MAX_BYTES >> 20
    )]
    TooLarge {
        /// The file or key.
        what: String,
        /// Its size in bytes (at least `MAX_BYTES + 1`).
        size: u64,
    },
    /// Nothing where the photo was said to be.
    #[error("{what}: no object there; put the photo there first")]
    Missing {
        /// The key.
        what: String,
    },
    /// The tenant may not add photos (a quota), or may not read that key.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The object store failed.
    #[error("storing or reading the photo: {0}")]
    Objects(#[from] ObjectStoreError),
    /// The ingest job could not be submitted.
    #[error("submitting the photo's ingest: {0}")]
    Engine(#[from] EngineError),
}

impl Classify for IntakeError {
    fn class(&self) -> ErrorClass {
        match self {
            IntakeError::BadName { .. } | IntakeError::TooLarge { .. } => ErrorClass::Permanent,
            IntakeError::Missing { .. } => ErrorClass::Permanent,
            IntakeError::Catalog(e) => e.class(),
            IntakeError::Objects(e) => e.class(),
            IntakeError::Engine(e) => e.class(),
        }
    }
}

/// A photo taken in: its id, where its original is, and its ingest job.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The new photo.
    pub photo: PhotoId,
    /// Its original's key.
    pub key: String,
    /// Its ingest job.
    pub job: JobId,
}

/// The key a new photo named `name` is uploaded under, or why `name` cannot be one.
pub fn upload_key(project: ProjectId, photo: PhotoId, name: &str) -> Result<String, IntakeError> {
    let bad = |why: String| IntakeError::BadName {
        name: name.chars().take(200).collect(),
        why,
    };
    if name.contains('/') {
        return Err(bad("it contains `/`".into()));
    }
    let key = keys::upload(project, photo, name);
    validate_key(&key).map_err(|e| match e {
        ObjectStoreError::InvalidKey { why, .. } => bad(why.into()),
        other => bad(other.to_string()),
    })?;
    Ok(key)
}

/// Whether `name` can name a photo (the check [`upload_key`] makes), before anything is
/// stored: a caller adding many files checks them all first.
pub fn check_name(name: &str) -> Result<(), IntakeError> {
    upload_key(ProjectId::new(), PhotoId::new(), name).map(|_| ())
}

/// Count one photo against `tenant`'s quota (before its bytes or its upload URL).
pub async fn admit(engine: &Engine, tenant: &TenantId) -> Result<(), IntakeError> {
    tessera_core::catalog::quotas::admit_photo(engine.ports().store.as_ref(), tenant).await?;
    Ok(())
}

/// Take `bytes` in as a new photo of `project` named `name`: the name checked, the
/// tenant's quota counted, the original stored, and its ingest job submitted with the
/// event S3 would send for it.
pub async fn add(
    engine: &Engine,
    project: &Project,
    name: &str,
    bytes: Bytes,
) -> Result<Admitted, IntakeError> {
    let photo = PhotoId::new();
    let key = upload_key(project.id, photo, name)?;
    let size = bytes.len() as u64;
    if size > MAX_BYTES {
        return Err(IntakeError::TooLarge {
            what: format!("`{name}`"),
            size,
        });
    }
    admit(engine, &project.tenant).await?;
    if let Err(e) = engine.ports().objects.put(&key, bytes).await {
        // Nothing was stored, so nothing will ever release the count but this.
        let release = tessera_core::catalog::quotas::add(
            &project.tenant,
            tessera_core::catalog::quotas::counters::PHOTOS,
            -1,
        );
        if let Err(r) = engine.ports().store.transact(vec![release]).await {
            tracing::warn!(key, error = %r, "a photo count not released after a failed store");
        }
        return Err(e.into());
    }
    let sequencer = format!("{:016X}", Millis::now().0);
    let event = ObjectCreated::for_key("local", &key, size, &sequencer);
    let job = engine
        .submit(ingest_plan(project.tenant.clone(), project.id, &event))
        .await?
        .job_id;
    tracing::info!(key, photo = %photo, job_id = %job, project = %project.id, "photo added");
    Ok(Admitted { photo, key, job })
}

/// Read the object a tenant put in its incoming folder and names as a photo: only its
/// own folder, and never more than [`MAX_BYTES`] + 1 bytes of it, in one read (a size
/// checked first and a read after it could read an object replaced in between).
async fn read_incoming(
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    key: &str,
) -> Result<Bytes, IntakeError> {
    tessera_core::catalog::incoming::check_incoming_key(tenant, key)?;
    objects
        .get_at_most(key, MAX_BYTES)
        .await
        .map_err(|e| match e {
            ObjectStoreError::NotFound(_) => IntakeError::Missing {
                what: format!("s3_key `{key}`"),
            },
            ObjectStoreError::TooLarge { size, .. } => IntakeError::TooLarge {
                what: format!("s3_key `{key}`"),
                size,
            },
            other => IntakeError::Objects(other),
        })
}

/// Take the object at `key` in `project`'s tenant's incoming folder in as a new photo
/// named `name` (default: the key's last segment), and delete it from there once its
/// original is stored. The incoming folder is an inbox, not a library: left there, the
/// unblurred photo could be added again to another project, one with nobody opted out,
/// by any key of the tenant (an admin's original read without an admin), and it would
/// outlive the photo's erasure and its project's retention. A delete that fails after
/// the photo was taken in is logged, not returned: the photo exists, and an error would
/// have the caller add it twice.
pub async fn add_incoming(
    engine: &Engine,
    project: &Project,
    key: &str,
    name: Option<&str>,
) -> Result<Admitted, IntakeError> {
    let objects = engine.ports().objects.as_ref();
    let bytes = read_incoming(objects, &project.tenant, key).await?;
    let name = name.unwrap_or_else(|| key.rsplit('/').next().unwrap_or(key));
    let admitted = add(engine, project, name, bytes).await?;
    if let Err(e) = objects.delete(key).await {
        tracing::error!(key, photo = %admitted.photo, error = %e, "the incoming object was taken in but not deleted; delete it by hand");
    }
    Ok(admitted)
}

/// Take the finalized upload `sha` of `project`'s tenant in as a new photo named `name`,
/// and erase the upload (its bytes and its record) once the photo's original is stored,
/// for the reason [`add_incoming`] deletes its object: left in place, anyone of the
/// tenant who learned its hash could add the unblurred photo again to a project with
/// nobody opted out, or register it as a dataset image and read it back, for as long as
/// the upload lived, on no audit trail; and it would outlive the photo's erasure. An
/// erasure that fails after the photo was taken in is logged, not returned (the photo
/// exists; an error would have the caller add it twice), and the upload's own lifetime
/// collects it.
pub async fn add_blob(
    engine: &Engine,
    project: &Project,
    sha: &str,
    name: &str,
) -> Result<Admitted, IntakeError> {
    use tessera_core::catalog::uploads;
    let (store, objects) = (
        engine.ports().store.as_ref(),
        engine.ports().objects.as_ref(),
    );
    let bytes = uploads::read_blob(objects, &project.tenant, "blob_sha", sha, MAX_BYTES).await?;
    let admitted = add(engine, project, name, bytes).await?;
    if let Err(e) = uploads::erase_blob(store, objects, &project.tenant, sha).await {
        tracing::error!(blob_sha = sha, photo = %admitted.photo, error = %e, "the upload was taken in as a photo but not erased; it is collected when it expires");
    }
    Ok(admitted)
}

/// Submit the ingest job for an object-created event S3 sent (through SQS): the
/// project, and so the tenant, come from the upload key. Objects outside `uploads/` are
/// not photos and are ignored (`Ok(None)`); an upload key naming a project that does
/// not exist is poison.
pub async fn submit_upload(
    engine: &Engine,
    event: &ObjectCreated,
) -> Result<Option<Submitted>, TaskError> {
    let key = event.object_key().map_err(TaskError::poison)?;
    if !key.starts_with("uploads/") {
        tracing::info!(key, "object outside uploads/; not a photo");
        return Ok(None);
    }
    validate_key(&key).map_err(|e| TaskError::poison(format!("upload key: {e}")))?;
    let (project_id, photo_id, _) = keys::parse_upload(&key).map_err(TaskError::poison)?;
    // The project's view, not its record: a burst of uploads reads its shards.
    let p = view::for_photo(
        engine.ports().store.as_ref(),
        engine.ports().objects.as_ref(),
        project_id,
        photo_id,
    )
    .await
    .map_err(|e| match e {
        project::PhotoError::NotFound(_) => TaskError::poison(format!("upload `{key}`: {e}")),
        other => TaskError::from_classified(other),
    })?;
    let submitted = engine
        .submit(ingest_plan(p.tenant.clone(), p.project, event))
        .await
        .map_err(TaskError::from_classified)?;
    tracing::info!(key, job_id = %submitted.job_id, project = %p.project, "ingest submitted");
    Ok(Some(submitted))
}
