//! Reading and deleting clusters, and taking an erased photo out of them.

use crate::photos::project::{self, PhotoError};
use std::collections::BTreeMap;
use tessera_core::clusters::{Cluster, Head, Standing};
use tessera_core::photo::{Face, Photo};
use tessera_core::ports::state_store::{
    Condition, Index, ItemKey, Query, StateStore, StoreError, Write,
};
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_core::records::{self, CLUSTER_COUNT_SHARDS};
use tessera_core::{ClusterId, ProjectId};
use tessera_engine::Engine;

/// Every cluster head of `project`: one query a shard.
pub async fn heads(store: &dyn StateStore, project: ProjectId) -> Result<Vec<Head>, StoreError> {
    let mut out = Vec::new();
    for partition in records::project_clusters_partitions(project) {
        let mut q = Query::partition(Index::Table, partition, 500);
        q.sk_prefix = Some(records::CLUSTER_PREFIX.into());
        loop {
            let page = store.query(&q).await?;
            for item in &page.items {
                out.push(records::decode(item)?);
            }
            match page.next {
                Some(n) => q.after = Some(n),
                None => break,
            }
        }
    }
    Ok(out)
}

/// Cluster `id` whole (its body) and the body's revision, if it exists.
pub async fn load(
    store: &dyn StateStore,
    id: ClusterId,
) -> Result<Option<(Cluster, u64)>, StoreError> {
    match store.get(&records::cluster_body_key(id)).await? {
        Some(item) => Ok(Some((records::decode(&item)?, item.rev))),
        None => Ok(None),
    }
}

/// The clusters `faces` are in, as stored now: read after the project's view, so that any
/// cluster change that re-decided the project up to the view's revision is seen.
pub async fn of_faces(store: &dyn StateStore, faces: &[Face]) -> Result<Vec<Cluster>, StoreError> {
    let ids: std::collections::BTreeSet<ClusterId> =
        faces.iter().filter_map(|f| f.cluster).collect();
    let mut out = Vec::new();
    for id in ids {
        if let Some((c, _)) = load(store, id).await? {
            out.push(c);
        }
    }
    Ok(out)
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

/// The writes that delete cluster `id` of `project`: head, body (on `body`) and counters.
pub(super) fn delete_cluster(project: ProjectId, id: ClusterId, body: Condition) -> Vec<Write> {
    let mut out = vec![
        Write::Delete {
            key: records::cluster_body_key(id),
            condition: body,
        },
        Write::Delete {
            key: records::cluster_key(project, id),
            condition: Condition::None,
        },
    ];
    out.extend((0..CLUSTER_COUNT_SHARDS).map(|k| Write::Delete {
        key: records::cluster_count_key(id, k),
        condition: Condition::None,
    }));
    out
}

/// Membership records of one photo deleted per transaction at most: with the cluster's
/// change and a re-decision of the project (about 40 writes), under DynamoDB's 100.
const FORGET_WRITES: usize = 40;

/// The subjects a project's clusters are ruled against, and its policy: what their
/// standing is computed from. A project that is gone rules nothing.
pub(super) async fn ruled_by(
    store: &dyn StateStore,
    project: ProjectId,
) -> Result<(Vec<SubjectEmbeddings>, MatchPolicy), PhotoError> {
    let p = match project::load(store, project).await {
        Ok(p) => p,
        Err(tessera_core::projects::ProjectError::NotFound(_)) => {
            return Ok((Vec::new(), MatchPolicy::from_threshold(None)));
        }
        Err(e) => return Err(e.into()),
    };
    let subjects = project::subjects(store, project)
        .await?
        .into_iter()
        .map(|s| SubjectEmbeddings {
            subject: s.id,
            embeddings: s.embeddings,
        })
        .collect();
    Ok((subjects, MatchPolicy::from_threshold(p.match_threshold)))
}

/// Take back from its clusters what `photo` gave them (its representative views and its
/// faces in the counts), deleting a cluster left with no view: erasing a photo must leave
/// no embedding of its faces anywhere. Each cluster is changed in the transaction that
/// deletes the photo's last records of joining it (earlier ones, where the photo has many
/// faces in it, go first with their counts), so a second run (or a concurrent one) finds
/// nothing left to take and counts nothing twice.
///
/// A change that withdraws a release members in other photos were shown by
/// ([`Cluster::withdraws_release`]) is committed with a re-decision of every photo of the
/// project, as a join's would be: fail closed. How many clusters were changed.
pub async fn forget_photo(engine: &Engine, photo: &Photo) -> Result<usize, PhotoError> {
    let store = engine.ports().store.as_ref();
    let (subjects, policy) = ruled_by(store, photo.project).await?;
    let mut changed = 0;
    loop {
        let mut q = Query::partition(Index::Table, records::photo_key(photo.id).pk, 500);
        q.sk_prefix = Some(records::CLUSTER_MEMBER_PREFIX.into());
        let mut per: BTreeMap<ClusterId, Vec<ItemKey>> = BTreeMap::new();
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
        let shard = records::cluster_count_shard(photo.id);
        let deletes = |keys: &[ItemKey]| -> Vec<Write> {
            keys.iter()
                .map(|k| Write::Delete {
                    key: k.clone(),
                    condition: Condition::Exists,
                })
                .collect()
        };
        let uncount = |faces: usize, photos: i64| Write::Add {
            key: records::cluster_count_key(id, shard),
            deltas: vec![
                ("faces".into(), -(faces as i64)),
                ("photos".into(), -photos),
            ],
        };
        let stored = load(store, id).await?;
        if members.len() > FORGET_WRITES {
            // A crowd of one person: all but the last records first, with their counts
            // while the cluster is there (a counter of a deleted cluster is not made
            // again); the loop then reads what is left.
            let early = &members[..members.len() - FORGET_WRITES];
            for chunk in early.chunks(FORGET_WRITES) {
                let mut writes = deletes(chunk);
                if stored.is_some() {
                    writes.push(Write::Check {
                        key: records::cluster_body_key(id),
                        condition: Condition::Exists,
                    });
                    writes.push(uncount(chunk.len(), 0));
                }
                match store.transact(writes).await {
                    Ok(()) => {}
                    Err(e) if e.is_conflict() => break,
                    Err(e) => return Err(e.into()),
                }
            }
            continue;
        }
        let mut writes = deletes(&members);
        let mut withdrawn = false;
        if let Some((c, rev)) = stored {
            // Whether a release is withdrawn is judged on the cluster as it was: its
            // members that leaned are still shown, whatever the erased photo took away.
            let before = c.standing(&subjects, policy);
            let mut after = c.clone();
            after.remember(&before);
            let mut gone = after.forget(photo.id, members.len() as u64);
            if !gone && after.reps.is_empty() {
                // Kept only for the subjects it stood for: while members remain (the
                // counters count every one, representative or not), to keep them pulled;
                // with this photo's faces its last, it goes, as every cluster goes with
                // its photos.
                let (faces, _) = counts(store, id).await?;
                gone = faces <= members.len() as u64;
            }
            if gone {
                withdrawn = c.withdraws_release(&before, &Standing::Unsure);
                writes.extend(delete_cluster(photo.project, id, Condition::Rev(rev)));
            } else {
                withdrawn = c.withdraws_release(&before, &after.standing(&subjects, policy));
                writes.push(uncount(members.len(), 1));
                // The head too: its centroid held the erased views.
                let (head, body) = records::cluster_items(&after);
                writes.push(Write::Put {
                    item: body,
                    condition: Condition::Rev(rev),
                });
                writes.push(Write::Put {
                    item: head,
                    condition: Condition::None,
                });
            }
        }
        let committed = if withdrawn {
            match project::redecide_with(engine, photo.project, writes).await {
                Ok(change) => {
                    tracing::info!(photo = %photo.id, cluster = %id, subjects_rev = change.subjects_rev, "an erasure withdrew a cluster's release; every photo of the project is decided again");
                    Ok(())
                }
                Err(PhotoError::Store(e)) => Err(e),
                Err(e) => return Err(e),
            }
        } else {
            store.transact(writes).await
        };
        match committed {
            Ok(()) => changed += 1,
            // Another join, or another erasure's run, meanwhile: read again.
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Delete every cluster of `project` whole: what erasing the project leaves of them once
/// its photos are gone. How many.
pub async fn erase_all(store: &dyn StateStore, project: ProjectId) -> Result<usize, StoreError> {
    let all = heads(store, project).await?;
    for s in &all {
        store
            .transact(delete_cluster(project, s.id, Condition::None))
            .await?;
    }
    if !all.is_empty() {
        tracing::info!(project = %project, clusters = all.len(), "clusters erased with the project");
    }
    Ok(all.len())
}
