//! The clusters as an admin reviews them, and opting one out.

use super::store::{counts, heads, load};
use crate::photos::project::{self, PhotoError};
use tessera_core::audit::Actor;
use tessera_core::clusters::{self, Rep};
use tessera_core::photo::Subject;
use tessera_core::ports::state_store::{StateStore, StoreError};
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_core::{ClusterId, Millis, PhotoId, ProjectId};

/// Opt the person of cluster `id` out: a subject enrolled from the cluster's
/// representative views (its clear ones, where it has any), through the same enrolment
/// as reference photos, so every photo is decided again by the durable sweep. How an
/// event's organiser acts on a request from someone they can point at but not name.
pub async fn opt_out(
    engine: &tessera_engine::Engine,
    project: ProjectId,
    id: ClusterId,
    label: &str,
    actor: &Actor,
) -> Result<(Subject, project::SubjectChange), PhotoError> {
    let store = engine.ports().store.as_ref();
    let (c, _) = load(store, id)
        .await?
        .filter(|(c, _)| c.project == project)
        .ok_or_else(|| {
            PhotoError::NotFound(format!(
                "cluster {id} is not in project {project}; list them with GET /v1/x-tessera/projects/{project}/clusters"
            ))
        })?;
    let clear: Vec<&Rep> = c.clear_reps().collect();
    let chosen: Vec<&Rep> = if clear.is_empty() {
        c.reps.iter().collect()
    } else {
        clear
    };
    if chosen.is_empty() {
        return Err(PhotoError::Invalid(format!(
            "cluster {id} holds no face views to recognise its person by; enrol them from a reference photo instead"
        )));
    }
    let views: Vec<Vec<f32>> = chosen.iter().map(|r| r.embedding.clone()).collect();
    // Where each view came from, for the audit trail and for a person asking what is
    // held about them.
    let references = chosen
        .iter()
        .map(|r| format!("cluster/{id}/photo/{}/face/{}", r.photo, r.face))
        .collect();
    project::enrol_embeddings(engine, project, label, views, references, actor).await
}

/// One cluster as an admin reviews it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    /// The cluster.
    pub cluster_id: ClusterId,
    /// Photos its person appears in.
    pub photos: u64,
    /// Faces of them.
    pub faces: u64,
    /// Clear representative views.
    pub clear_views: u32,
    /// `opted_out` (a clear view matches a subject: every member is blurred), `nobody`
    /// (enough clear views match nobody: borderline members are shown) or `unsure`.
    pub standing: &'static str,
    /// The subjects its clear views match, best first, with the similarity.
    pub subjects: Vec<(tessera_core::SubjectId, String, f32)>,
    /// A few photos it appears in (from its representatives).
    pub sample_photos: Vec<PhotoId>,
    /// Last joined or changed.
    pub updated_at: Millis,
}

/// Clusters listed per page at most (each reads its representatives to say its standing).
pub const MAX_LISTED: usize = 100;

/// A page of `project`'s clusters, the people in most photos first: `size` of them
/// (at most [`MAX_LISTED`]) after the first `skip`, and where the next page starts.
pub async fn list(
    store: &dyn StateStore,
    project: &tessera_core::domain::Project,
    skip: usize,
    size: usize,
) -> Result<(Vec<Listed>, Option<usize>), StoreError> {
    let mut all = heads(store, project.id).await?;
    // By the photos counted at the last change to each cluster's views: reading every
    // cluster's counters to sort would cost 8 reads a cluster for each page.
    all.sort_by(|a, b| b.photos.cmp(&a.photos).then(a.id.cmp(&b.id)));
    let size = size.clamp(1, MAX_LISTED);
    let subjects = project::subjects(store, project.id).await?;
    let embeddings: Vec<SubjectEmbeddings> = subjects
        .iter()
        .map(|s| SubjectEmbeddings {
            subject: s.id,
            embeddings: s.embeddings.clone(),
        })
        .collect();
    let policy = MatchPolicy::from_threshold(project.match_threshold);
    let mut out = Vec::new();
    for head in all.iter().skip(skip).take(size) {
        let Some((c, _)) = load(store, head.id).await? else {
            continue;
        };
        let (faces, photos) = counts(store, c.id).await?;
        let standing = c.standing(&embeddings, policy);
        let (word, matched) = match &standing {
            clusters::Standing::Subjects(m) => ("opted_out", m.clone()),
            clusters::Standing::Nobody { .. } => ("nobody", Vec::new()),
            clusters::Standing::Unsure => ("unsure", Vec::new()),
        };
        let mut sample: Vec<PhotoId> = Vec::new();
        for r in &c.reps {
            if !sample.contains(&r.photo) && sample.len() < 6 {
                sample.push(r.photo);
            }
        }
        out.push(Listed {
            cluster_id: c.id,
            photos,
            faces,
            clear_views: c.clear_views,
            standing: word,
            subjects: matched
                .into_iter()
                .map(|(id, sim)| {
                    let label = subjects
                        .iter()
                        .find(|s| s.id == id)
                        .map(|s| s.label.clone())
                        .unwrap_or_default();
                    (id, label, sim)
                })
                .collect(),
            sample_photos: sample,
            updated_at: c.updated_at,
        });
    }
    let next = (skip + size < all.len()).then_some(skip + size);
    Ok((out, next))
}
