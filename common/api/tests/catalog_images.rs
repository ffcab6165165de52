//! The image rules of `tessera_core::catalog::datasets` on the real embedded adapters
//! (SQLite, a folder): a deleted image's name is given back only once its bytes are
//! gone, so a registration of the same name racing the deletion never loses its bytes.

use async_trait::async_trait;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use tessera_conformance::observed::{Hooks, Observed};
use tessera_core::catalog::CatalogError;
use tessera_core::catalog::datasets::{self, CheckedBytes, Dataset, NewDataset, Pixels};
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

/// A registration of `name` slipped in at the moment the catalog deletes an object: the
/// interleaving two API requests can have, made certain.
struct RegistersOnDelete {
    inner: Arc<FolderObjectStore>,
    store: Arc<SqliteStateStore>,
    dataset: Dataset,
    name: String,
    outcome: Mutex<Option<Result<datasets::Image, CatalogError>>>,
}

#[async_trait]
impl Hooks for RegistersOnDelete {
    async fn deleting(&self, _key: &str) {
        let racing = datasets::register_image(
            self.store.as_ref(),
            self.inner.as_ref(),
            &self.dataset,
            &self.name,
            bytes(2),
            ("upload", None),
        )
        .await;
        *self.outcome.lock().unwrap() = Some(racing);
    }
}

#[tokio::test]
async fn a_name_registered_while_its_old_image_is_deleted_keeps_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = Arc::new(SqliteStateStore::open(&state.state_db()).unwrap());
    let objects = Arc::new(FolderObjectStore::new(state.objects(), state.tmp()).unwrap());
    let tenant: TenantId = "tenant-a".parse().unwrap();
    let d = datasets::create(
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
    let old = datasets::register_image(
        store.as_ref(),
        objects.as_ref(),
        &d,
        "a.jpg",
        bytes(1),
        ("upload", None),
    )
    .await
    .unwrap();
    let racing = Arc::new(RegistersOnDelete {
        inner: objects.clone(),
        store: store.clone(),
        dataset: d.clone(),
        name: "a.jpg".into(),
        outcome: Mutex::new(None),
    });
    let observed = Observed::new(objects.clone(), racing.clone());
    datasets::delete_image(store.as_ref(), &observed, &old)
        .await
        .unwrap();
    // While the old bytes were being deleted its name was still taken...
    let during = racing.outcome.lock().unwrap().take().expect("the race ran");
    assert!(
        matches!(during, Err(CatalogError::Conflict(_))),
        "{during:?}"
    );
    // ...and once the deletion is done it is free, and what is registered under it
    // keeps its bytes.
    let new = datasets::register_image(
        store.as_ref(),
        objects.as_ref(),
        &d,
        "a.jpg",
        bytes(2),
        ("upload", None),
    )
    .await
    .unwrap();
    assert_eq!(
        objects.get(&new.object_key()).await.unwrap(),
        Bytes::from(vec![2u8; 64])
    );
}
