//! A photo's decision reads its project's privacy view, spread over shards, and never
//! the project's own partition (issue 23: `PROJECT#<project>` took 39 % of a
//! partition's read limit and 67–75 % of its write limit at the load rehearsal's
//! extrapolated peak, from every photo's project and subject reads and its publication
//! check). The view says what the project says after every change, its subject sets do
//! not outlive a removal, and a project deleted leaves no shard.
mod support;

use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use support::*;
use tessera_core::ports::state_store::{
    Index, Item, ItemKey, Page, Query, StateStore, StoreError, Write,
};
use tessera_core::privacy_view::{self, VIEW_SHARDS};
use tessera_core::{PhotoId, TenantId, audit::Actor, projects, records};
use tessera_jobs::photos::{erase, project, view};

/// The real SQLite store, counting which partitions are read and written.
struct Counting {
    inner: Arc<dyn StateStore>,
    reads: Mutex<BTreeMap<String, u32>>,
    writes: Mutex<BTreeMap<String, u32>>,
}

impl Counting {
    fn reset(&self) {
        self.reads.lock().unwrap().clear();
        self.writes.lock().unwrap().clear();
    }
    fn reads_of(&self, pk: &str) -> u32 {
        self.reads.lock().unwrap().get(pk).copied().unwrap_or(0)
    }
    fn writes_of(&self, pk: &str) -> u32 {
        self.writes.lock().unwrap().get(pk).copied().unwrap_or(0)
    }
    fn written_with_prefix(&self, prefix: &str) -> BTreeSet<String> {
        self.writes
            .lock()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }
}

#[async_trait]
impl StateStore for Counting {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        *self
            .reads
            .lock()
            .unwrap()
            .entry(key.pk.clone())
            .or_default() += 1;
        self.inner.get(key).await
    }
    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        for w in &writes {
            *self
                .writes
                .lock()
                .unwrap()
                .entry(w.key().pk.clone())
                .or_default() += 1;
        }
        self.inner.transact(writes).await
    }
    async fn query(&self, q: &Query) -> Result<Page, StoreError> {
        if q.index == Index::Table {
            *self.reads.lock().unwrap().entry(q.pk.clone()).or_default() += 1;
        }
        self.inner.query(q).await
    }
}

async fn counted_rig() -> (Rig, Arc<Counting>) {
    let counting: Arc<Mutex<Option<Arc<Counting>>>> = Arc::default();
    let slot = counting.clone();
    let r = rig_over(
        |_| {},
        move |inner| {
            let c = Arc::new(Counting {
                inner,
                reads: Mutex::default(),
                writes: Mutex::default(),
            });
            *slot.lock().unwrap() = Some(c.clone());
            c
        },
    )
    .await;
    let c = counting.lock().unwrap().clone().unwrap();
    (r, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn photo_decisions_read_and_check_the_view_shards_never_the_project_partition() {
    let (r, counts) = counted_rig().await;
    let p = r.project(Some(0.363)).await;
    let (_, change) = r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    counts.reset();
    let mut photos = Vec::new();
    for i in 0..12 {
        let file = if i % 2 == 0 {
            "grace_hopper.jpg"
        } else {
            "astronaut.png"
        };
        let bytes = std::fs::read(shared().join("testdata/faces").join(file)).unwrap();
        let (photo, event) = r.upload_bytes(&p, &format!("{i} {file}"), bytes).await;
        r.ingest(&p, &event).await;
        photos.push((photo, i % 2 == 0));
    }
    r.settle().await;
    for (photo, hers) in &photos {
        let row = r.photo(*photo).await;
        assert!(
            row.servable(change.subjects_rev),
            "photo {photo} published at the current subjects: {row:?}"
        );
        let decisions: Vec<_> = row
            .faces
            .iter()
            .flatten()
            .map(|f| {
                matches!(
                    f.decision,
                    tessera_core::privacy::FaceDecision::Subject { .. }
                )
            })
            .collect();
        assert_eq!(
            decisions.iter().any(|d| *d),
            *hers,
            "photo {photo}: {decisions:?}"
        );
    }
    // Not one read of the project's partition (its record, its subjects) nor one check
    // on it: every photo read and checked the shard its id picks.
    let project_pk = records::project_key(p.id).pk;
    assert_eq!(
        counts.reads_of(&project_pk),
        0,
        "project partition read by photo jobs"
    );
    assert_eq!(
        counts.writes_of(&project_pk),
        0,
        "project partition checked or written by photo jobs"
    );
    let shards = counts.written_with_prefix(&format!("{project_pk}#VIEW#"));
    assert!(
        shards.len() >= 6,
        "12 photos checked {} of {VIEW_SHARDS} view shards: {shards:?}",
        shards.len()
    );
    for (photo, _) in &photos {
        let key = privacy_view::key_for(p.id, *photo);
        assert!(
            counts.reads_of(&key.pk) > 0,
            "photo {photo} did not read its own shard"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_follows_every_change_and_a_removed_subjects_set_is_deleted() {
    let r = rig().await;
    let objects = r.engine.ports().objects.clone();
    let p = r.project(Some(0.363)).await;
    let (hopper, _) = r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let sets = r.objects(&privacy_view::subject_sets_prefix(p.id)).await;
    assert_eq!(sets.len(), 1, "one current subject set: {sets:?}");
    let with_both = sets[0].clone();
    let v = view::read(r.store(), objects.as_ref(), p.id, 5)
        .await
        .unwrap();
    assert_eq!((v.subjects_rev, v.opted_out), (2, 2));
    assert_eq!(v.subjects.as_deref(), Some(with_both.as_str()));
    assert_eq!(
        view::subjects(r.store(), objects.as_ref(), &v)
            .await
            .unwrap()
            .len(),
        2
    );

    // Settings and retention reach every shard.
    project::set_settings(
        &r.engine,
        p.id,
        project::Settings {
            threshold: Some(0.3),
            expand: 0.4,
            keep_metadata: Default::default(),
        },
        &Actor::cli(TenantId::local()),
    )
    .await
    .unwrap();
    projects::set_upload_retention(r.store(), p.id, Some(30), &Actor::cli(TenantId::local()))
        .await
        .unwrap();
    for shard in 0..VIEW_SHARDS {
        let v = view::read(r.store(), objects.as_ref(), p.id, shard)
            .await
            .unwrap();
        assert_eq!(
            (
                v.subjects_rev,
                v.match_threshold,
                v.blur_expand,
                v.upload_retention_days
            ),
            (3, Some(0.3), 0.4, Some(30)),
            "shard {shard}"
        );
    }

    // A removal: the set that held her embeddings is gone, the new one has one subject.
    project::remove_subject(&r.engine, p.id, hopper.id, &Actor::cli(TenantId::local()))
        .await
        .unwrap();
    let sets = r.objects(&privacy_view::subject_sets_prefix(p.id)).await;
    assert_eq!(sets.len(), 1, "{sets:?}");
    assert_ne!(
        sets[0], with_both,
        "the set with the removed subject is deleted"
    );
    // A set lost before anyone read it (a cleanup racing the change that named it) is
    // made again from the subject records, and decisions go on.
    objects.delete(&sets[0]).await.unwrap();
    let v = view::read(r.store(), objects.as_ref(), p.id, 9)
        .await
        .unwrap();
    let now = view::subjects(r.store(), objects.as_ref(), &v)
        .await
        .unwrap();
    assert_eq!(now.len(), 1);
    assert!(now.iter().all(|s| s.subject != hopper.id));
    assert_eq!(
        r.objects(&privacy_view::subject_sets_prefix(p.id)).await,
        sets
    );
    // The sweep leaves only the current set.
    objects
        .put(
            &format!(
                "{}subjects-stale.json",
                privacy_view::subject_sets_prefix(p.id)
            ),
            b"{}".to_vec().into(),
        )
        .await
        .unwrap();
    r.settle().await;
    assert_eq!(
        r.objects(&privacy_view::subject_sets_prefix(p.id)).await,
        sets
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_without_a_view_gets_one_on_first_use_and_a_deleted_project_keeps_none() {
    let r = rig().await;
    let objects = r.engine.ports().objects.clone();
    let p = r.project(Some(0.363)).await;
    // As a project made before views existed: no shard until something needs one.
    assert!(
        r.store()
            .get(&privacy_view::key(p.id, 0))
            .await
            .unwrap()
            .is_none()
    );
    // Retention changes on such a project without making a view from the old value.
    projects::set_upload_retention(r.store(), p.id, Some(7), &Actor::cli(TenantId::local()))
        .await
        .unwrap();
    assert!(
        r.store()
            .get(&privacy_view::key(p.id, 0))
            .await
            .unwrap()
            .is_none()
    );
    let photo = PhotoId::new();
    let v = view::for_photo(r.store(), objects.as_ref(), p.id, photo)
        .await
        .unwrap();
    assert_eq!(
        (v.subjects_rev, v.upload_retention_days, v.subjects),
        (p.subjects_rev, Some(7), None)
    );
    for shard in 0..VIEW_SHARDS {
        assert!(
            r.store()
                .get(&privacy_view::key(p.id, shard))
                .await
                .unwrap()
                .is_some(),
            "shard {shard}"
        );
    }
    erase::delete_empty_project(r.store(), p.id).await.unwrap();
    for shard in 0..VIEW_SHARDS {
        assert!(
            r.store()
                .get(&privacy_view::key(p.id, shard))
                .await
                .unwrap()
                .is_none(),
            "shard {shard} outlived its project"
        );
    }
    // A photo event for the deleted project finds no view and none is made.
    assert!(matches!(
        view::for_photo(r.store(), objects.as_ref(), p.id, photo).await,
        Err(project::PhotoError::NotFound(_))
    ));
    assert!(
        r.store()
            .get(&privacy_view::key(p.id, 0))
            .await
            .unwrap()
            .is_none()
    );
}
