//! The image rules of `tessera_core::catalog::datasets` on the real embedded adapters
//! (SQLite, a folder): an image's bytes are stored once per distinct content of its
//! dataset, counted by the images that name them, and a registration racing a deletion
//! of the same bytes or the same name never loses its bytes.

use async_trait::async_trait;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_conformance::observed::{Hooks, Observed};
use tessera_core::Millis;
use tessera_core::catalog::datasets::{self, CheckedBytes, Dataset, NewDataset, Pixels};
use tessera_core::catalog::{CatalogError, collect, image_bytes};
use tessera_core::ports::ObjectStore;
use tessera_core::{ProjectId, TenantId};
use tessera_local::{FolderObjectStore, SqliteStateStore, StateDir};

fn bytes(fill: u8) -> CheckedBytes {
    let bytes = Bytes::from(vec![fill; 64]);
    CheckedBytes {
        sha: format!("{fill:064x}"),
        bytes,
        pixels: Pixels::Size(8, 8),
        gps: false,
    }
}

struct World {
    _dir: tempfile::TempDir,
    store: Arc<SqliteStateStore>,
    objects: Arc<FolderObjectStore>,
    dataset: Dataset,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = Arc::new(SqliteStateStore::open(&state.state_db()).unwrap());
    let objects = Arc::new(FolderObjectStore::new(state.objects(), state.tmp()).unwrap());
    let tenant: TenantId = "tenant-a".parse().unwrap();
    let dataset = datasets::create(
        store.as_ref(),
        &tenant,
        ProjectId::new(),
        NewDataset {
            name: "d".into(),
            source: serde_json::json!({"kind": "upload"}),
            camera_model: "SIMPLE_RADIAL".into(),
            respect_exif_orientation: true,
            intrinsics_mode: Default::default(),
        },
    )
    .await
    .unwrap();
    World {
        _dir: dir,
        store,
        objects,
        dataset,
    }
}

impl World {
    async fn register(&self, name: &str, fill: u8) -> datasets::Image {
        datasets::register_image(
            self.store.as_ref(),
            self.objects.as_ref(),
            &self.dataset,
            name,
            bytes(fill),
            ("upload", None),
        )
        .await
        .unwrap()
    }

    /// Every object the dataset holds.
    async fn objects_held(&self) -> Vec<String> {
        let prefix = format!("datasets/{}/", self.dataset.dataset_id);
        let (page, _) = self.objects.list(&prefix, None, 1000).await.unwrap();
        page.into_iter().map(|m| m.key).collect()
    }
}

/// A registration of `name` with the bytes `fill` slipped in at the moment the catalog
/// deletes an object: the interleaving two API requests can have, made certain.
struct RegistersOnDelete {
    inner: Arc<FolderObjectStore>,
    store: Arc<SqliteStateStore>,
    dataset: Dataset,
    name: String,
    fill: u8,
    outcome: Mutex<Option<Result<datasets::Image, CatalogError>>>,
}

#[async_trait]
impl Hooks for RegistersOnDelete {
    async fn deleting(&self, _key: &str) {
        if self.outcome.lock().unwrap().is_some() {
            return;
        }
        let racing = datasets::register_image(
            self.store.as_ref(),
            self.inner.as_ref(),
            &self.dataset,
            &self.name,
            bytes(self.fill),
            ("upload", None),
        )
        .await;
        *self.outcome.lock().unwrap() = Some(racing);
    }
}

async fn race(name: &str, fill: u8) {
    let w = world().await;
    let old = w.register("a.jpg", 1).await;
    let racing = Arc::new(RegistersOnDelete {
        inner: w.objects.clone(),
        store: w.store.clone(),
        dataset: w.dataset.clone(),
        name: name.into(),
        fill,
        outcome: Mutex::new(None),
    });
    let observed = Observed::new(w.objects.clone(), racing.clone());
    datasets::delete_image(w.store.as_ref(), &observed, &old)
        .await
        .unwrap();
    // The deletion's records went first, so the name was free and the content at zero
    // when its old bytes were being deleted: the racing registration succeeded...
    let new = racing
        .outcome
        .lock()
        .unwrap()
        .take()
        .expect("the race ran")
        .unwrap();
    // ...and once the deletion is done, what it registered keeps its bytes.
    assert_eq!(
        w.objects.get(&new.object_key()).await.unwrap(),
        Bytes::from(vec![fill; 64])
    );
    assert_eq!(w.objects_held().await, vec![new.object_key()]);
}

#[tokio::test]
async fn a_name_registered_while_its_old_image_is_deleted_keeps_its_bytes() {
    race("a.jpg", 2).await;
}

/// The case the generation exists for: the deletion took the count of these bytes to
/// zero and is about to delete their object when the same bytes are registered again.
#[tokio::test]
async fn the_same_bytes_registered_while_their_last_image_is_deleted_keep_their_object() {
    race("b.jpg", 1).await;
    race("a.jpg", 1).await;
}

/// `images:batchCreate` of one blob under 100 names once wrote 100 copies.
#[tokio::test]
async fn one_content_under_many_names_is_one_object_until_its_last_name_goes() {
    let w = world().await;
    let mut same = Vec::new();
    for i in 0..100 {
        same.push(w.register(&format!("p{i:03}.jpg"), 7).await);
    }
    let other = w.register("other.jpg", 8).await;
    assert_eq!(
        w.objects_held().await.len(),
        2,
        "{:?}",
        w.objects_held().await
    );
    let counts: Vec<(String, u64)> = image_bytes::all(w.store.as_ref(), w.dataset.dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.sha, c.refs))
        .collect();
    assert_eq!(
        counts,
        vec![(bytes(7).sha, 100), (bytes(8).sha, 1)],
        "one record per distinct content, counting its images"
    );
    let last = same.pop().unwrap();
    for img in &same {
        datasets::delete_image(w.store.as_ref(), w.objects.as_ref(), img)
            .await
            .unwrap();
    }
    assert_eq!(
        w.objects.get(&last.object_key()).await.unwrap(),
        Bytes::from(vec![7u8; 64]),
        "the last image naming the bytes still reads them"
    );
    datasets::delete_image(w.store.as_ref(), w.objects.as_ref(), &last)
        .await
        .unwrap();
    assert_eq!(w.objects_held().await, vec![other.object_key()]);
    let left = image_bytes::all(w.store.as_ref(), w.dataset.dataset_id)
        .await
        .unwrap();
    assert_eq!(
        left.iter()
            .map(|c| (c.refs, c.collecting))
            .collect::<Vec<_>>(),
        vec![(0, false), (1, false)],
        "the emptied content stays as a tombstone, so its generation is never reused"
    );
}

/// Fails every deletion while `failing` is set: the deleter "dies" after its records
/// are gone and before its bytes are.
#[derive(Default)]
struct Outage {
    failing: AtomicBool,
}

impl Hooks for Outage {
    fn deletion_fails(&self, _key: &str) -> bool {
        self.failing.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn bytes_whose_deleter_failed_are_collected_later_and_a_new_registration_starts_afresh() {
    let w = world().await;
    let outage = Arc::new(Outage::default());
    let observed = Observed::new(w.objects.clone(), outage.clone());
    let a = w.register("a.jpg", 3).await;
    let b = w.register("b.jpg", 4).await;
    outage.failing.store(true, Ordering::SeqCst);
    for img in [&a, &b] {
        datasets::delete_image(w.store.as_ref(), &observed, img)
            .await
            .unwrap();
    }
    outage.failing.store(false, Ordering::SeqCst);
    assert_eq!(
        datasets::all_images(w.store.as_ref(), w.dataset.dataset_id)
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        w.objects_held().await.len(),
        2,
        "the failed deletions left bytes"
    );

    // The same bytes as `a` come back: a new generation, in a new object.
    let again = w.register("again.jpg", 3).await;
    assert_ne!(again.object_key(), a.object_key());
    assert_eq!(
        w.objects.get(&again.object_key()).await.unwrap(),
        Bytes::from(vec![3u8; 64])
    );

    // Nothing is due yet; an hour later the collector deletes what nobody names.
    let early = collect::collect_expired(w.store.as_ref(), w.objects.as_ref(), Millis::now(), 100)
        .await
        .unwrap();
    assert_eq!(early.image_contents, 0);
    let later = Millis::now().plus(Duration::from_secs(2 * 3600));
    let done = collect::collect_expired(w.store.as_ref(), w.objects.as_ref(), later, 100)
        .await
        .unwrap();
    // `b`'s bytes, and the marker of `a`'s first generation (whose object the new
    // registration already deleted: deleting it again is harmless).
    assert_eq!(done.image_contents, 2, "{done:?}");
    assert_eq!(done.failed, 0, "{done:?}");
    let again_done = collect::collect_expired(w.store.as_ref(), w.objects.as_ref(), later, 100)
        .await
        .unwrap();
    assert_eq!(again_done.image_contents, 0, "nothing is collected twice");
    assert_eq!(w.objects_held().await, vec![again.object_key()]);
    let left: Vec<(u64, u64, bool)> = image_bytes::all(w.store.as_ref(), w.dataset.dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.refs, c.generation, c.collecting))
        .collect();
    assert_eq!(left, vec![(1, 2, false), (0, 1, false)], "{left:?}");
}

/// A collector that read an emptied record and runs late (a second reaper pass, an
/// index entry read before the record changed) deletes only that generation's object:
/// the same bytes registered again since are a new generation and keep their bytes.
#[tokio::test]
async fn a_late_collector_of_an_old_generation_leaves_the_new_one_alone() {
    let w = world().await;
    let first = w.register("a.jpg", 5).await;
    let old = image_bytes::all(w.store.as_ref(), w.dataset.dataset_id)
        .await
        .unwrap()
        .remove(0);
    datasets::delete_image(w.store.as_ref(), w.objects.as_ref(), &first)
        .await
        .unwrap();
    let again = w.register("a.jpg", 5).await;
    assert_ne!(
        again.object_key(),
        first.object_key(),
        "a generation is never reused"
    );
    let late = image_bytes::Content {
        collecting: true,
        refs: 0,
        ..old
    };
    image_bytes::collect(w.store.as_ref(), w.objects.as_ref(), &late)
        .await
        .unwrap();
    assert_eq!(
        w.objects.get(&again.object_key()).await.unwrap(),
        Bytes::from(vec![5u8; 64])
    );
    let now = image_bytes::all(w.store.as_ref(), w.dataset.dataset_id)
        .await
        .unwrap();
    assert_eq!((now[0].refs, now[0].generation), (1, 2), "{now:?}");
}

/// Deletes the image named `name` the moment the registration looks for its bytes'
/// object: the image is gone before its bytes are written.
struct DeletesOnLook {
    inner: Arc<FolderObjectStore>,
    store: Arc<SqliteStateStore>,
    dataset: Dataset,
    name: String,
    done: AtomicBool,
}

#[async_trait]
impl Hooks for DeletesOnLook {
    async fn looked(&self, key: &str) {
        if !key.contains("/contents/") || self.done.swap(true, Ordering::SeqCst) {
            return;
        }
        let img = datasets::image_named(self.store.as_ref(), &self.dataset, &self.name)
            .await
            .unwrap();
        datasets::delete_image(self.store.as_ref(), self.inner.as_ref(), &img)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn bytes_written_after_their_image_was_deleted_do_not_stay() {
    let w = world().await;
    let hooks = Arc::new(DeletesOnLook {
        inner: w.objects.clone(),
        store: w.store.clone(),
        dataset: w.dataset.clone(),
        name: "gone.jpg".into(),
        done: AtomicBool::new(false),
    });
    let observed = Observed::new(w.objects.clone(), hooks.clone());
    datasets::register_image(
        w.store.as_ref(),
        &observed,
        &w.dataset,
        "gone.jpg",
        bytes(6),
        ("upload", None),
    )
    .await
    .unwrap();
    assert!(hooks.done.load(Ordering::SeqCst), "the deletion ran");
    assert_eq!(w.objects_held().await, Vec::<String>::new());
}

/// Erasing a dataset leaves none of its contents: objects, records or tombstones.
#[tokio::test]
async fn erasing_a_dataset_removes_its_contents_and_their_records() {
    let w = world().await;
    w.register("a.jpg", 1).await;
    w.register("b.jpg", 1).await;
    let c = w.register("c.jpg", 2).await;
    datasets::delete_image(w.store.as_ref(), w.objects.as_ref(), &c)
        .await
        .unwrap();
    datasets::erase(
        w.store.as_ref(),
        w.objects.as_ref(),
        &w.dataset,
        &tessera_core::audit::Actor::cli(w.dataset.tenant.clone()),
    )
    .await
    .unwrap();
    assert_eq!(w.objects_held().await, Vec::<String>::new());
    let left = image_bytes::all(w.store.as_ref(), w.dataset.dataset_id)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// A reconstruction maps the set it was asked for or none: the dataset's images as
/// listed when the run starts must have the spec's digest. An image registered after the
/// run was asked for (or not yet in the index that lists them) and one deleted since
/// each make the listing a transient error that says so, never a run over another set
/// under the same fingerprint.
#[tokio::test]
async fn a_run_lists_the_set_it_was_asked_for_or_none() {
    use tessera_jobs::reconstruct::image_set;
    let w = world().await;
    let tenant: TenantId = "tenant-a".parse().unwrap();
    let set = datasets::images_prefix(w.dataset.dataset_id);
    w.register("a.jpg", 1).await;
    let b = w.register("b.jpg", 2).await;
    let asked = datasets::image_set_digest(
        &datasets::all_images(w.store.as_ref(), w.dataset.dataset_id)
            .await
            .unwrap(),
    );
    let list = |digest: Option<String>| {
        let (store, objects, tenant, set) = (
            w.store.clone(),
            w.objects.clone(),
            tenant.clone(),
            set.clone(),
        );
        async move {
            image_set::list(
                store.as_ref(),
                objects.as_ref(),
                &tenant,
                &set,
                digest.as_deref(),
            )
            .await
        }
    };
    let photos = list(Some(asked.clone())).await.unwrap();
    assert_eq!(photos.len(), 2);

    w.register("c.jpg", 3).await;
    let e = list(Some(asked.clone())).await.unwrap_err();
    assert_eq!(e.class, tessera_core::ErrorClass::Transient, "{e}");
    assert!(
        e.message.contains("3 images") && e.message.contains("submit the run again"),
        "{e}"
    );
    // No digest asked (a relocalization's new photos): whatever is there.
    assert_eq!(list(None).await.unwrap().len(), 3);

    datasets::delete_image(w.store.as_ref(), w.objects.as_ref(), &b)
        .await
        .unwrap();
    let e = list(Some(asked)).await.unwrap_err();
    assert_eq!(e.class, tessera_core::ErrorClass::Transient, "{e}");

    // Under `datasets/`, nothing but a dataset's image set is listed.
    let contents = format!("datasets/{}/contents", w.dataset.dataset_id);
    let e = image_set::list(
        w.store.as_ref(),
        w.objects.as_ref(),
        &tenant,
        &contents,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.class, tessera_core::ErrorClass::Permanent, "{e}");
    assert!(e.message.contains("names no dataset's images"), "{e}");
}
