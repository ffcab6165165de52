//! Faces joining their project's clusters as photos are decided, what erasing a photo
//! takes back from them, and opting a cluster out. The rules are in
//! [`tessera_core::clusters`]; this module stores them.
//!
//! A cluster is two records: its head (counts and centroid, about 1.2 KB: what a face's
//! search for its cluster and the listing read), in one of 16 partitions of the project's
//! cluster heads (never the project's own, which photo jobs do not touch), and its representative
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
//! Cost, per photo with `f` faces in a project with `c` clusters: 16 queries of heads
//! (`⌈c × 1.2 KB / 1 MB⌉` pages in all), one query of the photo's memberships, one read of
//! the representatives of each cluster it joins, and `⌈(f + 2k) / 46⌉` transactions for
//! `k` clusters joined (fence, photo check, a membership per face, a head and the
//! representatives per cluster). A conflict with a concurrent join re-reads the heads and
//! places what is left.

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

/// Every cluster of `project`, heads only (no representatives): one query a shard.
pub async fn heads(store: &dyn StateStore, project: ProjectId) -> Result<Vec<Stored>, StoreError> {
    let mut out = Vec::new();
    for partition in records::project_clusters_partitions(project) {
        let mut q = Query::partition(Index::Table, partition, 500);
        q.sk_prefix = Some(records::CLUSTER_PREFIX.into());
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
                None => break,
            }
        }
    }
    Ok(out)
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

/// Which cluster each face of `photo` joined in earlier runs, by face index.
async fn joined_before(
    store: &dyn StateStore,
    photo: PhotoId,
) -> Result<BTreeMap<u32, ClusterId>, StoreError> {
    let mut q = Query::partition(Index::Table, records::photo_key(photo).pk, 500);
    q.sk_prefix = Some(records::CLUSTER_MEMBER_PREFIX.into());
    let mut out = BTreeMap::new();
    loop {
        let page = store.query(&q).await?;
        for item in &page.items {
            let index = item.key.sk[records::CLUSTER_MEMBER_PREFIX.len()..].parse::<u32>();
            let cluster = item.body["cluster"].as_str().and_then(|s| s.parse().ok());
            if let (Ok(i), Some(c)) = (index, cluster) {
                out.insert(i, c);
            }
        }
        match page.next {
            Some(n) => q.after = Some(n),
            None => return Ok(out),
        }
    }
}

/// What joining a photo's faces did.
#[derive(Debug, Default)]
pub struct Joined {
    /// Faces that joined a cluster in this run.
    pub joined: usize,
    /// Clusters this run started.
    pub started: usize,
    /// Transactions it took (a conflict with another photo's join costs one more round).
    pub transactions: usize,
    /// The project's re-decision committed with a join, if one was called for: the
    /// photo's own decision is stale (decided at an older subject revision).
    pub redecided: Option<project::SubjectChange>,
}

/// Most writes of one join transaction, fence and photo check included. A transaction
/// that also re-decides the project carries the project, its view shards and the sweep
/// (about 40 more), under DynamoDB's 100.
pub const JOIN_WRITES: usize = 48;
/// Rounds of a join before it gives up on contention (and the task is tried again).
const JOIN_ROUNDS: usize = 20;

/// One cluster a photo's faces join, as planned in memory.
struct Touched {
    /// As read (or new): what the writes start from.
    stored: Cluster,
    /// With the faces placed so far, for placing the next ones.
    planned: Cluster,
    /// The head's revision as read (`None`: started by this photo).
    rev: Option<u64>,
    /// Faces of the photo in it before this round.
    own_before: u64,
    /// The indexes joining it now.
    joining: Vec<u32>,
}

/// One transaction's share of one cluster: some of the faces joining it, and the cluster
/// after them.
struct Slice {
    cluster: Cluster,
    condition: Condition,
    faces: Vec<u32>,
    /// Whether the photo counts in the cluster's photos with this slice.
    first_in_photo: bool,
    /// Whether the cluster's views changed (else only memberships and a counter).
    write_head: bool,
    redecide: bool,
    started: bool,
}

impl Slice {
    fn writes(&self) -> usize {
        self.faces.len()
            + if self.write_head { 2 } else { 0 }
            + if self.started {
                CLUSTER_COUNT_SHARDS as usize
            } else {
                1
            }
    }
}

use tessera_core::records::CLUSTER_COUNT_SHARDS;

/// Have each of `faces` (decided on its own evidence, in `photo`) join its cluster, or
/// start one, unless it did before; see the module's doc. Faces without an embedding
/// join nothing. The faces are placed in memory against the clusters as read (a face may
/// join a cluster another face of the photo started), then committed in transactions of
/// at most [`JOIN_WRITES`] writes, a cluster's faces in slices where they are many: a
/// crowd of 150 faces is a handful of transactions, not 150 rounds.
pub async fn join(
    ctx: &TaskContext,
    photo: &Photo,
    faces: &mut [Face],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> Result<Joined, TaskError> {
    let store = ctx.ports().store.as_ref();
    let mut out = Joined::default();
    for _round in 0..JOIN_ROUNDS {
        // Faces that joined in an earlier run (or an earlier round of this one).
        let before = joined_before(store, photo.id).await?;
        for (i, f) in faces.iter_mut().enumerate() {
            if f.cluster.is_none() {
                f.cluster = before.get(&(i as u32)).copied();
            }
        }
        let pending: Vec<usize> = (0..faces.len())
            .filter(|&i| faces[i].cluster.is_none() && !faces[i].embedding.is_empty())
            .collect();
        if pending.is_empty() {
            return Ok(out);
        }
        let mut own: BTreeMap<ClusterId, u64> = BTreeMap::new();
        for f in faces.iter() {
            if let Some(c) = f.cluster {
                *own.entry(c).or_default() += 1;
            }
        }
        let touched = place(store, photo, faces, &pending, &own).await?;
        let transactions = slices(photo, faces, &touched, subjects, policy);
        let mut conflicted = false;
        for tx in transactions {
            let mut writes = vec![
                ctx.fence_write(),
                // The photo still exists: its erasure deletes the row first and then
                // takes its faces out of their clusters, so no join lands after that.
                Write::Check {
                    key: records::photo_key(photo.id),
                    condition: Condition::Exists,
                },
            ];
            for sl in &tx {
                for i in &sl.faces {
                    writes.push(Write::Put {
                        item: Item::new(
                            records::cluster_member_key(photo.id, *i),
                            serde_json::json!({ "cluster": sl.cluster.id, "at": Millis::now() }),
                        ),
                        condition: Condition::Absent,
                    });
                }
                if sl.write_head {
                    let (head, reps) = records::cluster_items(&sl.cluster);
                    writes.push(Write::Put {
                        item: head,
                        condition: sl.condition.clone(),
                    });
                    writes.push(Write::Put {
                        item: reps,
                        condition: Condition::None,
                    });
                }
                writes.extend(count_writes(photo.id, sl));
            }
            out.transactions += 1;
            let committed = if tx.iter().any(|sl| sl.redecide) {
                match project::redecide_with(ctx.engine(), photo.project, writes).await {
                    Ok(change) => {
                        tracing::info!(photo = %photo.id, subjects_rev = change.subjects_rev, "a cluster's standing changed; every photo of the project is decided again");
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
                    for sl in &tx {
                        for i in &sl.faces {
                            faces[*i as usize].cluster = Some(sl.cluster.id);
                        }
                        out.joined += sl.faces.len();
                        out.started += usize::from(sl.started);
                    }
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
                // Another photo joined or started a cluster meanwhile, or an earlier run
                // of this one joined a face: place what is left again.
                Err(e) if e.is_conflict() => {
                    conflicted = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !conflicted {
            return Ok(out);
        }
    }
    Err(TaskError::transient(format!(
        "photo {}'s faces could not join their clusters in {JOIN_ROUNDS} rounds of contention; tried again later",
        photo.id
    )))
}

/// The counter writes of a slice: a cluster it starts gets its shards, the photo's with
/// its counts; otherwise the photo's shard is added to.
fn count_writes(photo: PhotoId, sl: &Slice) -> Vec<Write> {
    let mine = records::cluster_count_shard(photo);
    let (faces, photos) = (sl.faces.len() as i64, i64::from(sl.first_in_photo));
    if sl.started {
        (0..CLUSTER_COUNT_SHARDS)
            .map(|k| {
                let (f, p) = if k == mine { (faces, photos) } else { (0, 0) };
                Write::Put {
                    item: Item::new(
                        records::cluster_count_key(sl.cluster.id, k),
                        serde_json::json!({ "faces": f, "photos": p }),
                    ),
                    condition: Condition::Absent,
                }
            })
            .collect()
    } else {
        vec![Write::Add {
            key: records::cluster_count_key(sl.cluster.id, mine),
            deltas: vec![("faces".into(), faces), ("photos".into(), photos)],
        }]
    }
}

/// How many faces and photos joined cluster `id`: the sum of its counter shards.
pub async fn counts(store: &dyn StateStore, id: ClusterId) -> Result<(u64, u64), StoreError> {
    let (mut faces, mut photos) = (0i64, 0i64);
    for k in 0..CLUSTER_COUNT_SHARDS {
        if let Some(item) = store.get(&records::cluster_count_key(id, k)).await? {
            faces += item.body["faces"].as_i64().unwrap_or(0);
            photos += item.body["photos"].as_i64().unwrap_or(0);
        }
    }
    Ok((faces.max(0) as u64, photos.max(0) as u64))
}

/// The writes that delete cluster `id` of `project`: head, views and counters.
fn delete_cluster(project: ProjectId, id: ClusterId, head: Condition) -> Vec<Write> {
    let mut out = vec![
        Write::Delete {
            key: records::cluster_key(project, id),
            condition: head,
        },
        Write::Delete {
            key: records::cluster_reps_key(project, id),
            condition: Condition::None,
        },
    ];
    out.extend((0..CLUSTER_COUNT_SHARDS).map(|k| Write::Delete {
        key: records::cluster_count_key(id, k),
        condition: Condition::None,
    }));
    out
}

/// Place each of the `pending` faces: against the heads as read, and the clusters this
/// photo touches as they grow.
async fn place(
    store: &dyn StateStore,
    photo: &Photo,
    faces: &[Face],
    pending: &[usize],
    own: &BTreeMap<ClusterId, u64>,
) -> Result<Vec<Touched>, StoreError> {
    let heads = heads(store, photo.project).await?;
    let mut touched: Vec<Touched> = Vec::new();
    for &i in pending {
        let f = &faces[i];
        let candidates: Vec<Cluster> = heads
            .iter()
            .filter(|h| !touched.iter().any(|t| t.stored.id == h.cluster.id))
            .map(|h| h.cluster.clone())
            .chain(touched.iter().map(|t| t.planned.clone()))
            .collect();
        let k = match clusters::nearest(&candidates, &f.embedding) {
            Some((n, _)) => {
                let id = candidates[n].id;
                match touched.iter().position(|t| t.stored.id == id) {
                    Some(k) => k,
                    None => {
                        let h = heads
                            .iter()
                            .find(|h| h.cluster.id == id)
                            .expect("a candidate not touched is a head");
                        let c = with_reps(store, h.cluster.clone()).await?;
                        touched.push(Touched {
                            planned: c.clone(),
                            stored: c,
                            rev: Some(h.rev),
                            own_before: own.get(&id).copied().unwrap_or(0),
                            joining: Vec::new(),
                        });
                        touched.len() - 1
                    }
                }
            }
            None => {
                let c = Cluster::new(photo.project, Millis::now());
                touched.push(Touched {
                    planned: c.clone(),
                    stored: c,
                    rev: None,
                    own_before: 0,
                    joining: Vec::new(),
                });
                touched.len() - 1
            }
        };
        let t = &mut touched[k];
        let first = t.own_before == 0 && t.joining.is_empty();
        t.planned.admit(photo.id, i as u32, f, first, confident(f));
        t.joining.push(i as u32);
    }
    Ok(touched)
}

/// The transactions that commit `touched`, in order: each cluster's faces in slices of at
/// most [`JOIN_WRITES`] − 12 (a slice carries the cluster's head and views when they
/// changed, conditioned on the revision the slice before it wrote, and its counters),
/// slices of several clusters packed together up to [`JOIN_WRITES`], never two of one
/// cluster in one transaction.
fn slices(
    photo: &Photo,
    faces: &[Face],
    touched: &[Touched],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> Vec<Vec<Slice>> {
    let per_slice = JOIN_WRITES - 4 - CLUSTER_COUNT_SHARDS as usize;
    let mut units: Vec<Vec<Slice>> = Vec::new();
    for t in touched {
        let mut state = t.stored.clone();
        let mut rev = t.rev;
        let mut admitted = 0u64;
        let mut unit = Vec::new();
        for part in t.joining.chunks(per_slice) {
            let before = state.standing(subjects, policy);
            let views_before = state.reps.clone();
            let first_in_photo = t.own_before == 0 && admitted == 0;
            for i in part {
                let f = &faces[*i as usize];
                let first = t.own_before == 0 && admitted == 0;
                state.admit(photo.id, *i, f, first, confident(f));
                admitted += 1;
            }
            // Its views as they were: its standing is too, and nothing of it but the
            // counters need be written (a person in every photo of a burst).
            let write_head = rev.is_none() || state.reps != views_before;
            let after = state.standing(subjects, policy);
            unit.push(Slice {
                cluster: state.clone(),
                condition: rev.map_or(Condition::Absent, Condition::Rev),
                faces: part.to_vec(),
                first_in_photo,
                write_head,
                redecide: write_head
                    && state.calls_for_redecision(&before, &after, t.own_before + admitted),
                started: rev.is_none(),
            });
            if write_head {
                rev = Some(rev.map_or(1, |r| r + 1));
            }
        }
        units.push(unit);
    }
    // Pack: slice k of every cluster goes in round k's transactions, several clusters'
    // slices to a transaction as the write budget allows.
    let rounds = units.iter().map(Vec::len).max().unwrap_or(0);
    let mut out: Vec<Vec<Slice>> = Vec::new();
    let mut queues: Vec<std::collections::VecDeque<Slice>> =
        units.into_iter().map(Into::into).collect();
    for _ in 0..rounds {
        let mut tx: Vec<Slice> = Vec::new();
        let mut size = 2;
        for q in queues.iter_mut() {
            let Some(sl) = q.pop_front() else { continue };
            let writes = sl.writes();
            if size + writes > JOIN_WRITES && !tx.is_empty() {
                out.push(std::mem::take(&mut tx));
                size = 2;
            }
            size += writes;
            tx.push(sl);
        }
        if !tx.is_empty() {
            out.push(tx);
        }
    }
    out
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
                writes.extend(delete_cluster(photo.project, id, Condition::Rev(item.rev)));
            } else {
                writes.push(Write::Add {
                    key: records::cluster_count_key(id, records::cluster_count_shard(photo.id)),
                    deltas: vec![
                        ("faces".into(), -(members.len() as i64)),
                        ("photos".into(), -1),
                    ],
                });
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
            .transact(delete_cluster(project, s.cluster.id, Condition::None))
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
        let c = with_reps(store, head.clone()).await?;
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
