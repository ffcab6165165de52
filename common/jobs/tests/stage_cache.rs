//! The stage cache is per tenant: a stage key recorded by one tenant's job is not found
//! by another tenant (on the real SQLite store), so neither the checkpoint nor the other
//! job's id crosses over.

use tessera_core::ports::StateStore;
use tessera_core::{JobId, TenantId};
use tessera_jobs::reconstruct::Stage;
use tessera_jobs::reconstruct::cache;
use tessera_local::{SqliteStateStore, StateDir};

#[tokio::test]
async fn a_stage_key_recorded_by_one_tenant_is_not_found_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = SqliteStateStore::open(&state.state_db()).unwrap();
    let (a, b): (TenantId, TenantId) = ("tenant-a".parse().unwrap(), "tenant-b".parse().unwrap());
    let job = JobId::new();
    store
        .transact(vec![cache::record(&a, "same-key", job, Stage::Extract)])
        .await
        .unwrap();
    assert_eq!(
        cache::lookup(&store, &a, "same-key").await.unwrap(),
        Some(job)
    );
    assert_eq!(cache::lookup(&store, &b, "same-key").await.unwrap(), None);
}

/// A worker that lost its lease cannot take a snapshot number, and the current one
/// never gets a number already handed out: a sealed snapshot has one writer.
#[tokio::test]
async fn snapshot_numbers_are_fenced_and_never_handed_out_twice() {
    use tessera_core::ports::state_store::{Condition, Item, StoreError, Write};
    use tessera_core::records;
    use tessera_engine::TaskError;
    use tessera_jobs::reconstruct::checkpoint::allocate_snapshot;
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store = SqliteStateStore::open(&state.state_db()).unwrap();
    let job = JobId::new();
    let task = tessera_core::TaskId::new();
    // The task is running at epoch 2: attempt 1's worker was presumed dead.
    store
        .transact(vec![Write::Put {
            item: Item::new(
                records::task_key(task),
                serde_json::json!({"state": "running", "epoch": 2}),
            ),
            condition: Condition::None,
        }])
        .await
        .unwrap();
    // What `TaskContext::commit` does: the fence first.
    let fenced = |epoch: u64| {
        let store = store.clone();
        move |mut writes: Vec<Write>| {
            let store = store.clone();
            async move {
                writes.insert(
                    0,
                    Write::Check {
                        key: records::task_key(task),
                        condition: records::fenced(epoch),
                    },
                );
                match store.transact(writes).await {
                    Ok(()) => Ok(()),
                    Err(StoreError::Conflict { index: 0, .. }) => {
                        Err(TaskError::cancelled("lost the lease"))
                    }
                    Err(e) => Err(e.into()),
                }
            }
        }
    };
    assert_eq!(
        allocate_snapshot(&store, job, 3, fenced(2)).await.unwrap(),
        4
    );
    assert_eq!(
        allocate_snapshot(&store, job, 0, fenced(2)).await.unwrap(),
        5
    );
    let stale = allocate_snapshot(&store, job, 4, fenced(1))
        .await
        .unwrap_err();
    assert_eq!(stale.class, tessera_core::ErrorClass::Cancelled);
    assert_eq!(
        allocate_snapshot(&store, job, 4, fenced(2)).await.unwrap(),
        6
    );
}
