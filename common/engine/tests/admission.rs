//! Heavy tasks wait for the memory gate a bounded time: one that cannot be admitted in
//! time gives its worker slot back, light work behind it runs, and it is offered again
//! until it fits. Two heavy tasks that do not fit together run one after the other.

mod support;

use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Harness, plan};
use tessera_core::task::ResourceClass;
use tessera_engine::{Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan, Worker};
use tessera_local::{FixedMemory, MemoryGate};
use tokio_util::sync::CancellationToken;

const GIB: u64 = 1 << 30;

/// Sleeps, recording when it ran, by job label.
struct Timed {
    runs: Arc<Mutex<Vec<(String, Instant, Instant)>>>,
    hold: Duration,
}

#[async_trait]
impl TaskHandler for Timed {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let start = Instant::now();
        tokio::time::sleep(self.hold).await;
        self.runs
            .lock()
            .unwrap()
            .push((ctx.job().label.clone(), start, Instant::now()));
        Ok(TaskOutput::result(json!(null)))
    }
}

fn heavy(label: &str) -> tessera_engine::JobPlan {
    let mut t = TaskPlan::new("heavy", "heavy", json!(null));
    t.resource_class = ResourceClass::Large;
    t.memory_estimate = Some(3 * GIB);
    plan(label, vec![t])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_not_admitted_in_time_gives_its_slot_back_and_runs_later() {
    let h = Harness::new();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::new();
    registry.register(
        "heavy",
        Timed {
            runs: runs.clone(),
            hold: Duration::from_millis(1500),
        },
    );
    registry.register(
        "light",
        Timed {
            runs: runs.clone(),
            hold: Duration::from_millis(10),
        },
    );
    // A 4-GiB budget: two 3-GiB stages cannot run together.
    let gate = MemoryGate::new(FixedMemory(4 * GIB), 4 * GIB, 0, 4);
    let engine = h
        .engine_gated(registry, Duration::from_secs(5), gate, |c| {
            c.admission_wait = Duration::from_millis(300);
        })
        .await;
    engine.submit(heavy("first")).await.unwrap();
    engine.submit(heavy("second")).await.unwrap();
    engine
        .submit(plan(
            "light",
            vec![TaskPlan::new("light", "light", json!(null))],
        ))
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let worker = Worker::new(engine.clone(), 2, Some(Duration::from_millis(200)));
    let s = stop.clone();
    let handle = tokio::spawn(async move { worker.run(s).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs.lock().unwrap().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    handle.await.unwrap();

    let runs = runs.lock().unwrap().clone();
    let find = |l: &str| {
        runs.iter()
            .find(|r| r.0 == l)
            .unwrap_or_else(|| panic!("{l} never ran: {runs:?}"))
            .clone()
    };
    let (first, second, light) = (find("first"), find("second"), find("light"));
    let (early, late) = if first.1 <= second.1 {
        (first, second)
    } else {
        (second, first)
    };
    assert!(
        late.1 >= early.2,
        "two 3-GiB stages overlapped under a 4-GiB budget: {early:?} {late:?}"
    );
    assert!(
        light.2 <= late.1,
        "the light task waited behind the heavy one that could not start: {runs:?}"
    );
}

#[tokio::test]
async fn the_largest_class_asks_at_most_the_whole_machine() {
    use tessera_core::ports::compute::{Compute, ResourceDemand};
    let gate = MemoryGate::new(FixedMemory(4 * GIB), 4 * GIB, 0, 4);
    let compute = tessera_local::LocalCompute::new(gate.clone());
    let demand = ResourceDemand {
        class: ResourceClass::Xlarge,
        memory_bytes: ResourceClass::Xlarge.memory_bytes(),
    };
    let permit = compute
        .admit(demand, &CancellationToken::new())
        .await
        .expect("a 60-GB class on a 4-GiB machine waits for the machine, not refused");
    assert_eq!(gate.admitted(), 4 * GIB);
    drop(permit);
    assert_eq!(gate.admitted(), 0);
}

/// Two processes on one state directory (each an engine with its own connections, gate
/// and worker) and a 4-GiB budget shared through the directory's memory ledger: two
/// 3-GiB stages run one after the other, not together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_share_one_memory_budget() {
    let h = Harness::new();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let ledger_path = h.state.memory_db();
    let mut engines = Vec::new();
    for owner in ["process-1", "process-2"] {
        let gate = MemoryGate::new(FixedMemory(8 * GIB), 4 * GIB, 0, 4);
        gate.share_through(
            tessera_local::MemoryLedger::open(&ledger_path, owner, Duration::from_secs(5)).unwrap(),
        );
        let mut registry = Registry::new();
        registry.register(
            "heavy",
            Timed {
                runs: runs.clone(),
                hold: Duration::from_millis(1000),
            },
        );
        engines.push(
            h.engine_gated(registry, Duration::from_secs(5), gate, |_| {})
                .await,
        );
    }
    engines[0].submit(heavy("one")).await.unwrap();
    engines[1].submit(heavy("two")).await.unwrap();
    let stop = CancellationToken::new();
    let mut handles = Vec::new();
    for e in &engines {
        let worker = Worker::new(e.clone(), 1, None);
        let s = stop.clone();
        handles.push(tokio::spawn(async move { worker.run(s).await }));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs.lock().unwrap().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    for h in handles {
        h.await.unwrap();
    }
    let mut runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 2, "both stages ran: {runs:?}");
    runs.sort_by_key(|r| r.1);
    assert!(
        runs[1].1 >= runs[0].2,
        "two 3-GiB stages of two processes overlapped under a 4-GiB budget: {runs:?}"
    );
}
