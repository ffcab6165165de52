//! Projects, their opted-out subjects, and the changes that make photos re-blur:
//! enrolment of a subject and edits of a photo's blur regions.

use super::upload;
use serde_json::json;
use std::sync::Arc;
use tessera_core::domain::Project;
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Photo, Subject};
use tessera_core::ports::state_store::{Condition, Index, Query, StateStore, StoreError, Write};
use tessera_core::{
    Classify, ErrorClass, Millis, PhotoId, ProjectId, SubjectId, TenantId, records,
};
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

/// Check a match threshold and blur growth from configuration.
pub fn validate_settings(threshold: Option<f32>, expand: f32) -> Result<(), PhotoError> {
    if let Some(t) = threshold
        && !(t.is_finite() && (-1.0..=1.0).contains(&t))
    {
        return Err(PhotoError::Invalid(format!(
            "match threshold {t} is not a cosine similarity; use a value in -1..1 (SFace's usual is 0.363; lower blurs more)"
        )));
    }
    if !(0.30..=0.40).contains(&expand) {
        return Err(PhotoError::Invalid(format!(
            "blur expansion {expand} is outside 0.30..0.40 (the face box grows by 30 to 40 %)"
        )));
    }
    Ok(())
}

/// Create a project; its name is unique for the tenant.
pub async fn create(
    store: &dyn StateStore,
    tenant: TenantId,
    name: &str,
    threshold: Option<f32>,
    expand: f32,
) -> Result<Project, PhotoError> {
    validate_settings(threshold, expand)?;
    if name.is_empty()
        || name.len() > 200
        || name.contains(['#', '/'])
        || name.chars().any(char::is_control)
    {
        return Err(PhotoError::Invalid(format!(
            "project name `{name}` must be 1 to 200 characters without `#`, `/` or control characters"
        )));
    }
    let p = Project {
        id: ProjectId::new(),
        tenant: tenant.clone(),
        name: name.to_string(),
        match_threshold: threshold,
        blur_expand: expand,
        subjects_rev: 0,
        opted_out: 0,
        created_at: Millis::now(),
    };
    let name_item = tessera_core::ports::state_store::Item::new(
        records::project_name_key(&tenant, name),
        json!({ "project": p.id }),
    );
    match store
        .transact(vec![
            Write::Put {
                item: name_item,
                condition: Condition::Absent,
            },
            Write::Put {
                item: records::project_item(&p),
                condition: Condition::Absent,
            },
        ])
        .await
    {
        Err(StoreError::Conflict { index: 0, .. }) => Err(PhotoError::Invalid(format!(
            "a project named `{name}` exists already; pick another name"
        ))),
        other => other.map(|()| p).map_err(Into::into),
    }
}

/// A project by id.
pub async fn load(store: &dyn StateStore, id: ProjectId) -> Result<Project, PhotoError> {
    let item = store
        .get(&records::project_key(id))
        .await?
        .ok_or_else(|| PhotoError::NotFound(format!("project {id} does not exist")))?;
    Ok(records::decode(&item)?)
}

/// A project by name.
pub async fn by_name(
    store: &dyn StateStore,
    tenant: &TenantId,
    name: &str,
) -> Result<Project, PhotoError> {
    let item = store
        .get(&records::project_name_key(tenant, name))
        .await?
        .ok_or_else(|| {
            PhotoError::NotFound(format!(
                "no project named `{name}`; create it with `tessera projects create {name}`"
            ))
        })?;
    let id: ProjectId = item.body["project"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            StoreError::Corrupt(format!("project name record `{name}` names no project"))
        })?;
    load(store, id).await
}

/// Every record a query matches, page after page.
async fn query_all<T: serde::de::DeserializeOwned>(
    store: &dyn StateStore,
    mut q: Query,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    loop {
        let page = store.query(&q).await?;
        for item in &page.items {
            out.push(records::decode(item)?);
        }
        match page.next {
            Some(n) => q.after = Some(n),
            None => return Ok(out),
        }
    }
}

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
