//! Projects, their opted-out subjects, and the changes that make photos re-blur:
//! enrolment or removal of a subject, privacy settings, edits of a photo's blur regions.
//!
//! A subject or settings change is one transaction with the project's new
//! `subjects_rev` *and* the sweep job that re-decides every photo at it
//! ([`super::reblur`]): once the change is stored, its work is stored too, whatever
//! happens to the process that made it.

pub use super::privacy_status::{PrivacyStatus, privacy_status};
use super::upload;
use std::sync::Arc;
use tessera_core::audit::{self, Actor};
use tessera_core::domain::Project;
use tessera_core::photo::{KeepMetadata, Photo, Subject};
use tessera_core::ports::state_store::{Condition, Index, Query, StateStore, StoreError, Write};
use tessera_core::projects::ProjectError;
use tessera_core::weakening::{self, PrivacySettings};
use tessera_core::{Classify, ErrorClass, JobId, Millis, ProjectId, SubjectId, records};
use tessera_engine::Engine;
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
    /// A request that conflicts with what is there now (a project that is not empty).
    #[error("{0}")]
    Conflict(String),
    /// A change that would weaken privacy, asked for without an admin's authority.
    #[error(transparent)]
    Forbidden(#[from] tessera_core::weakening::NotAllowed),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object store failed.
    #[error(transparent)]
    Objects(#[from] tessera_core::ports::ObjectStoreError),
    /// A face model failed.
    #[error(transparent)]
    Faces(#[from] tessera_faces::FaceError),
    /// The engine failed (raising a notice, submitting a job).
    #[error(transparent)]
    Engine(#[from] tessera_engine::EngineError),
}

impl From<ProjectError> for PhotoError {
    fn from(e: ProjectError) -> Self {
        match e {
            ProjectError::NotFound(m) => PhotoError::NotFound(m),
            ProjectError::Invalid(m) => PhotoError::Invalid(m),
            ProjectError::Conflict(m) => PhotoError::Conflict(m),
            ProjectError::Forbidden(e) => PhotoError::Forbidden(e),
            ProjectError::Store(e) => PhotoError::Store(e),
        }
    }
}

impl Classify for PhotoError {
    fn class(&self) -> ErrorClass {
        match self {
            PhotoError::NotFound(_)
            | PhotoError::Invalid(_)
            | PhotoError::Conflict(_)
            | PhotoError::Forbidden(_) => ErrorClass::Permanent,
            PhotoError::Store(e) => e.class(),
            PhotoError::Objects(e) => e.class(),
            PhotoError::Faces(e) => e.class(),
            PhotoError::Engine(e) => e.class(),
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

/// Narrowest face a reference photo may show, in pixels of the upright photo. The
/// embedder aligns every face to 112 × 112; a reference below about half that is mostly
/// interpolation, and a subject enrolled from it matches their clear photos poorly
/// (which fails closed for them, but blurs strangers who resemble the blur).
pub const MIN_REFERENCE_FACE_PX: f32 = 64.0;
/// A second face at least this fraction of the largest one's width makes a reference
/// photo ambiguous: which of them asked not to be published is not for Tessera to guess.
pub const SECOND_FACE_RATIO: f32 = 0.5;
/// Least detail a reference face may show: the variance of the Laplacian of its aligned
/// crop ([`tessera_faces::quality::sharpness`]). Measured on the shared portraits
/// (`common/jobs/tests/reference_sharpness.rs`): sharp faces of 64 px and more measure
/// 654–3,859; the same portraits blurred with a Gaussian of σ = 2 px on a 90 px face
/// measure 11.6, σ = 3 px 4.0, σ = 6 px on a 175 px face 7.5, and those references had
/// lost 0.14–0.25 of their similarity to the same person in the group photo (which is
/// made of the same portraits: no independent photos of these people exist here, so how
/// much a soft reference costs against other photos is not measured). A face this soft
/// is mostly what the detector still finds of a blurred one; its embedding matches the
/// person's other photos less surely, and a reference that misses them publishes them.
pub const MIN_REFERENCE_SHARPNESS: f32 = 20.0;
/// Reference photos below which an enrolment is answered with a warning.
pub const ADVISED_REFERENCES: usize = 2;

/// The embedding of the one face in a reference photo, checked: a face is found, it is
/// at least [`MIN_REFERENCE_FACE_PX`] wide, and no other face comes close to its size.
/// Each refusal names the photo and what to send instead.
pub fn reference_embedding(
    models: &FaceModels,
    name: &str,
    bytes: &[u8],
) -> Result<Vec<f32>, PhotoError> {
    let decoded = upload::decode(name, bytes).map_err(|e| PhotoError::Invalid(e.0))?;
    let mut faces = models.detect(&decoded.rgb)?;
    let width = |d: &tessera_faces::Detection| d.bbox[2] - d.bbox[0];
    faces.sort_by(|a, b| width(b).total_cmp(&width(a)));
    let Some(largest) = faces.first() else {
        return Err(PhotoError::Invalid(format!(
            "reference photo `{name}` shows no face the detector can find; use a photo where the face is clear, front-on and at least {MIN_REFERENCE_FACE_PX} px wide"
        )));
    };
    if width(largest) < MIN_REFERENCE_FACE_PX {
        return Err(PhotoError::Invalid(format!(
            "reference photo `{name}`: the face is {:.0} px wide; use one where it is at least {MIN_REFERENCE_FACE_PX} px wide (taken closer, or less reduced)",
            width(largest)
        )));
    }
    let sharpness = tessera_faces::quality::sharpness(&tessera_faces::align::crop(
        &decoded.rgb,
        &largest.landmarks,
    ));
    if sharpness < MIN_REFERENCE_SHARPNESS {
        return Err(PhotoError::Invalid(format!(
            "reference photo `{name}`: the face is blurred or out of focus (detail {sharpness:.1}, at least {MIN_REFERENCE_SHARPNESS} needed); use a sharp photo of the face, never one that was blurred"
        )));
    }
    let similar = faces
        .iter()
        .filter(|d| width(d) >= SECOND_FACE_RATIO * width(largest))
        .count();
    if similar > 1 {
        return Err(PhotoError::Invalid(format!(
            "reference photo `{name}` shows {similar} faces of similar size; use a photo of the person alone, or crop it to their face"
        )));
    }
    Ok(models.embed(&decoded.rgb, &largest.landmarks)?)
}

/// What an enrolment should tell the person who made it about how well it will match.
pub fn enrolment_warnings(subject: &Subject) -> Vec<String> {
    let n = subject.references.len();
    if n < ADVISED_REFERENCES {
        vec![format!(
            "`{}` has {n} usable reference photo; {ADVISED_REFERENCES} or more, from other angles and light, match their other photos more surely",
            subject.label
        )]
    } else {
        Vec::new()
    }
}

/// A committed subject or settings change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubjectChange {
    /// The project's subject revision after the change.
    pub subjects_rev: u64,
    /// The sweep that re-decides every photo at it.
    pub reblur_job: JobId,
}

/// How a change alters the project's opted-out subjects.
enum SubjectDelta {
    /// Nobody enrolled or removed (settings, a re-decision of every photo).
    Same,
    /// This subject enrolled.
    Enrol(Subject),
    /// This subject removed.
    Remove(SubjectId),
}

/// Commit `writes` (the caller's, first) with the project's fields from `fields` (given
/// the project as read), its `subjects_rev` bumped, its privacy view in every shard
/// (with the subject set after `delta`), and the sweep job at the new revision, in one
/// transaction. A concurrent change of the project is retried from a fresh read; a
/// conflict on one of the caller's writes is returned as is.
async fn change_subjects(
    engine: &Engine,
    project: ProjectId,
    writes: Vec<Write>,
    delta: SubjectDelta,
    fields: impl Fn(&Project) -> Result<Vec<(String, serde_json::Value)>, PhotoError>,
) -> Result<SubjectChange, PhotoError> {
    let store = engine.ports().store.as_ref();
    let objects = engine.ports().objects.as_ref();
    loop {
        let item = store
            .get(&records::project_key(project))
            .await?
            .ok_or_else(|| PhotoError::NotFound(format!("project {project} does not exist")))?;
        let p: Project = records::decode(&item)?;
        let rev = p.subjects_rev + 1;
        // Checked against the project as it is now: a change racing this one is seen
        // here on the retry, never committed past the check.
        let mut set = fields(&p)?;
        set.push(("subjects_rev".into(), rev.into()));
        // The sweep at the new revision covers every photo, whatever an older one left.
        set.push(("sweep_stalled".into(), serde_json::Value::Null));
        // The subjects are read after the project: one that changed in between bumped
        // its revision, and the transaction below fails on it and is tried again.
        let mut after = subjects(store, project).await?;
        match &delta {
            SubjectDelta::Same => {}
            SubjectDelta::Enrol(s) => after.push(s.clone()),
            SubjectDelta::Remove(id) => after.retain(|s| s.id != *id),
        }
        let (view, pending) = super::view::plan(&changed(&p, &set)?, &after);
        let sweep = engine
            .prepare(super::reblur::plan(p.tenant.clone(), project, rev))
            .map_err(|e| PhotoError::Invalid(e.to_string()))?;
        let mut all = writes.clone();
        let project_write = all.len();
        all.push(Write::Set {
            key: records::project_key(project),
            fields: set,
            condition: Condition::Rev(item.rev),
        });
        all.extend(tessera_core::privacy_view::put_all(&view));
        all.extend(sweep.writes.iter().cloned());
        match store.transact(all).await {
            Ok(()) => {
                tracing::info!(project = %project, subjects_rev = rev, reblur_job = %sweep.job_id, "subject change committed with its sweep");
                super::view::store_subject_set(objects, pending).await;
                // The sets of older views go now; the sweep deletes them again in case
                // this process dies first (they may hold a removed subject's embeddings).
                if let Err(e) =
                    super::view::retire_subject_sets(objects, project, view.subjects.as_deref())
                        .await
                {
                    tracing::warn!(project = %project, error = %e, "older subject sets not deleted; the sweep will");
                }
                // Offered now; if this process dies first, the reaper offers it.
                if let Err(e) = engine.offer_prepared(&sweep).await {
                    tracing::warn!(project = %project, error = %e, "sweep not offered; the reaper will");
                }
                return Ok(SubjectChange {
                    subjects_rev: rev,
                    reblur_job: sweep.job_id,
                });
            }
            Err(StoreError::Conflict { index, .. }) if index == project_write => {
                tracing::info!(project = %project, "the project changed meanwhile; trying again");
                continue;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// `p` with the fields of a change applied.
fn changed(p: &Project, fields: &[(String, serde_json::Value)]) -> Result<Project, PhotoError> {
    let mut body = serde_json::to_value(p).expect("a project serializes");
    for (name, value) in fields {
        body[name.as_str()] = value.clone();
    }
    serde_json::from_value(body)
        .map_err(|e| PhotoError::Invalid(format!("project {} as changed: {e}", p.id)))
}

/// Enrol an opted-out subject from reference photos (`(name, bytes)`): the subject, the
/// project's counters and the sweep that re-blurs every photo, in one transaction.
pub async fn enrol(
    engine: &Engine,
    models: Arc<FaceModels>,
    project: ProjectId,
    label: &str,
    references: Vec<(String, Vec<u8>)>,
    actor: &Actor,
) -> Result<(Subject, SubjectChange), PhotoError> {
    load(engine.ports().store.as_ref(), project).await?;
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
    enrol_embeddings(engine, project, label, embeddings, names, actor).await
}

/// Enrol an opted-out subject from embeddings already checked (`references` names where
/// each came from): the subject, the project's counters and the sweep that re-blurs
/// every photo, in one transaction, audited.
pub async fn enrol_embeddings(
    engine: &Engine,
    project: ProjectId,
    label: &str,
    embeddings: Vec<Vec<f32>>,
    references: Vec<String>,
    actor: &Actor,
) -> Result<(Subject, SubjectChange), PhotoError> {
    if label.trim().is_empty() {
        return Err(PhotoError::Invalid(
            "a subject needs a label (a name people recognise)".into(),
        ));
    }
    let s = Subject {
        id: SubjectId::new(),
        project,
        label: label.to_string(),
        embeddings,
        references,
        created_at: Millis::now(),
    };
    let change = change_subjects(
        engine,
        project,
        vec![
            Write::Put {
                item: records::subject_item(&s),
                condition: Condition::Absent,
            },
            audit::entry(
                actor,
                "subject.enrol",
                format!("project/{project}/subject/{}", s.id),
                serde_json::json!({ "label": s.label, "references": s.references.len() }),
            ),
        ],
        SubjectDelta::Enrol(s.clone()),
        |p| Ok(vec![("opted_out".into(), (p.opted_out + 1).into())]),
    )
    .await?;
    Ok((s, change))
}

/// Remove an opted-out subject (they no longer object, or were enrolled by mistake):
/// the deletion, the project's counters and the sweep, in one transaction.
pub async fn remove_subject(
    engine: &Engine,
    project: ProjectId,
    subject: SubjectId,
    actor: &Actor,
) -> Result<SubjectChange, PhotoError> {
    let store = engine.ports().store.as_ref();
    let missing = || {
        PhotoError::NotFound(format!(
            "subject {subject} is not enrolled in project {project}"
        ))
    };
    let item = store
        .get(&records::subject_key(project, subject))
        .await?
        .ok_or_else(missing)?;
    let removed: Subject = records::decode(&item)?;
    weakening::authorize(
        actor,
        &format!("removing opted-out subject `{}`", removed.label),
        vec![format!(
            "`{}` would be shown unblurred in every photo of project {project}",
            removed.label
        )],
    )?;
    let change = match change_subjects(
        engine,
        project,
        vec![
            // The embeddings go with the record.
            Write::Delete {
                key: records::subject_key(project, subject),
                condition: Condition::Exists,
            },
            audit::entry(
                actor,
                "subject.remove",
                format!("project/{project}/subject/{subject}"),
                serde_json::json!({ "label": removed.label }),
            ),
        ],
        SubjectDelta::Remove(subject),
        |p| {
            Ok(vec![(
                "opted_out".into(),
                p.opted_out.saturating_sub(1).into(),
            )])
        },
    )
    .await
    {
        Err(PhotoError::Store(StoreError::Conflict { index: 0, .. })) => Err(missing()),
        other => other,
    }?;
    // Their reference photos, where they were uploads (named by their content hash).
    for r in &removed.references {
        if tessera_core::catalog::uploads::check_sha("reference", r).is_ok() {
            tessera_core::catalog::uploads::erase_blob(
                store,
                engine.ports().objects.as_ref(),
                &actor.tenant,
                r,
            )
            .await
            .map_err(|e| PhotoError::Invalid(format!("removing reference photo {r}: {e}")))?;
        }
    }
    Ok(change)
}

/// Re-decide every photo of a project with nothing else changed: how rows made under
/// older [`tessera_core::photo::RULES`] are migrated.
pub async fn reblur_all(engine: &Engine, project: ProjectId) -> Result<SubjectChange, PhotoError> {
    redecide_with(engine, project, Vec::new()).await
}

/// Commit `writes` (first) with a re-decision of every photo of `project`: its
/// `subjects_rev` bumped and the sweep, in one transaction. How a cluster whose standing
/// changed has its members in other photos decided again ([`super::clusters`]). A
/// conflict on one of `writes` is returned as is, with its index.
pub async fn redecide_with(
    engine: &Engine,
    project: ProjectId,
    writes: Vec<Write>,
) -> Result<SubjectChange, PhotoError> {
    change_subjects(engine, project, writes, SubjectDelta::Same, |_| {
        Ok(Vec::new())
    })
    .await
}

/// A project's privacy settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Cosine threshold; `None` fails closed.
    pub threshold: Option<f32>,
    /// Face box growth, 0.30..0.40.
    pub expand: f32,
    /// EXIF fields published files keep.
    pub keep_metadata: KeepMetadata,
}

/// Change a project's privacy settings: with the sweep that re-decides every photo, in
/// one transaction. A change that weakens privacy ([`weakening::settings_weakened`])
/// needs an admin's authority and is audited with what it takes away.
pub async fn set_settings(
    engine: &Engine,
    project: ProjectId,
    settings: Settings,
    actor: &Actor,
) -> Result<SubjectChange, PhotoError> {
    validate_settings(settings.threshold, settings.expand)?;
    let new = PrivacySettings {
        threshold: settings.threshold,
        expand: settings.expand,
        keep_metadata: settings.keep_metadata,
    };
    let current = load(engine.ports().store.as_ref(), project).await?;
    let weakens = weakening::settings_weakened(&PrivacySettings::of(&current), &new);
    weakening::authorize(
        actor,
        &format!("changing the privacy settings of project {project}"),
        weakens.clone(),
    )?;
    let record = audit::entry(
        actor,
        "privacy.settings",
        format!("project/{project}"),
        serde_json::json!({
            "match_threshold": settings.threshold,
            "blur_expand": settings.expand,
            "keep_metadata": settings.keep_metadata,
            "weakens": weakens,
        }),
    );
    change_subjects(engine, project, vec![record], SubjectDelta::Same, |p| {
        weakening::authorize(
            actor,
            &format!("changing the privacy settings of project {project}"),
            weakening::settings_weakened(&PrivacySettings::of(p), &new),
        )?;
        Ok(vec![
            (
                "match_threshold".into(),
                serde_json::to_value(settings.threshold).expect("serializable"),
            ),
            ("blur_expand".into(), settings.expand.into()),
            (
                "keep_metadata".into(),
                serde_json::to_value(settings.keep_metadata).expect("serializable"),
            ),
        ])
    })
    .await
}
