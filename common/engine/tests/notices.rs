//! Notices are raised once per happening and survive a worker that dies between a
//! task's terminal commit and the raise: the task keeps `notify_pending` and stays in
//! the `advance` due index, and the reaper raises them.
//!
//! The fault is injected into the real SQLite store: every transaction that records a
//! webhook delivery fails as unavailable while it is on.

mod support;

use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{Harness, plan, run_until_done};
use tessera_core::catalog::webhooks::{self, NewWebhook};
use tessera_core::ports::StateStore;
use tessera_core::ports::state_store::{Item, ItemKey, Page, Query, StoreError, Write};
use tessera_core::task::TaskState;
use tessera_core::{Millis, TenantId};
use tessera_engine::{Engine, Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan};
use tessera_local::SqliteStateStore;

/// The real store; while `fail` is set, a transaction recording a delivery fails.
struct RaisesFail {
    inner: SqliteStateStore,
    fail: AtomicBool,
}

#[async_trait]
impl StateStore for RaisesFail {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        self.inner.get(key).await
    }
    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        let records_delivery = writes.iter().any(|w| w.key().pk.starts_with("WEBHOOK#"));
        if records_delivery && self.fail.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("injected: the raise dies".into()));
        }
        self.inner.transact(writes).await
    }
    async fn query(&self, query: &Query) -> Result<Page, StoreError> {
        self.inner.query(query).await
    }
}

struct Succeeds;

#[async_trait]
impl TaskHandler for Succeeds {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Ok(TaskOutput::result(json!("done")))
    }
}

struct Refuses;

#[async_trait]
impl TaskHandler for Refuses {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Err(TaskError::permanent("the input is unusable"))
    }
}

async fn engine(h: &Harness, store: Arc<RaisesFail>) -> Engine {
    let mut r = Registry::new();
    r.register("ok", Succeeds).register("bad", Refuses);
    h.engine_on(r, Duration::from_millis(300), None, store)
        .await
}

async fn deliveries(store: &dyn StateStore, hook: tessera_core::WebhookId) -> Vec<String> {
    let (list, _) = webhooks::deliveries(store, &TenantId::local(), hook, None, 100)
        .await
        .unwrap();
    list.iter().map(|d| format!("{}", d.kind)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raise_lost_with_its_worker_is_made_by_the_reaper_and_only_once() {
    let h = Harness::new();
    let store = Arc::new(RaisesFail {
        inner: SqliteStateStore::open(&h.state.state_db()).unwrap(),
        fail: AtomicBool::new(true),
    });
    let e = engine(&h, store.clone()).await;
    let operator = tessera_core::audit::Actor::cli(TenantId::local());
    let hook = webhooks::create(
        store.as_ref(),
        &operator,
        NewWebhook {
            project: None,
            url: "https://example.com/hook".into(),
            events: Vec::new(),
        },
        false,
    )
    .await
    .unwrap();

    // Two tasks, the sink last: only the sink's end may end the job.
    let ok = e
        .submit(plan(
            "two steps",
            vec![
                TaskPlan::new("first", "ok", json!(null)),
                TaskPlan::new("last", "ok", json!(null)).after(["first"]),
            ],
        ))
        .await
        .unwrap();
    // Two tasks that both fail: one job, one `job.failed`.
    let bad = e
        .submit(plan(
            "both fail",
            vec![
                TaskPlan::new("a", "bad", json!(null)),
                TaskPlan::new("b", "bad", json!(null)),
            ],
        ))
        .await
        .unwrap();
    run_until_done(&e, ok.job_id, Duration::from_secs(30)).await;
    run_until_done(&e, bad.job_id, Duration::from_secs(30)).await;

    // The raises died: nothing delivered, and the tasks still say so.
    assert!(deliveries(store.as_ref(), hook.id).await.is_empty());
    let tasks = e.job_tasks(ok.job_id).await.unwrap();
    let flagged = |ts: &[tessera_core::task::Task], name: &str| {
        ts.iter().find(|t| t.name == name).unwrap().notify_pending
    };
    assert!(
        !flagged(&tasks, "first"),
        "a task with a dependent cannot end its job"
    );
    assert!(flagged(&tasks, "last"));
    let bad_tasks = e.job_tasks(bad.job_id).await.unwrap();
    assert!(
        bad_tasks
            .iter()
            .all(|t| t.state == TaskState::Failed && t.notify_pending)
    );

    // The reaper raises them once the store takes writes again.
    store.fail.store(false, Ordering::SeqCst);
    let later = Millis(Millis::now().0 + 60_000);
    e.reap_once(later, 100).await.unwrap();
    let mut kinds = deliveries(store.as_ref(), hook.id).await;
    kinds.sort();
    assert_eq!(kinds, vec!["job.failed", "job.succeeded"]);
    for t in e
        .job_tasks(ok.job_id)
        .await
        .unwrap()
        .iter()
        .chain(&e.job_tasks(bad.job_id).await.unwrap())
    {
        assert!(!t.notify_pending, "{} still pending", t.name);
    }
    // Another pass changes nothing.
    e.reap_once(Millis(later.0 + 60_000), 100).await.unwrap();
    assert_eq!(deliveries(store.as_ref(), hook.id).await.len(), 2);

    // A resumed job that fails again has failed anew: a second `job.failed`.
    e.resume(bad.job_id).await.unwrap();
    run_until_done(&e, bad.job_id, Duration::from_secs(30)).await;
    let mut kinds = deliveries(store.as_ref(), hook.id).await;
    kinds.sort();
    assert_eq!(kinds, vec!["job.failed", "job.failed", "job.succeeded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_without_webhooks_pays_no_write_for_notices() {
    let h = Harness::new();
    let store = Arc::new(RaisesFail {
        inner: SqliteStateStore::open(&h.state.state_db()).unwrap(),
        fail: AtomicBool::new(false),
    });
    let e = engine(&h, store).await;
    let job = e
        .submit(plan(
            "alone",
            vec![TaskPlan::new("only", "ok", json!(null))],
        ))
        .await
        .unwrap();
    run_until_done(&e, job.job_id, Duration::from_secs(30)).await;
    let t = &e.job_tasks(job.job_id).await.unwrap()[0];
    assert_eq!(t.state, TaskState::Succeeded);
    assert!(!t.notify_pending);
    assert_eq!(
        t.due_at(),
        None,
        "an ended task with nothing to do is not due"
    );
}
