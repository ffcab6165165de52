//! Per-tenant quotas on the real SQLite store: stored image bytes (413 past the quota,
//! the counter following registrations and deletions and erasures) and unfinished
//! reconstructions (429 at the limit, finished ones not counted, other tenants apart),
//! unfinished uploads and the bytes of finalized ones (429 past their quotas).

use bytes::Bytes;
use tessera_core::audit::Actor;
use tessera_core::catalog::CatalogError;
use tessera_core::catalog::datasets::{self, CheckedBytes, NewDataset};
use tessera_core::catalog::quotas::{self, MAX_ACTIVE_RECONSTRUCTIONS, MAX_STORED_BYTES};
use tessera_core::job::{Job, JobCounters};
use tessera_core::ports::StateStore;
use tessera_core::ports::state_store::{Condition, ItemKey, Write};
use tessera_core::{JobId, Millis, ProjectId, TenantId, records};
use tessera_local::{FolderObjectStore, SqliteStateStore, StateDir};

fn tenant() -> TenantId {
    "tenant-a".parse().unwrap()
}

#[tokio::test]
async fn stored_bytes_are_counted_and_a_registration_past_the_quota_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = SqliteStateStore::open(&state.state_db()).unwrap();
    let objects = FolderObjectStore::new(state.objects(), state.tmp()).unwrap();
    let d = datasets::create(
        &store,
        &tenant(),
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
    let bytes = |n: usize| CheckedBytes {
        bytes: Bytes::from(vec![7u8; n]),
        sha: format!("{n:064x}"),
        pixels: datasets::Pixels::Size(10, 10),
        gps: false,
    };
    let a = datasets::register_image(&store, &objects, &d, "a.jpg", bytes(1000), ("upload", None))
        .await
        .unwrap();
    datasets::register_image(&store, &objects, &d, "b.jpg", bytes(500), ("upload", None))
        .await
        .unwrap();
    assert_eq!(quotas::stored_bytes(&store, &tenant()).await.unwrap(), 1500);
    datasets::delete_image(&store, &objects, &a).await.unwrap();
    assert_eq!(quotas::stored_bytes(&store, &tenant()).await.unwrap(), 500);
    // The tenant is 100 bytes from its quota.
    store
        .transact(vec![quotas::add_stored(
            &tenant(),
            (MAX_STORED_BYTES - 100 - 500) as i64,
        )])
        .await
        .unwrap();
    assert_eq!(
        quotas::stored_bytes(&store, &tenant()).await.unwrap(),
        MAX_STORED_BYTES - 100
    );
    let refused =
        datasets::register_image(&store, &objects, &d, "c.jpg", bytes(101), ("upload", None))
            .await
            .unwrap_err();
    assert!(
        matches!(refused, CatalogError::TooLarge(ref m) if m.contains("quota")),
        "{refused}"
    );
    assert!(
        datasets::image_named(&store, &d, "c.jpg").await.is_err(),
        "a refused image leaves nothing"
    );
    datasets::register_image(&store, &objects, &d, "c.jpg", bytes(100), ("upload", None))
        .await
        .unwrap();
    // Erasing the dataset gives its bytes back.
    datasets::erase(&store, &objects, &d, &Actor::cli(tenant()))
        .await
        .unwrap();
    assert_eq!(
        quotas::stored_bytes(&store, &tenant()).await.unwrap(),
        MAX_STORED_BYTES - 100 - 500
    );
}

fn job(tenant: &TenantId, finished: bool) -> Job {
    Job {
        id: JobId::new(),
        tenant: tenant.clone(),
        project: None,
        kind: "reconstruct".into(),
        label: "j".into(),
        spec: serde_json::json!({}),
        fingerprint: "f".into(),
        priority: 0,
        tasks_total: 3,
        sealed: true,
        counters: JobCounters {
            succeeded: if finished { 3 } else { 1 },
            ..Default::default()
        },
        cancel: None,
        created_at: Millis::now(),
        rev: 0,
    }
}

/// What the pipeline route does: take a slot, submit the job, record it in the slot.
async fn submitted(store: &SqliteStateStore, j: &Job) {
    let slot = quotas::reserve_reconstruction(store, &j.tenant)
        .await
        .unwrap();
    store
        .transact(vec![
            Write::Put {
                item: records::job_item(j),
                condition: Condition::Absent,
            },
            slot.commit(j.id),
        ])
        .await
        .unwrap();
}

/// Whether the tenant may submit one more now (the slot taken to find out is given back).
async fn room(store: &SqliteStateStore, tenant: &TenantId) -> Result<(), CatalogError> {
    let slot = quotas::reserve_reconstruction(store, tenant).await?;
    store.transact(vec![slot.release()]).await.unwrap();
    Ok(())
}

#[tokio::test]
async fn unfinished_reconstructions_are_limited_per_tenant_whatever_else_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = SqliteStateStore::open(&state.state_db()).unwrap();
    let b: TenantId = "tenant-b".parse().unwrap();
    let mut last = None;
    for _ in 0..MAX_ACTIVE_RECONSTRUCTIONS - 1 {
        let j = job(&tenant(), false);
        submitted(&store, &j).await;
        last = Some(j);
    }
    submitted(&store, &job(&tenant(), true)).await;
    submitted(&store, &job(&b, false)).await;
    // A thousand other jobs of the tenant (photo ingests) hide nothing.
    for _ in 0..1000 {
        let mut other = job(&tenant(), false);
        other.kind = "photo_ingest".into();
        store
            .transact(vec![Write::Put {
                item: records::job_item(&other),
                condition: Condition::Absent,
            }])
            .await
            .unwrap();
    }
    room(&store, &tenant()).await.unwrap();
    submitted(&store, &job(&tenant(), false)).await;
    let e = room(&store, &tenant()).await.unwrap_err();
    assert!(matches!(e, CatalogError::Quota(_)), "{e}");
    room(&store, &b).await.unwrap();
    // One finishes: there is room again.
    let mut done = last.unwrap();
    done.counters.succeeded = 3;
    store
        .transact(vec![Write::Put {
            item: records::job_item(&done),
            condition: Condition::None,
        }])
        .await
        .unwrap();
    room(&store, &tenant()).await.unwrap();
}

/// Submissions racing for a tenant's last places: each place is taken by a conditional
/// write, so no more than the quota pass, however many arrive at once (a count read and
/// then a record written let every one of them pass). A reservation whose submission
/// died holds its place only until it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_submissions_never_pass_the_reconstruction_quota() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = std::sync::Arc::new(SqliteStateStore::open(&state.state_db()).unwrap());
    // Five running already; forty arrive at once for the other fifteen places.
    for _ in 0..5 {
        submitted(&store, &job(&tenant(), false)).await;
    }
    let racers: Vec<_> = (0..40)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let j = job(&tenant(), false);
                match quotas::reserve_reconstruction(store.as_ref(), &tenant()).await {
                    Ok(slot) => {
                        store
                            .transact(vec![
                                Write::Put {
                                    item: records::job_item(&j),
                                    condition: Condition::Absent,
                                },
                                slot.commit(j.id),
                            ])
                            .await
                            .unwrap();
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            })
        })
        .collect();
    let mut passed = 0;
    for r in racers {
        match r.await.unwrap() {
            Ok(()) => passed += 1,
            Err(CatalogError::Quota(_) | CatalogError::Unavailable(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(passed, MAX_ACTIVE_RECONSTRUCTIONS - 5);
    assert!(matches!(
        room(&store, &tenant()).await,
        Err(CatalogError::Quota(_))
    ));

    // A reservation whose process died before its job was recorded: the place comes
    // back once the reservation expires, not before.
    let other: TenantId = "tenant-c".parse().unwrap();
    let mut kept = Vec::new();
    for _ in 0..MAX_ACTIVE_RECONSTRUCTIONS {
        kept.push(
            quotas::reserve_reconstruction(store.as_ref(), &other)
                .await
                .unwrap(),
        );
    }
    assert!(matches!(
        room(&store, &other).await,
        Err(CatalogError::Quota(_))
    ));
    let stale = Write::Put {
        item: tessera_core::ports::state_store::Item::new(
            ItemKey::new(format!("TENANT#{other}#RECONS"), "SLOT#07"),
            serde_json::json!({
                "token": "died",
                "reserved_at": Millis::now().0 - quotas::RESERVATION_TTL_MS - 1,
            }),
        ),
        condition: Condition::None,
    };
    store.transact(vec![stale]).await.unwrap();
    room(&store, &other).await.unwrap();

    // A job submitted again (the API finds it by its fingerprint) is recorded again, in
    // case its first record was lost, and still holds one place.
    let again: TenantId = "tenant-d".parse().unwrap();
    let j = job(&again, false);
    submitted(&store, &j).await;
    let slot = quotas::reserve_reconstruction(store.as_ref(), &again)
        .await
        .unwrap();
    store.transact(vec![slot.commit(j.id)]).await.unwrap();
    for _ in 0..MAX_ACTIVE_RECONSTRUCTIONS - 1 {
        submitted(&store, &job(&again, false)).await;
    }
    assert!(matches!(
        room(&store, &again).await,
        Err(CatalogError::Quota(_))
    ));
}

#[tokio::test]
async fn unfinished_uploads_and_blob_bytes_are_counted_and_refused_past_their_quotas() {
    use tessera_core::catalog::uploads;
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = SqliteStateStore::open(&state.state_db()).unwrap();
    let objects = FolderObjectStore::new(state.objects(), state.tmp()).unwrap();
    let t = tenant();
    let open = || quotas::counter(&store, &t, quotas::counters::OPEN_UPLOADS);
    let blob = || quotas::counter(&store, &t, quotas::counters::BLOB_BYTES);

    // One upload opened, received and finalized: open while unfinished, then a blob.
    let (u, _) = uploads::create(&store, &tenant(), 10, None, None)
        .await
        .unwrap();
    assert_eq!(open().await.unwrap(), 1);
    uploads::accept_chunk(
        &store,
        &objects,
        &tenant(),
        &u.upload_id,
        (0, 9, 10),
        Bytes::from_static(b"0123456789"),
    )
    .await
    .unwrap();
    let done = uploads::finalize(&store, &objects, dir.path(), &tenant(), &u.upload_id, None)
        .await
        .unwrap();
    assert_eq!((open().await.unwrap(), blob().await.unwrap()), (0, 10));
    // Erasing the blob gives its bytes back, once.
    let sha = done.blob_sha.unwrap();
    uploads::erase_blob(&store, &objects, &tenant(), &sha)
        .await
        .unwrap();
    uploads::erase_blob(&store, &objects, &tenant(), &sha)
        .await
        .unwrap();
    assert_eq!(blob().await.unwrap(), 0);

    // At the limit of unfinished uploads, no more are opened (429).
    store
        .transact(vec![quotas::add(
            &tenant(),
            quotas::counters::OPEN_UPLOADS,
            quotas::MAX_OPEN_UPLOADS as i64,
        )])
        .await
        .unwrap();
    let e = uploads::create(&store, &tenant(), 10, None, None)
        .await
        .unwrap_err();
    assert!(matches!(e, CatalogError::Quota(_)), "{e}");
    store
        .transact(vec![quotas::add(
            &tenant(),
            quotas::counters::OPEN_UPLOADS,
            -(quotas::MAX_OPEN_UPLOADS as i64),
        )])
        .await
        .unwrap();

    // Five bytes short of the blob quota: a ten-byte upload cannot be finalized, and
    // stays open (nothing half-stored).
    store
        .transact(vec![quotas::add(
            &tenant(),
            quotas::counters::BLOB_BYTES,
            quotas::MAX_BLOB_BYTES as i64 - 5,
        )])
        .await
        .unwrap();
    let (u, _) = uploads::create(&store, &tenant(), 10, None, None)
        .await
        .unwrap();
    uploads::accept_chunk(
        &store,
        &objects,
        &tenant(),
        &u.upload_id,
        (0, 9, 10),
        Bytes::from_static(b"abcdefghij"),
    )
    .await
    .unwrap();
    let e = uploads::finalize(&store, &objects, dir.path(), &tenant(), &u.upload_id, None)
        .await
        .unwrap_err();
    assert!(matches!(e, CatalogError::Quota(_)), "{e}");
    assert_eq!(open().await.unwrap(), 1, "still open, still counted");
}

#[tokio::test]
async fn photo_admissions_are_spread_over_count_shards_and_summed() {
    // One usage record took every admission of a burst: the load rehearsal's hottest
    // table partition (infra/rehearsal/load.py). Counter writes go to shards; the count
    // is the record's and all of theirs, and the limit holds on the sum.
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = SqliteStateStore::open(&state.state_db()).unwrap();
    for _ in 0..48 {
        quotas::admit_photo(&store, &tenant()).await.unwrap();
    }
    let t = tenant();
    let count = || quotas::counter(&store, &t, quotas::counters::PHOTOS);
    assert_eq!(count().await.unwrap(), 48);
    let mut shards = 0;
    for s in 0..quotas::USAGE_SHARDS {
        let key = ItemKey::new(format!("TENANT#{}#USAGE#{s:02}", tenant()), "USAGE");
        let item = store.get(&key).await.unwrap().expect("every shard exists");
        if item.body["photos"].as_i64().unwrap_or(0) > 0 {
            shards += 1;
        }
    }
    assert!(shards >= 4, "48 admissions in {shards} shards");
    // The usage record itself took none of them.
    let record = store
        .get(&ItemKey::new(format!("TENANT#{}", tenant()), "USAGE"))
        .await
        .unwrap()
        .unwrap();
    assert!(record.body["photos"].is_null(), "{}", record.body);
    // A release (an erasure) subtracts too.
    store
        .transact(vec![quotas::add(&tenant(), quotas::counters::PHOTOS, -1)])
        .await
        .unwrap();
    assert_eq!(count().await.unwrap(), 47);
    // At the limit, counted over the shards, the next admission is refused.
    store
        .transact(vec![quotas::add(
            &tenant(),
            quotas::counters::PHOTOS,
            quotas::MAX_PHOTOS as i64 - 47,
        )])
        .await
        .unwrap();
    let e = quotas::admit_photo(&store, &tenant()).await.unwrap_err();
    assert!(matches!(e, CatalogError::Quota(_)), "{e}");
    assert_eq!(count().await.unwrap(), quotas::MAX_PHOTOS);
}
