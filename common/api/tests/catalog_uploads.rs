//! The upload rules of `tessera_core::catalog::uploads` on the real embedded adapters
//! (SQLite, a folder): bounded chunk counts, expiry refused with 410, collection of
//! expired uploads and blobs, and a finalize racing a blob's collection told to retry.

use bytes::Bytes;
use std::time::Duration;
use tessera_core::catalog::CatalogError;
use tessera_core::catalog::uploads::{self, MAX_CHUNKS, UploadState};
use tessera_core::ports::state_store::{Condition, ItemKey, Write};
use tessera_core::ports::{ObjectStore, StateStore};
use tessera_core::{Millis, TenantId};
use tessera_local::{FolderObjectStore, SqliteStateStore, StateDir};

struct World {
    _dir: tempfile::TempDir,
    store: SqliteStateStore,
    objects: FolderObjectStore,
    scratch: std::path::PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    World {
        store: SqliteStateStore::open(&state.state_db()).unwrap(),
        objects: FolderObjectStore::new(state.objects(), state.tmp()).unwrap(),
        scratch: state.work(),
        _dir: dir,
    }
}

async fn keys(objects: &FolderObjectStore, prefix: &str) -> Vec<String> {
    objects
        .list(prefix, None, 10_000)
        .await
        .unwrap()
        .0
        .into_iter()
        .map(|m| m.key)
        .collect()
}

fn tenant() -> TenantId {
    "tenant-a".parse().unwrap()
}

#[tokio::test]
async fn one_byte_chunks_stop_at_the_chunk_limit_with_413_and_the_record_stays_small() {
    let w = world();
    let size = 50_000u64;
    let (u, _) = uploads::create(&w.store, &tenant(), size, None, None)
        .await
        .unwrap();
    let mut refused_at = None;
    for a in 0..size {
        match uploads::accept_chunk(
            &w.store,
            &w.objects,
            &tenant(),
            &u.upload_id,
            (a, a, size),
            Bytes::from_static(b"x"),
        )
        .await
        {
            Ok(_) => {}
            Err(CatalogError::TooLarge(m)) => {
                assert!(m.contains("in one chunk"), "{m}");
                refused_at = Some(a);
                break;
            }
            Err(e) => panic!("chunk {a}: {e}"),
        }
    }
    assert_eq!(refused_at, Some(MAX_CHUNKS as u64 - 1));
    // The rest in one chunk is still taken: the upload is not lost.
    let rest = Bytes::from(vec![b'x'; (size - refused_at.unwrap()) as usize]);
    let u = uploads::accept_chunk(
        &w.store,
        &w.objects,
        &tenant(),
        &u.upload_id,
        (refused_at.unwrap(), size - 1, size),
        rest,
    )
    .await
    .unwrap();
    assert_eq!(u.state, UploadState::Received);
    let item = w
        .store
        .get(&ItemKey::new(
            format!("UPLOAD#{}#{}", tenant(), u.upload_id),
            "UPLOAD",
        ))
        .await
        .unwrap()
        .unwrap();
    let record = serde_json::to_vec(&item.body).unwrap().len();
    assert!(
        record < 64 * 1024,
        "{record} bytes of record, far below DynamoDB's 400 KB"
    );
    let u = uploads::finalize(
        &w.store,
        &w.objects,
        &w.scratch,
        &tenant(),
        &u.upload_id,
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        w.objects
            .get(&uploads::blob_key(
                &tenant(),
                u.blob_sha.as_deref().unwrap()
            ))
            .await
            .unwrap()
            .len() as u64,
        size
    );
}

#[tokio::test]
async fn an_expired_upload_answers_gone_and_is_collected_with_its_chunks() {
    let w = world();
    let (u, _) = uploads::create(&w.store, &tenant(), 10, None, None)
        .await
        .unwrap();
    uploads::accept_chunk(
        &w.store,
        &w.objects,
        &tenant(),
        &u.upload_id,
        (0, 4, 10),
        Bytes::from_static(b"01234"),
    )
    .await
    .unwrap();
    assert_eq!(keys(&w.objects, "upload-chunks/").await.len(), 1);
    // Not yet due: nothing is collected.
    let c =
        tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, Millis::now(), 100)
            .await
            .unwrap();
    assert_eq!(c, Default::default());
    // Its time passes.
    w.store
        .transact(vec![Write::Set {
            key: ItemKey::new(format!("UPLOAD#{}#{}", tenant(), u.upload_id), "UPLOAD"),
            fields: vec![(
                "expires_at".into(),
                Millis(Millis::now().0 - 1000).to_rfc3339().into(),
            )],
            condition: Condition::Exists,
        }])
        .await
        .unwrap();
    let e = uploads::accept_chunk(
        &w.store,
        &w.objects,
        &tenant(),
        &u.upload_id,
        (5, 9, 10),
        Bytes::from_static(b"56789"),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, CatalogError::Gone(_)), "{e}");
    let e = uploads::finalize(
        &w.store,
        &w.objects,
        &w.scratch,
        &tenant(),
        &u.upload_id,
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, CatalogError::Gone(_)), "{e}");
    let later = Millis::now().plus(uploads::UPLOAD_LIFETIME + Duration::from_secs(60));
    let c = tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, later, 100)
        .await
        .unwrap();
    assert_eq!(c.uploads, 1);
    assert!(keys(&w.objects, "upload-chunks/").await.is_empty());
    assert!(matches!(
        uploads::get(&w.store, &tenant(), &u.upload_id).await,
        Err(CatalogError::NotFound(_))
    ));
    // Collecting again finds nothing and fails on nothing.
    let c = tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, later, 100)
        .await
        .unwrap();
    assert_eq!(c, Default::default());
}

async fn finalized(w: &World, bytes: &'static [u8]) -> String {
    let n = bytes.len() as u64;
    let (u, _) = uploads::create(&w.store, &tenant(), n, None, None)
        .await
        .unwrap();
    uploads::accept_chunk(
        &w.store,
        &w.objects,
        &tenant(),
        &u.upload_id,
        (0, n - 1, n),
        Bytes::from_static(bytes),
    )
    .await
    .unwrap();
    uploads::finalize(
        &w.store,
        &w.objects,
        &w.scratch,
        &tenant(),
        &u.upload_id,
        None,
    )
    .await
    .unwrap()
    .blob_sha
    .unwrap()
}

#[tokio::test]
async fn blobs_live_a_week_after_their_last_finalize_then_go() {
    let w = world();
    let sha = finalized(&w, b"photo bytes").await;
    let in_a_day = Millis::now().plus(Duration::from_secs(86_400 + 60));
    let c = tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, in_a_day, 100)
        .await
        .unwrap();
    assert_eq!(c.blobs, 0, "{c:?}");
    assert!(
        uploads::read_blob(&w.objects, &tenant(), "blob_sha", &sha, 100)
            .await
            .is_ok()
    );
    let in_eight_days = Millis::now().plus(uploads::BLOB_LIFETIME + Duration::from_secs(86_400));
    let c =
        tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, in_eight_days, 100)
            .await
            .unwrap();
    assert_eq!((c.blobs, c.records), (1, 1), "{c:?}");
    assert!(keys(&w.objects, "blobs/").await.is_empty());
    let e = uploads::read_blob(&w.objects, &tenant(), "blob_sha", &sha, 100)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("upload the file first"), "{e}");
}

#[tokio::test]
async fn a_finalize_during_a_blobs_collection_is_told_to_retry_and_then_keeps_it() {
    let w = world();
    let sha = finalized(&w, b"same bytes").await;
    // A collection has marked the blob (and is about to delete it).
    w.store
        .transact(vec![Write::Set {
            key: ItemKey::new(format!("BLOB#{}#{sha}", tenant()), "BLOB"),
            fields: vec![("state".into(), "collecting".into())],
            condition: Condition::Exists,
        }])
        .await
        .unwrap();
    let (u, _) = uploads::create(&w.store, &tenant(), 10, None, None)
        .await
        .unwrap();
    uploads::accept_chunk(
        &w.store,
        &w.objects,
        &tenant(),
        &u.upload_id,
        (0, 9, 10),
        Bytes::from_static(b"same bytes"),
    )
    .await
    .unwrap();
    let e = uploads::finalize(
        &w.store,
        &w.objects,
        &w.scratch,
        &tenant(),
        &u.upload_id,
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, CatalogError::Unavailable(_)), "{e}");
    // The collection finishes; the retried finalize writes the blob again.
    w.store
        .transact(vec![Write::Delete {
            key: ItemKey::new(format!("BLOB#{}#{sha}", tenant()), "BLOB"),
            condition: Condition::Exists,
        }])
        .await
        .unwrap();
    w.objects
        .delete(&uploads::blob_key(&tenant(), &sha))
        .await
        .unwrap();
    let u = uploads::finalize(
        &w.store,
        &w.objects,
        &w.scratch,
        &tenant(),
        &u.upload_id,
        None,
    )
    .await
    .unwrap();
    assert_eq!(u.blob_sha.as_deref(), Some(sha.as_str()));
    assert_eq!(
        &uploads::read_blob(&w.objects, &tenant(), "blob_sha", &sha, 100)
            .await
            .unwrap()[..],
        b"same bytes"
    );
}

#[tokio::test]
async fn another_tenants_upload_and_malformed_ids_do_not_exist() {
    let w = world();
    let (u, _) = uploads::create(&w.store, &tenant(), 10, None, None)
        .await
        .unwrap();
    let b: TenantId = "tenant-b".parse().unwrap();
    for id in [u.upload_id.as_str(), "..", "x".repeat(2000).as_str(), "a#b"] {
        assert!(
            matches!(
                uploads::get(&w.store, &b, id).await,
                Err(CatalogError::NotFound(_))
            ),
            "{id}"
        );
    }
}

#[tokio::test]
async fn an_item_that_cannot_be_collected_does_not_hold_up_the_rest() {
    let w = world();
    // A damaged record, due first.
    let mut damaged = tessera_core::ports::state_store::Item::new(
        ItemKey::new("BLOB#tenant-a#not-hex", "BLOB"),
        serde_json::json!({"tenant": "tenant-a", "sha": "not-hex", "state": "live"}),
    );
    damaged.by_due = Some(ItemKey::new(
        "DUE#expiry",
        "000000000000001#BLOB#tenant-a#not-hex",
    ));
    w.store
        .transact(vec![Write::Put {
            item: damaged,
            condition: Condition::None,
        }])
        .await
        .unwrap();
    let (u, _) = uploads::create(&w.store, &tenant(), 10, None, None)
        .await
        .unwrap();
    let later = Millis::now().plus(uploads::UPLOAD_LIFETIME + Duration::from_secs(60));
    let c = tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, later, 100)
        .await
        .unwrap();
    assert_eq!((c.uploads, c.failed), (1, 1), "{c:?}");
    assert!(
        uploads::get(&w.store, &tenant(), &u.upload_id)
            .await
            .is_err()
    );
    // The damaged one waits an hour before it is tried again.
    let c = tessera_core::catalog::collect::collect_expired(&w.store, &w.objects, later, 100)
        .await
        .unwrap();
    assert_eq!(c.failed, 0, "{c:?}");
}
