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

/// Membership records of one photo rewritten or deleted per transaction at most: with the
/// joins guard, the cluster's change and a re-decision of the project (about 40 writes),
/// under DynamoDB's 100.
const FORGET_WRITES: usize = 39;

/// One record of which clusters some faces of a photo joined: the faces one join
/// transaction committed ([`records::cluster_member_key`], named by the first of them).
/// Records written before those held one face each (`{"cluster": …}`, the face's index in
/// the key) and are read the same way.
#[derive(Debug, Clone)]
pub(super) struct Joining {
    pub key: ItemKey,
    pub rev: u64,
    /// Cluster → the indexes of the photo's faces that joined it. Empty for a record that
    /// cannot be read (it is deleted by the photo's erasure).
    pub joined: BTreeMap<ClusterId, Vec<u32>>,
}

impl Joining {
    fn of(item: &tessera_core::ports::state_store::Item) -> Joining {
        let mut joined: BTreeMap<ClusterId, Vec<u32>> = BTreeMap::new();
        if let Some(map) = item.body["joined"].as_object() {
            for (c, faces) in map {
                let (Ok(c), Some(faces)) = (c.parse::<ClusterId>(), faces.as_array()) else {
                    continue;
                };
                let faces = faces.iter().filter_map(|i| i.as_u64()).map(|i| i as u32);
                joined.entry(c).or_default().extend(faces);
            }
        } else if let Some(c) = item.body["cluster"].as_str().and_then(|s| s.parse().ok())
            && let Ok(i) = item.key.sk[records::CLUSTER_MEMBER_PREFIX.len()..].parse::<u32>()
        {
            joined.insert(c, vec![i]);
        }
        Joining {
            key: item.key.clone(),
            rev: item.rev,
            joined,
        }
    }

    /// The record's body for `joined`.
    pub fn body(joined: &BTreeMap<ClusterId, Vec<u32>>) -> serde_json::Value {
        let joined: serde_json::Map<String, serde_json::Value> = joined
            .iter()
            .map(|(c, faces)| (c.to_string(), serde_json::json!(faces)))
            .collect();
        serde_json::json!({ "joined": joined, "at": tessera_core::Millis::now() })
    }

    /// The write that takes cluster `c` out of this record: its deletion when nothing
    /// else is in it, else the rest written back; on the revision read, so a concurrent
    /// erasure's run cannot count the same faces out twice.
    fn without(&self, c: ClusterId) -> Write {
        let mut rest = self.joined.clone();
        rest.remove(&c);
        if rest.is_empty() {
            Write::Delete {
                key: self.key.clone(),
                condition: Condition::Rev(self.rev),
            }
        } else {
            Write::Put {
                item: tessera_core::ports::state_store::Item::new(
                    self.key.clone(),
                    Joining::body(&rest),
                ),
                condition: Condition::Rev(self.rev),
            }
        }
    }
}

/// Every record of which clusters `photo`'s faces joined: one query (a page per 500).
pub(super) async fn joinings(
    store: &dyn StateStore,
    photo: tessera_core::PhotoId,
) -> Result<Vec<Joining>, StoreError> {
    let mut q = Query::partition(Index::Table, records::photo_key(photo).pk, 500);
    q.sk_prefix = Some(records::CLUSTER_MEMBER_PREFIX.into());
    let mut out = Vec::new();
    loop {
        let page = store.query(&q).await?;
        out.extend(page.items.iter().map(Joining::of));
        match page.next {
            Some(n) => q.after = Some(n),
            None => return Ok(out),
        }
    }
}

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
        let records = joinings(store, photo.id).await?;
        for unread in records.iter().filter(|r| r.joined.is_empty()) {
            store
                .transact(vec![Write::Delete {
                    key: unread.key.clone(),
                    condition: Condition::None,
                }])
                .await?;
        }
        let Some(id) = records.iter().find_map(|r| r.joined.keys().next().copied()) else {
            return Ok(changed);
        };
        let holding: Vec<&Joining> = records
            .iter()
            .filter(|r| r.joined.contains_key(&id))
            .collect();
        let faces_in = |rs: &[&Joining]| -> usize { rs.iter().map(|r| r.joined[&id].len()).sum() };
        let shard = records::cluster_count_shard(photo.id);
        // A join planned from what was read before this change must not commit.
        let rewrites = |rs: &[&Joining]| -> Vec<Write> {
            rs.iter()
                .map(|r| r.without(id))
                .chain([super::join::guard_write(photo.id, Condition::None)])
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
        if holding.len() > FORGET_WRITES {
            // A person in many of the photo's join transactions (or in many records
            // written one face each, before): all but the last records first, with their
            // counts while the cluster is there (a counter of a deleted cluster is not
            // made again); the loop then reads what is left.
            let early = &holding[..holding.len() - FORGET_WRITES];
            for chunk in early.chunks(FORGET_WRITES) {
                let mut writes = rewrites(chunk);
                if stored.is_some() {
                    writes.push(Write::Check {
                        key: records::cluster_body_key(id),
                        condition: Condition::Exists,
                    });
                    writes.push(uncount(faces_in(chunk), 0));
                }
                match store.transact(writes).await {
                    Ok(()) => {}
                    Err(e) if e.is_conflict() => break,
                    Err(e) => return Err(e.into()),
                }
            }
            continue;
        }
        let members = faces_in(&holding);
        let mut writes = rewrites(&holding);
        let mut withdrawn = false;
        if let Some((c, rev)) = stored {
            // Whether a release is withdrawn is judged on the cluster as it was: its
            // members that leaned are still shown, whatever the erased photo took away.
            let before = c.standing(&subjects, policy);
            let mut after = c.clone();
            after.remember(&before);
            let mut gone = after.forget(photo.id, members as u64);
            if !gone && after.reps.is_empty() {
                // Kept only for the subjects it stood for: while members remain (the
                // counters count every one, representative or not), to keep them pulled;
                // with this photo's faces its last, it goes, as every cluster goes with
                // its photos.
                let (faces, _) = counts(store, id).await?;
                gone = faces <= members as u64;
            }
            if gone {
                withdrawn = c.withdraws_release(&before, &Standing::Unsure);
                writes.extend(delete_cluster(photo.project, id, Condition::Rev(rev)));
            } else {
                withdrawn = c.withdraws_release(&before, &after.standing(&subjects, policy));
                writes.push(uncount(members, 1));
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

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::PhotoId;
    use tessera_core::ports::state_store::Item;

    fn item(sk: &str, body: serde_json::Value, rev: u64) -> Item {
        let mut i = Item::new(
            ItemKey::new(records::photo_key(PhotoId::new()).pk, sk.to_string()),
            body,
        );
        i.rev = rev;
        i
    }

    #[test]
    fn a_record_of_a_transaction_and_one_of_a_face_from_before_read_alike() {
        let (a, b) = (ClusterId::new(), ClusterId::new());
        let joined = BTreeMap::from([(a, vec![0, 3]), (b, vec![1])]);
        let now = Joining::of(&item("CLUSTER_OF#00000", Joining::body(&joined), 1));
        assert_eq!(now.joined, joined);
        let before = Joining::of(&item(
            "CLUSTER_OF#00007",
            serde_json::json!({"cluster": a, "at": 1}),
            1,
        ));
        assert_eq!(before.joined, BTreeMap::from([(a, vec![7])]));
        let unread = Joining::of(&item("CLUSTER_OF#00009", serde_json::json!({"x": 1}), 1));
        assert!(
            unread.joined.is_empty(),
            "erased as unreadable, never guessed at"
        );
    }

    #[test]
    fn taking_a_cluster_out_of_a_record_keeps_the_rest_on_the_revision_read() {
        let (a, b) = (ClusterId::new(), ClusterId::new());
        let r = Joining::of(&item(
            "CLUSTER_OF#00000",
            Joining::body(&BTreeMap::from([(a, vec![0, 3]), (b, vec![1])])),
            4,
        ));
        match r.without(a) {
            Write::Put { item, condition } => {
                assert_eq!(condition, Condition::Rev(4));
                assert_eq!(Joining::of(&item).joined, BTreeMap::from([(b, vec![1])]));
            }
            other => panic!("the rest is written back: {other:?}"),
        }
        let last = Joining::of(&item(
            "CLUSTER_OF#00001",
            Joining::body(&BTreeMap::from([(b, vec![1])])),
            2,
        ));
        assert!(matches!(
            last.without(b),
            Write::Delete {
                condition: Condition::Rev(2),
                ..
            }
        ));
    }
}
