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
