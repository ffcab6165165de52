//! Two admins revoking each other at the same moment must not lock their tenant out.
//!
//! The race is made certain rather than likely: the real SQLite state store is wrapped so
//! that a transaction waits at a barrier until both revocations have read the tenant's
//! keys and reached their write. Each has then seen the other as "another active admin";
//! only the rule checked inside the write can stop the second one.

use async_trait::async_trait;
use std::sync::Arc;
use tessera_core::TenantId;
use tessera_core::catalog::api_keys;
use tessera_core::ports::StateStore;
use tessera_core::ports::state_store::{Item, ItemKey, Page, Query, StoreError, Write};
use tessera_local::SqliteStateStore;
use tokio::sync::Barrier;

/// The real store, with every transaction held until `parties` of them are waiting.
struct TransactsMeet {
    inner: SqliteStateStore,
    barrier: Barrier,
}

#[async_trait]
impl StateStore for TransactsMeet {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        self.inner.get(key).await
    }
    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.barrier.wait().await;
        self.inner.transact(writes).await
    }
    async fn query(&self, query: &Query) -> Result<Page, StoreError> {
        self.inner.query(query).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_revoking_each_other_leave_one_admin() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStateStore::open(&dir.path().join("state.db")).unwrap();
    let tenant: TenantId = "tenant-a".parse().unwrap();
    let (a, _) = api_keys::create(&sqlite, &tenant, true).await.unwrap();
    let (b, _) = api_keys::create(&sqlite, &tenant, true).await.unwrap();
    let store = Arc::new(TransactsMeet {
        inner: sqlite,
        barrier: Barrier::new(2),
    });
    let (x, y) = tokio::join!(
        api_keys::revoke(store.as_ref(), &tenant, &b.key_id),
        api_keys::revoke(store.as_ref(), &tenant, &a.key_id),
    );
    let outcomes = [x.is_ok(), y.is_ok()];
    assert_eq!(
        outcomes.iter().filter(|ok| **ok).count(),
        1,
        "exactly one revocation may succeed: {x:?} {y:?}"
    );
    let refused = if x.is_ok() { y } else { x };
    assert!(
        matches!(
            refused,
            Err(tessera_core::catalog::CatalogError::Conflict(_))
        ),
        "{refused:?}"
    );
    let keys = api_keys::list(&store.inner, &tenant).await.unwrap();
    let active_admins = keys
        .iter()
        .filter(|k| k.admin && k.revoked_at.is_none())
        .count();
    assert_eq!(active_admins, 1, "{keys:?}");
    // Retried alone (no other transaction to meet), the refused one now finds itself
    // the last admin and says so.
    let last = keys
        .iter()
        .find(|k| k.revoked_at.is_none())
        .unwrap()
        .key_id
        .clone();
    let alone = TransactsMeet {
        inner: SqliteStateStore::open(&dir.path().join("state.db")).unwrap(),
        barrier: Barrier::new(1),
    };
    let again = api_keys::revoke(&alone, &tenant, &last).await;
    assert!(
        matches!(&again, Err(tessera_core::catalog::CatalogError::Conflict(m)) if m.contains("last active admin")),
        "{again:?}"
    );
}
