//! The reason a task ended reaches its job's event stream on every path that ends it:
//! the error event is written in the terminal commit itself, not appended after it.
//!
//! The fault is injected into the real SQLite store: every transaction that stores an
//! event on its own (an append, which is what a process does after a commit) fails as
//! unavailable. A reason that depends on such an append is then lost; one written with
//! the terminal commit is not.

mod support;

use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{Harness, plan};
use tessera_core::Millis;
use tessera_core::event::EventKind;
use tessera_core::ports::StateStore;
use tessera_core::ports::state_store::{Item, ItemKey, Page, Query, StoreError, Write};
use tessera_core::task::TaskState;
use tessera_engine::dispatch::{Claim, Handled};
use tessera_engine::{Engine, Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan};
use tessera_local::SqliteStateStore;

/// The real store, refusing stand-alone event appends.
struct AppendsFail(SqliteStateStore);

fn stores_an_event_alone(writes: &[Write]) -> bool {
    matches!(writes.first(), Some(Write::Put { item, .. }) if item.key.pk.starts_with("EVENTS#"))
}

#[async_trait]
impl StateStore for AppendsFail {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        self.0.get(key).await
    }
    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        if stores_an_event_alone(&writes) {
            return Err(StoreError::Unavailable(
                "injected: event appends fail".into(),
            ));
        }
        self.0.transact(writes).await
    }
    async fn query(&self, query: &Query) -> Result<Page, StoreError> {
        self.0.query(query).await
    }
}

/// Fails for good, storing no event of its own.
struct Refuses;

#[async_trait]
impl TaskHandler for Refuses {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Err(TaskError::permanent("the input is unusable"))
    }
}

async fn engine(h: &Harness, lease: Duration) -> Engine {
    let store = Arc::new(AppendsFail(
        SqliteStateStore::open(&h.state.state_db()).unwrap(),
    ));
    let mut registry = Registry::new();
    registry.register("refuses", Refuses);
    h.engine_on(registry, lease, None, store).await
}

async fn error_events(engine: &Engine, job: tessera_core::JobId) -> Vec<String> {
    engine
        .ports()
        .events
        .read_after(job, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Error { message, .. } => Some(message),
            _ => None,
        })
        .collect()
}

/// A lease that lapses on the last attempt ends the task through the reaper, with no
/// worker left to say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lapsing_on_the_last_attempt_leaves_its_reason_in_the_stream() {
    let h = Harness::new();
    let engine = engine(&h, Duration::from_millis(100)).await;
    let mut once = TaskPlan::new("once", "refuses", json!(null));
    once.max_attempts = Some(1);
    let job = engine.submit(plan("lapse", vec![once])).await.unwrap();
    let task = engine.job_tasks(job.job_id).await.unwrap().remove(0);
    assert!(matches!(
        engine.claim(task).await.unwrap(),
        Claim::Claimed(_)
    ));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = engine.reap_once(Millis::now(), 100).await.unwrap();
    assert_eq!(r.dead, 1, "{r:?}");
    let errors = error_events(&engine, job.job_id).await;
    assert!(
        errors
            .iter()
            .any(|m| m.contains("`once` is dead") && m.contains("presumed dead")),
        "the stream must say why the task died: {errors:?}"
    );
    assert_eq!(engine.job(job.job_id).await.unwrap().counters.dead, 1);
}

/// A handler's permanent failure: the reason and the end are one write, so they are
/// stored together or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_stores_its_reason_with_its_end() {
    let h = Harness::new();
    let engine = engine(&h, Duration::from_secs(5)).await;
    let job = engine
        .submit(plan(
            "refused",
            vec![TaskPlan::new("one", "refuses", json!(null))],
        ))
        .await
        .unwrap();
    let task = engine.job_tasks(job.job_id).await.unwrap().remove(0);
    let Claim::Claimed(claimed) = engine.claim(task).await.unwrap() else {
        panic!("the task is due");
    };
    let handled = engine.execute(claimed).await.unwrap();
    assert!(
        matches!(handled, Handled::Ran(TaskState::Failed)),
        "{handled:?}"
    );
    let errors = error_events(&engine, job.job_id).await;
    assert!(
        errors.iter().any(|m| m.contains("the input is unusable")),
        "{errors:?}"
    );
}
