//! A reaper pass ends inside its time budget however much is due, and the passes after it
//! finish the work (issue 23: in a 1,000-photo load run, 31 of 66 reaper invocations ran
//! past the function's 60 s timeout while a backlog of queued tasks was due for a re-offer).
//!
//! The fault is injected into the real SQLite store: every write takes 60 ms, as writes
//! to a throttled or distant table do. Reads are not slowed.

mod support;

use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{Harness, plan};
use tessera_core::Millis;
use tessera_core::ports::StateStore;
use tessera_core::ports::state_store::{Item, ItemKey, Page, Query, StoreError, Write};
use tessera_engine::reaper::ReapBudget;
use tessera_engine::{Engine, Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan};
use tessera_local::SqliteStateStore;

const WRITE_TAKES: Duration = Duration::from_millis(60);

/// The real store, each transaction slowed by [`WRITE_TAKES`].
struct SlowWrites(SqliteStateStore);

#[async_trait]
impl StateStore for SlowWrites {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        self.0.get(key).await
    }
    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        tokio::time::sleep(WRITE_TAKES).await;
        self.0.transact(writes).await
    }
    async fn query(&self, query: &Query) -> Result<Page, StoreError> {
        self.0.query(query).await
    }
}

struct Never;

#[async_trait]
impl TaskHandler for Never {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Err(TaskError::permanent("never claimed in this test"))
    }
}

/// An engine on the real store with slow writes, whose tasks nothing claims.
async fn slow_engine(h: &Harness) -> Engine {
    let store = Arc::new(SlowWrites(
        SqliteStateStore::open(&h.state.state_db()).unwrap(),
    ));
    let mut registry = Registry::new();
    registry.register("never", Never);
    h.engine_on(registry, Duration::from_secs(30), None, store)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_stops_at_its_budget_and_the_next_passes_finish_the_work() {
    let h = Harness::new();
    let engine = slow_engine(&h).await;
    const TASKS: usize = 40;
    let tasks = (0..TASKS)
        .map(|i| TaskPlan::new(format!("t{i}"), "never", json!(null)))
        .collect();
    engine.submit(plan("backlog", tasks)).await.unwrap();
    // Every task waits past the re-offer grace (500 ms in the harness): a backlog whose
    // messages the reaper must offer again, one write each.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let now = Millis::now();

    // Unbounded, this pass would take TASKS × 60 ms = 2.4 s of writes alone. Its budget
    // lets the queued kind start work for 0.75 × 1 s.
    let budget = ReapBudget::within(200, Duration::from_secs(1));
    let first = engine.reap(now, budget).await.unwrap();
    assert!(first.cut_short, "{first:?}");
    assert!(
        first.reoffered < TASKS,
        "one pass re-offered the whole backlog past its budget: {first:?}"
    );
    let mut reoffered = first.reoffered;
    let mut passes = 1;
    while reoffered < TASKS {
        passes += 1;
        assert!(
            passes <= 4 * TASKS,
            "passes stopped making progress: {reoffered} of {TASKS} re-offered"
        );
        let r = engine
            .reap(now, ReapBudget::within(200, Duration::from_secs(1)))
            .await
            .unwrap();
        reoffered += r.reoffered;
    }
    // Each task was offered once: a re-offered task is due again only after a longer
    // wait, so a later pass at the same moment finds nothing left.
    assert_eq!(reoffered, TASKS);
    let after = engine.reap_once(now, 200).await.unwrap();
    assert_eq!((after.reoffered, after.cut_short), (0, false), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_with_time_left_is_not_cut_short() {
    let h = Harness::new();
    let engine = slow_engine(&h).await;
    engine
        .submit(plan(
            "two",
            vec![
                TaskPlan::new("a", "never", json!(null)),
                TaskPlan::new("b", "never", json!(null)),
            ],
        ))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let r = engine
        .reap(
            Millis::now(),
            ReapBudget::within(200, Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!((r.reoffered, r.cut_short), (2, false), "{r:?}");
}

/// A pass that starts with no time left (a slow store, an earlier kind's last item past
/// this one's share, a runtime that gives no deadline) still acts on one entry of each
/// kind, so passes that all start late make progress instead of none for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_with_no_time_left_still_acts_on_one_entry() {
    let h = Harness::new();
    let engine = slow_engine(&h).await;
    let tasks = (0..5)
        .map(|i| TaskPlan::new(format!("t{i}"), "never", json!(null)))
        .collect();
    engine.submit(plan("late", tasks)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let now = Millis::now();
    let mut reoffered = 0;
    for pass in 1..=5 {
        let r = engine
            .reap(now, ReapBudget::within(200, Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(r.reoffered, 1, "pass {pass}: {r:?}");
        assert!(r.cut_short || pass == 5, "pass {pass}: {r:?}");
        reoffered += r.reoffered;
    }
    assert_eq!(reoffered, 5);
}
