//! A photo's faces joining their clusters: placed in memory, committed in a few
//! transactions.

use super::store::{self, heads};
use crate::photos::project::{self, PhotoError};
use std::collections::BTreeMap;
use tessera_core::clusters::{self, Cluster, Head};
use tessera_core::photo::{Face, Photo};
use tessera_core::ports::state_store::{Condition, Item, StateStore, StoreError, Write};
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_core::records::{self, CLUSTER_COUNT_SHARDS};
use tessera_core::{ClusterId, Millis, PhotoId};
use tessera_engine::{TaskContext, TaskError};

/// Which cluster each face of `photo` joined in earlier runs, by face index.
async fn joined_before(
    store: &dyn StateStore,
    photo: PhotoId,
) -> Result<BTreeMap<u32, ClusterId>, StoreError> {
    let mut out = BTreeMap::new();
    for r in store::joinings(store, photo).await? {
        for (c, faces) in r.joined {
            out.extend(faces.into_iter().map(|i| (i, c)));
        }
    }
    Ok(out)
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

/// Most writes of one join transaction, fence, photo check, membership record and
/// guard included. A transaction that also re-decides the project carries the project, its view
/// shards and the sweep (about 40 more), under DynamoDB's 100.
pub const JOIN_WRITES: usize = 48;
/// Most faces of one cluster in one slice. Faces cost no write of their own (one record
/// of the transaction holds them all), only bytes of that record and of the cluster's
/// body, so a crowd of one person joins in one transaction.
const SLICE_FACES: usize = 200;
/// Rounds of a join before it gives up on contention (and the task is tried again).
const JOIN_ROUNDS: usize = 20;

/// One cluster a photo's faces join, as planned in memory.
struct Touched {
    /// As read (or new): what the writes start from.
    stored: Cluster,
    /// With the faces placed so far, for placing the next ones.
    planned: Cluster,
    /// The body's revision as read (`None`: started by this photo).
    rev: Option<u64>,
    /// The centroid its head holds.
    head_centroid: Vec<f32>,
    /// Faces of the photo in it before this round.
    own_before: u64,
    /// The indexes joining it now.
    joining: Vec<u32>,
}

/// One transaction's share of one cluster: some of the faces joining it, and the cluster
/// after them.
struct Slice {
    cluster: Cluster,
    /// On the body: absent for a cluster this slice starts, else the revision the slice
    /// before it wrote (or read).
    condition: Condition,
    faces: Vec<u32>,
    /// Whether the photo counts in the cluster's photos with this slice.
    first_in_photo: bool,
    /// Whether the cluster's views changed (else only memberships and a counter).
    write_body: bool,
    /// Whether its centroid moved past what its head holds (or the cluster is new).
    write_head: bool,
    redecide: bool,
    started: bool,
}

impl Slice {
    fn writes(&self) -> usize {
        usize::from(self.write_body)
            + usize::from(self.write_head)
            + if self.started {
                CLUSTER_COUNT_SHARDS as usize
            } else {
                1
            }
    }
}

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
        // The guard first, then the records: a change committed after this read moves
        // the guard, and every transaction below is conditioned on it.
        let mut guard = store
            .get(&records::photo_joins_key(photo.id))
            .await?
            .map(|item| item.rev);
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
                // The photo is not erased: its erasure deletes the row with its marker
                // first and then takes its faces out of their clusters, so no join lands
                // after that. The marker, not the row: a check is billed by the size of
                // the item it reads, and a crowd's row is tens of KB (each of a 150-face
                // photo's join transactions paid 136 write units for it, and made its
                // row's partition the hottest of the load rehearsal).
                crate::photos::erase::not_erased(photo.id),
            ];
            // Which faces joined which cluster, one record for the transaction, named by
            // its first face. A transaction of another run (or of an erasure) that
            // committed after this round's read moved the guard: this one conflicts, and
            // the next round plans from what is stored. The record is written only if
            // absent as well.
            let mut joined: BTreeMap<ClusterId, Vec<u32>> = BTreeMap::new();
            for sl in &tx {
                joined.entry(sl.cluster.id).or_default().extend(&sl.faces);
            }
            let first = tx
                .iter()
                .flat_map(|sl| sl.faces.iter())
                .min()
                .copied()
                .unwrap_or(0);
            writes.push(Write::Put {
                item: Item::new(
                    records::cluster_member_key(photo.id, first),
                    store::Joining::body(&joined),
                ),
                condition: Condition::Absent,
            });
            writes.push(guard_write(
                photo.id,
                guard.map_or(Condition::Absent, Condition::Rev),
            ));
            for sl in &tx {
                let (head, body) = records::cluster_items(&sl.cluster);
                if sl.write_body {
                    writes.push(Write::Put {
                        item: body,
                        condition: sl.condition.clone(),
                    });
                }
                if sl.write_head {
                    // The body's condition guards the race; a new cluster's head is new.
                    let condition = if sl.started {
                        Condition::Absent
                    } else {
                        Condition::None
                    };
                    writes.push(Write::Put {
                        item: head,
                        condition,
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
                    guard = Some(guard.map_or(1, |r| r + 1));
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

/// The write that moves `photo`'s joins guard ([`records::photo_joins_key`]).
pub(super) fn guard_write(photo: PhotoId, condition: Condition) -> Write {
    Write::Put {
        item: Item::new(
            records::photo_joins_key(photo),
            serde_json::json!({ "at": Millis::now() }),
        ),
        condition,
    }
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
        let candidates: Vec<Head> = heads
            .iter()
            .filter(|h| !touched.iter().any(|t| t.stored.id == h.id))
            .cloned()
            .chain(touched.iter().map(|t| t.planned.head()))
            .collect();
        let found = match clusters::nearest(&candidates, &f.embedding) {
            Some((n, _)) => {
                let head = &candidates[n];
                match touched.iter().position(|t| t.stored.id == head.id) {
                    Some(k) => Some(k),
                    // A head whose body is gone was erased meanwhile: start anew.
                    None => store::load(store, head.id).await?.map(|(c, rev)| {
                        touched.push(Touched {
                            planned: c.clone(),
                            stored: c,
                            rev: Some(rev),
                            head_centroid: head.centroid.clone(),
                            own_before: own.get(&head.id).copied().unwrap_or(0),
                            joining: Vec::new(),
                        });
                        touched.len() - 1
                    }),
                }
            }
            None => None,
        };
        let k = found.unwrap_or_else(|| {
            let c = Cluster::new(photo.project, Millis::now());
            touched.push(Touched {
                planned: c.clone(),
                stored: c,
                rev: None,
                head_centroid: Vec::new(),
                own_before: 0,
                joining: Vec::new(),
            });
            touched.len() - 1
        });
        let t = &mut touched[k];
        let first = t.own_before == 0 && t.joining.is_empty();
        t.planned
            .admit(photo.id, i as u32, f, first, clusters::confident(f));
        t.joining.push(i as u32);
    }
    Ok(touched)
}

/// The transactions that commit `touched`, in order: each cluster's faces in slices of at
/// most [`SLICE_FACES`] (a slice carries the cluster's body when its views changed,
/// conditioned on the revision the slice before it wrote, its head when its centroid
/// moved, and its counters), slices of several clusters packed together up to
/// [`JOIN_WRITES`], never two of one cluster in one transaction.
fn slices(
    photo: &Photo,
    faces: &[Face],
    touched: &[Touched],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> Vec<Vec<Slice>> {
    let per_slice = SLICE_FACES;
    let mut units: Vec<Vec<Slice>> = Vec::new();
    for t in touched {
        let mut state = t.stored.clone();
        let mut rev = t.rev;
        let mut head_centroid = t.head_centroid.clone();
        let mut admitted = 0u64;
        let mut unit = Vec::new();
        for part in t.joining.chunks(per_slice) {
            let before = state.standing(subjects, policy);
            let views_before = state.reps.clone();
            let leaning_before = state.leaning;
            let first_in_photo = t.own_before == 0 && admitted == 0;
            for i in part {
                let f = &faces[*i as usize];
                let first = t.own_before == 0 && admitted == 0;
                state.admit(photo.id, *i, f, first, clusters::confident(f));
                admitted += 1;
            }
            // Its views as they were: its standing and centroid are too, and nothing of
            // it but the counters need be written (a person in every photo of a burst);
            // unless a face that leaned joined, which a release's withdrawal must know of
            // ([`Cluster::withdraws_release`]).
            let write_body =
                rev.is_none() || state.reps != views_before || state.leaning != leaning_before;
            let write_head = rev.is_none() || (write_body && state.head_drifted(&head_centroid));
            let after = state.standing(subjects, policy);
            let redecide =
                write_body && state.calls_for_redecision(&before, &after, t.own_before + admitted);
            if redecide {
                // Why a project is decided again whole, for whoever reads the bill.
                tracing::info!(photo = %photo.id, cluster = %state.id, ?before, ?after, faces = state.faces, leaning = state.leaning, clear_views = state.clear_views, "a join changes its cluster's standing for members in other photos");
            }
            unit.push(Slice {
                cluster: state.clone(),
                condition: rev.map_or(Condition::Absent, Condition::Rev),
                faces: part.to_vec(),
                first_in_photo,
                write_body,
                write_head,
                redecide,
                started: rev.is_none(),
            });
            if write_body {
                rev = Some(rev.map_or(1, |r| r + 1));
            }
            if write_head {
                head_centroid = state.centroid.clone();
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
        // The fence, the photo's check, the membership record and the guard.
        let mut size = 4;
        for q in queues.iter_mut() {
            let Some(sl) = q.pop_front() else { continue };
            let writes = sl.writes();
            if size + writes > JOIN_WRITES && !tx.is_empty() {
                out.push(std::mem::take(&mut tx));
                size = 4;
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
