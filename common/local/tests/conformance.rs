//! The port conformance suite against the embedded adapters.

use std::sync::Arc;
use tessera_core::ports::event_log::StoreEventLog;
use tessera_core::ports::state_store::StateStore;
use tessera_local::{FolderObjectStore, SqliteQueue, SqliteStateStore, StateDir};

fn dir() -> (tempfile::TempDir, StateDir) {
    let t = tempfile::tempdir().unwrap();
    let d = StateDir::open(t.path()).unwrap();
    (t, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_state_store_conforms() {
    let (_t, d) = dir();
    tessera_conformance::state_store(Arc::new(SqliteStateStore::open(&d.state_db()).unwrap()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_state_store_conforms_across_connections() {
    // Two connections to one file behave like two processes sharing a state directory.
    let (_t, d) = dir();
    let a = SqliteStateStore::open(&d.state_db()).unwrap();
    tessera_conformance::state_store(Arc::new(a)).await;
    let b = SqliteStateStore::open(&d.state_db()).unwrap();
    tessera_conformance::state_store(Arc::new(b)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_queue_conforms() {
    let (_t, d) = dir();
    tessera_conformance::queue(Arc::new(SqliteQueue::open(&d.queue_db()).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn folder_object_store_conforms() {
    let (_t, d) = dir();
    tessera_conformance::object_store(Arc::new(
        FolderObjectStore::new(d.objects(), d.tmp()).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_event_log_on_sqlite_conforms() {
    let (_t, d) = dir();
    let store: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&d.state_db()).unwrap());
    tessera_conformance::event_log(Arc::new(StoreEventLog::new(store.clone())), store).await;
}
