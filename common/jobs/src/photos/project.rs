//! Projects, their opted-out subjects, and the changes that make photos re-blur:
//! enrolment of a subject and edits of a photo's blur regions.

use super::upload;
use std::sync::Arc;
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Photo, Subject};
use tessera_core::ports::state_store::{Condition, Index, Query, StateStore, StoreError, Write};
use tessera_core::projects::ProjectError;
use tessera_core::{Classify, ErrorClass, Millis, PhotoId, ProjectId, SubjectId, records};
use tessera_faces::FaceModels;

/// Why a project-level request failed.
#[derive(Debug, thiserror::Error)]
pub enum PhotoError {
    /// Nothing by that name or id.
    #[error("{0}")]
    NotFound(String),
    /// A request that cannot be carried out as asked.
    #[error("{0}")]
    Invalid(String),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object store failed.
    #[error(transparent)]
    Objects(#[from] tessera_core::ports::ObjectStoreError),
    /// A face model failed.
    #[error(transparent)]
    Faces(#[from] tessera_faces::FaceError),
}

impl From<ProjectError> for PhotoError {
    fn from(e: ProjectError) -> Self {
        match e {
            ProjectError::NotFound(m) => PhotoError::NotFound(m),
            ProjectError::Invalid(m) => PhotoError::Invalid(m),
            ProjectError::Store(e) => PhotoError::Store(e),
        }
    }
}

impl Classify for PhotoError {
    fn class(&self) -> ErrorClass {
        match self {
            PhotoError::NotFound(_) | PhotoError::Invalid(_) => ErrorClass::Permanent,
            PhotoError::Store(e) => e.class(),
            PhotoError::Objects(e) => e.class(),
            PhotoError::Faces(e) => e.class(),
        }
    }
}

pub use tessera_core::projects::{by_name, create, load, query_all, validate_settings};

/// The project's opted-out subjects.
pub async fn subjects(
    store: &dyn StateStore,
    project: ProjectId,
) -> Result<Vec<Subject>, StoreError> {
    let mut q = Query::partition(
        Index::Table,
        records::subject_key(project, SubjectId::new()).pk,
        500,
    );
    q.sk_prefix = Some(records::SUBJECT_PREFIX.into());
    query_all(store, q).await
}

/// The project's photos.
pub async fn photos(store: &dyn StateStore, project: ProjectId) -> Result<Vec<Photo>, StoreError> {
    let q = Query::partition(
        Index::ByParent,
        records::project_photos_partition(project),
        500,
    );
    query_all(store, q).await
}

/// The embedding of the largest face in one reference photo.
pub fn reference_embedding(
    models: &FaceModels,
    name: &str,
    bytes: &[u8],
) -> Result<Vec<f32>, PhotoError> {
    let decoded = upload::decode(name, bytes).map_err(PhotoError::Invalid)?;
    let faces = models.detect(&decoded.rgb)?;
    let largest = faces
        .iter()
        .max_by(|a, b| {
            let area = |d: &tessera_faces::Detection| (d.bbox[2] - d.bbox[0]) * (d.bbox[3] - d.bbox[1]);
            area(a).total_cmp(&area(b))
        })
        .ok_or_else(|| {
            PhotoError::Invalid(format!(
                "reference photo `{name}` shows no face the detector can find; use a photo where the face is clear and at least ~30 px wide"
            ))
        })?;
    if faces.len() > 1 {
        tracing::warn!(
            reference = name,
            faces = faces.len(),
            "several faces in a reference photo; enrolling the largest"
        );
    }
    Ok(models.embed(&decoded.rgb, &largest.landmarks)?)
}

/// Enrol an opted-out subject from reference photos (`(name, bytes)`), in one
/// transaction with the project's subject counters.
pub async fn enrol(
    store: &dyn StateStore,
    models: Arc<FaceModels>,
    project: ProjectId,
    label: &str,
    references: Vec<(String, Vec<u8>)>,
) -> Result<Subject, PhotoError> {
    load(store, project).await?;
    if label.trim().is_empty() {
        return Err(PhotoError::Invalid(
            "a subject needs a label (a name people recognise)".into(),
        ));
    }
    if references.is_empty() {
        return Err(PhotoError::Invalid(format!(
            "subject `{label}` has no reference photos; give at least one photo of their face"
        )));
    }
    let names: Vec<String> = references.iter().map(|r| r.0.clone()).collect();
    let embeddings = tokio::task::spawn_blocking(move || {
        references
            .iter()
            .map(|(name, bytes)| reference_embedding(&models, name, bytes))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| PhotoError::Invalid(format!("enrolment thread failed: {e}")))??;
    let s = Subject {
        id: SubjectId::new(),
        project,
        label: label.to_string(),
        embeddings,
        references: names,
        created_at: Millis::now(),
    };
    store
        .transact(vec![
            Write::Put {
                item: records::subject_item(&s),
                condition: Condition::Absent,
            },
            Write::Add {
                key: records::project_key(project),
                deltas: vec![("opted_out".into(), 1), ("subjects_rev".into(), 1)],
            },
        ])
        .await?;
    Ok(s)
}

/// Replace a photo's manual blur regions (fractions of the stored image), checking
/// each; returns the new edit revision.
pub async fn set_regions(
    store: &dyn StateStore,
    photo: PhotoId,
    regions: &[FracRect],
) -> Result<u64, PhotoError> {
    for (i, r) in regions.iter().enumerate() {
        if let Some(p) = r.problem() {
            return Err(PhotoError::Invalid(format!("blur region {i} {p}")));
        }
    }
    let key = records::photo_key(photo);
    let item = store
        .get(&key)
        .await?
        .ok_or_else(|| PhotoError::NotFound(format!("photo {photo} does not exist")))?;
    let rev = item.body["edits_rev"].as_u64().unwrap_or(0) + 1;
    store
        .transact(vec![Write::Set {
            key,
            fields: vec![
                (
                    "blur_regions".into(),
                    serde_json::to_value(regions).expect("serializable"),
                ),
                ("edits_rev".into(), rev.into()),
            ],
            condition: Condition::Rev(item.rev),
        }])
        .await?;
    Ok(rev)
}

/// Remove an opted-out subject (they no longer object, or were enrolled by mistake), in
/// one transaction with the project's subject counters.
pub async fn remove_subject(
    store: &dyn StateStore,
    project: ProjectId,
    subject: SubjectId,
) -> Result<(), PhotoError> {
    match store
        .transact(vec![
            Write::Delete {
                key: records::subject_key(project, subject),
                condition: Condition::Exists,
            },
            Write::Add {
                key: records::project_key(project),
                deltas: vec![("opted_out".into(), -1), ("subjects_rev".into(), 1)],
            },
        ])
        .await
    {
        Err(StoreError::Conflict { index: 0, .. }) => Err(PhotoError::NotFound(format!(
            "subject {subject} is not enrolled in project {project}"
        ))),
        other => Ok(other?),
    }
}

/// Change a project's privacy settings; every photo must then be re-blurred (the
/// subject revision is bumped so the re-blur jobs are new).
pub async fn set_settings(
    store: &dyn StateStore,
    project: ProjectId,
    threshold: Option<f32>,
    expand: f32,
) -> Result<(), PhotoError> {
    validate_settings(threshold, expand)?;
    let item = store
        .get(&records::project_key(project))
        .await?
        .ok_or_else(|| PhotoError::NotFound(format!("project {project} does not exist")))?;
    let rev = item.body["subjects_rev"].as_u64().unwrap_or(0) + 1;
    store
        .transact(vec![Write::Set {
            key: records::project_key(project),
            fields: vec![
                (
                    "match_threshold".into(),
                    serde_json::to_value(threshold).expect("serializable"),
                ),
                (
                    "blur_expand".into(),
                    serde_json::to_value(expand).expect("serializable"),
                ),
                ("subjects_rev".into(), rev.into()),
            ],
            condition: Condition::Rev(item.rev),
        }])
        .await?;
    Ok(())
}
