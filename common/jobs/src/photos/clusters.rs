//! Faces joining their project's clusters as photos are decided, what erasing a photo
//! takes back from them, and opting a cluster out. The rules are in
//! [`tessera_core::clusters`]; this module stores them.
//!
//! A cluster is two records: its head (counts and centroid, about 1.2 KB: what a face's
//! search for its cluster and the listing read), in a partition of the project's cluster
//! heads (never the project's own, which photo jobs do not touch), and its representative
//! views (up to 24 embeddings, about 25 KB), in a partition of its own, read only for the
//! clusters a photo's faces are in. Which cluster each face joined is recorded in the photo's own partition,
//! written only if absent in the transaction that joins it, so a retried run counts no
//! face twice and the photo's erasure sweeps the record.
//!
//! When a face's joining changes its cluster's standing in a way that may change another
//! photo's decision (a new subject matched by a clear view; twenty clear views that match
//! nobody, where some member leaned to a match), the join is committed in one
//! transaction with a re-decision of every photo of the project
//! ([`super::project::redecide_with`]): the same durable sweep as an opt-out, so the
//! change cannot be stored without the work that applies it, and photos decided before it
//! are withheld until decided again (fail closed).
//!
//! Cost, per photo with `f` faces in a project with `c` clusters: one query of
//! `⌈c × 1.2 KB / 1 MB⌉` pages of heads, and per face one read of its membership record,
//! one of the representatives and one transaction of four writes (fence, membership,
//! head, representatives). On DynamoDB that is about 2 write units a join in the heads'
//! partition (1,000 a second per partition: some 500 joins a second per project) and 25
//! in the cluster's own. A conflict with a concurrent join into the same cluster re-reads
//! the heads.

use super::project::{self, PhotoError};
use std::collections::BTreeMap;
use tessera_core::audit::Actor;
use tessera_core::clusters::{self, Cluster, Rep};
use tessera_core::photo::{Face, Photo, Subject};
use tessera_core::ports::state_store::{
    Condition, Index, Item, Query, StateStore, StoreError, Write,
};
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_core::{ClusterId, Millis, PhotoId, ProjectId, records};
use tessera_engine::{TaskContext, TaskError};

/// A cluster as read: the head's revision guards every write of both records.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The cluster (its representatives only where read with them).
    pub cluster: Cluster,
    /// The head's revision.
    pub rev: u64,
}

/// Every cluster of `project`, heads only (no representatives).
pub async fn heads(store: &dyn StateStore, project: ProjectId) -> Result<Vec<Stored>, StoreError> {
    let mut q = Query::partition(
        Index::Table,
        records::project_clusters_partition(project),
        500,
    );
    q.sk_prefix = Some(records::CLUSTER_PREFIX.into());
    let mut out = Vec::new();
    loop {
        let page = store.query(&q).await?;
        for item in &page.items {
            out.push(Stored {
                cluster: records::decode(item)?,
                rev: item.rev,
            });
        }
        match page.next {
            Some(n) => q.after = Some(n),
            None => return Ok(out),
        }
    }
}

/// `c` with its representatives read.
pub async fn with_reps(store: &dyn StateStore, mut c: Cluster) -> Result<Cluster, StoreError> {
    if let Some(item) = store
        .get(&records::cluster_reps_key(c.project, c.id))
        .await?
    {
        c.reps = serde_json::from_value::<Vec<Rep>>(item.body["reps"].clone()).map_err(|e| {
            StoreError::Corrupt(format!("representatives of cluster {}: {e}", c.id))
        })?;
    }
    Ok(c)
}

/// The cluster face `index` of `photo` joined in an earlier run, if any.
async fn joined_before(
    store: &dyn StateStore,
    photo: PhotoId,
    index: u32,
) -> Result<Option<ClusterId>, StoreError> {
    Ok(store
        .get(&records::cluster_member_key(photo, index))
        .await?
        .and_then(|i| i.body["cluster"].as_str().and_then(|s| s.parse().ok())))
}

/// What joining a photo's faces did.
#[derive(Debug, Default)]
pub struct Joined {
    /// Faces that joined a cluster in this run.
    pub joined: usize,
    /// Clusters this run started.
    pub started: usize,
    /// The project's re-decision committed with a join, if one was called for: the
    /// photo's own decision is stale (decided at an older subject revision).
    pub redecided: Option<project::SubjectChange>,
}

/// Have each of `faces` (decided on its own evidence, in `photo`) join its cluster, or
/// start one, unless it did before; see the module's doc. Faces without an embedding
/// join nothing.
pub async fn join(
    ctx: &TaskContext,
    photo: &Photo,
    faces: &mut [Face],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> Result<Joined, TaskError> {
    let store = ctx.ports().store.as_ref();
    let mut out = Joined::default();
    // Faces of this photo per cluster (a photo counts once in a cluster).
    let mut own: BTreeMap<ClusterId, u64> = BTreeMap::new();
    for (i, f) in faces.iter_mut().enumerate() {
        if f.cluster.is_none() && !f.embedding.is_empty() {
            f.cluster = joined_before(store, photo.id, i as u32).await?;
        }
        if let Some(c) = f.cluster {
            *own.entry(c).or_default() += 1;
        }
    }
    let mut all = if faces
        .iter()
        .any(|f| f.cluster.is_none() && !f.embedding.is_empty())
    {
        heads(store, photo.project).await?
    } else {
        Vec::new()
    };
    for (i, f) in faces.iter_mut().enumerate() {
        if f.cluster.is_some() || f.embedding.is_empty() {
            continue;
        }
        loop {
            let heads_only: Vec<Cluster> = all.iter().map(|s| s.cluster.clone()).collect();
            let (mut c, rev) = match clusters::nearest(&heads_only, &f.embedding) {
                Some((k, _)) => (
                    with_reps(store, all[k].cluster.clone()).await?,
                    Some(all[k].rev),
                ),
                None => (Cluster::new(photo.project, Millis::now()), None),
            };
            let before = c.standing(subjects, policy);
            let mine = own.get(&c.id).copied().unwrap_or(0);
            c.admit(photo.id, i as u32, f, mine == 0, confident(f));
            let after = c.standing(subjects, policy);
            let redecide = c.calls_for_redecision(&before, &after, mine + 1);
            let (head, reps) = records::cluster_items(&c);
            let writes = vec![
                ctx.fence_write(),
                // The photo still exists: its erasure deletes the row first and then
                // takes its faces out of their clusters, so no join lands after that.
                Write::Check {
                    key: records::photo_key(photo.id),
                    condition: Condition::Exists,
                },
                Write::Put {
                    item: Item::new(
                        records::cluster_member_key(photo.id, i as u32),
                        serde_json::json!({ "cluster": c.id, "at": Millis::now() }),
                    ),
                    condition: Condition::Absent,
                },
                Write::Put {
                    item: head,
                    condition: rev.map_or(Condition::Absent, Condition::Rev),
                },
                Write::Put {
                    item: reps,
                    condition: Condition::None,
                },
            ];
            let committed = if redecide {
                match project::redecide_with(ctx.engine(), photo.project, writes).await {
                    Ok(change) => {
                        tracing::info!(photo = %photo.id, cluster = %c.id, subjects_rev = change.subjects_rev, "a cluster's standing changed; every photo of the project is decided again");
                        out.redecided = Some(change);
                        Ok(())
                    }
                    Err(PhotoError::Store(e)) => Err(e),
                    Err(e) => return Err(TaskError::from_classified(e)),
                }
            } else {
                store.transact(writes).await
            };
            match committed {
                Ok(()) => {
                    f.cluster = Some(c.id);
                    *own.entry(c.id).or_default() += 1;
                    out.joined += 1;
                    let stored = Stored {
                        cluster: Cluster {
                            reps: Vec::new(),
                            ..c.clone()
                        },
                        rev: rev.map_or(1, |r| r + 1),
                    };
                    match all.iter_mut().find(|s| s.cluster.id == c.id) {
                        Some(s) => *s = stored,
                        None => {
                            out.started += 1;
                            all.push(stored);
                        }
                    }
                    break;
                }
                Err(StoreError::Conflict { index: 0, .. }) => {
                    return Err(TaskError::cancelled(format!(
                        "task {} lost its lease while photo {} joined its clusters",
                        ctx.task().id,
                        photo.id
                    )));
                }
                Err(StoreError::Conflict { index: 1, .. }) => {
                    return Err(TaskError::permanent(format!(
                        "photo {} was erased while its faces joined their clusters",
                        photo.id
                    )));
                }
                Err(StoreError::Conflict { index: 2, .. }) => {
                    // A run before this one joined the face meanwhile.
                    f.cluster = joined_before(store, photo.id, i as u32).await?;
                    if let Some(c) = f.cluster {
                        *own.entry(c).or_default() += 1;
                    }
                    break;
                }
                Err(e) if e.is_conflict() => {
                    // Another photo joined or started a cluster meanwhile: look again.
                    all = heads(store, photo.project).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(out)
}

/// The clusters `faces` are in, with their representatives, as stored now: read after the
/// project's view, so that any cluster change that re-decided the project up to the
/// view's revision is seen.
pub async fn of_faces(
    store: &dyn StateStore,
    project: ProjectId,
    faces: &[Face],
) -> Result<Vec<Cluster>, StoreError> {
    let ids: std::collections::BTreeSet<ClusterId> =
        faces.iter().filter_map(|f| f.cluster).collect();
    let mut out = Vec::new();
    for id in ids {
        if let Some(item) = store.get(&records::cluster_key(project, id)).await? {
            out.push(with_reps(store, records::decode::<Cluster>(&item)?).await?);
        }
    }
    Ok(out)
}

/// Whether `f` is a clear view that matches a subject at the project's own threshold:
/// kept among its cluster's representatives whatever else they hold, so the cluster
/// cannot stop saying whose it is.
fn confident(f: &Face) -> bool {
    let Some(rule) = f.rule else {
        return false;
    };
    clusters::is_clear(f)
        && match &f.decision {
            tessera_core::privacy::FaceDecision::Subject { similarity, .. } => {
                *similarity >= rule.threshold + rule.lowered_by
            }
            tessera_core::privacy::FaceDecision::Ambiguous { candidates } => candidates
                .iter()
                .any(|(_, s)| *s >= rule.threshold + rule.lowered_by),
            _ => false,
        }
}

/// Take back from its clusters what `photo` gave them (its representative views and its
/// faces in the counts), deleting a cluster left with none: erasing a photo must leave no
/// embedding of its faces anywhere. The membership records go with the photo's
/// partition. How many clusters were changed.
pub async fn forget_photo(store: &dyn StateStore, photo: &Photo) -> Result<usize, StoreError> {
    let mut changed = 0;
    loop {
        // Which clusters its faces joined, as recorded: each is taken back from its
        // cluster in the transaction that deletes its records, so a second run (or a
        // concurrent one) finds nothing left to take.
        let mut q = Query::partition(Index::Table, records::photo_key(photo.id).pk, 500);
        q.sk_prefix = Some(records::CLUSTER_MEMBER_PREFIX.into());
        let mut per: BTreeMap<ClusterId, Vec<tessera_core::ports::state_store::ItemKey>> =
            BTreeMap::new();
        loop {
            let page = store.query(&q).await?;
            for item in &page.items {
                match item.body["cluster"].as_str().and_then(|s| s.parse().ok()) {
                    Some(c) => per.entry(c).or_default().push(item.key.clone()),
                    None => {
                        store
                            .transact(vec![Write::Delete {
                                key: item.key.clone(),
                                condition: Condition::None,
                            }])
                            .await?
                    }
                }
            }
            match page.next {
                Some(n) => q.after = Some(n),
                None => break,
            }
        }
        let Some((id, members)) = per.into_iter().next() else {
            return Ok(changed);
        };
        let mut writes: Vec<Write> = members
            .iter()
            .map(|k| Write::Delete {
                key: k.clone(),
                condition: Condition::Exists,
            })
            .collect();
        if let Some(item) = store.get(&records::cluster_key(photo.project, id)).await? {
            let c = with_reps(store, records::decode::<Cluster>(&item)?).await?;
            let mut after = c.clone();
            if after.forget(photo.id, members.len() as u64) {
                writes.push(Write::Delete {
                    key: records::cluster_key(photo.project, id),
                    condition: Condition::Rev(item.rev),
                });
                writes.push(Write::Delete {
                    key: records::cluster_reps_key(photo.project, id),
                    condition: Condition::None,
                });
            } else {
                let (head, reps) = records::cluster_items(&after);
                writes.push(Write::Put {
                    item: head,
                    condition: Condition::Rev(item.rev),
                });
                writes.push(Write::Put {
                    item: reps,
                    condition: Condition::None,
                });
            }
        }
        match store.transact(writes).await {
            Ok(()) => changed += 1,
            // Another join, or another erasure's run, meanwhile: read again.
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Delete every cluster of `project` with its views: what erasing the project leaves of
/// them once its photos are gone. How many.
pub async fn erase_all(store: &dyn StateStore, project: ProjectId) -> Result<usize, StoreError> {
    let all = heads(store, project).await?;
    for s in &all {
        store
            .transact(vec![
                Write::Delete {
                    key: records::cluster_reps_key(project, s.cluster.id),
                    condition: Condition::None,
                },
                Write::Delete {
                    key: records::cluster_key(project, s.cluster.id),
                    condition: Condition::None,
                },
            ])
            .await?;
    }
    if !all.is_empty() {
        tracing::info!(project = %project, clusters = all.len(), "clusters erased with the project");
    }
    Ok(all.len())
}

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
    let item = store
        .get(&records::cluster_key(project, id))
        .await?
        .ok_or_else(|| {
            PhotoError::NotFound(format!(
                "cluster {id} is not in project {project}; list them with GET /v1/x-tessera/projects/{project}/clusters"
            ))
        })?;
    let c = with_reps(store, records::decode::<Cluster>(&item)?).await?;
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
    let mut all: Vec<Cluster> = heads(store, project.id)
        .await?
        .into_iter()
        .map(|s| s.cluster)
        .collect();
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
        let c = with_reps(store, head.clone()).await?;
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
            photos: c.photos,
            faces: c.faces,
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
