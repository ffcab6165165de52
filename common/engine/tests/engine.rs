//! The engine end to end on the embedded adapters: DAG order, retries by class,
//! ceilings with compensation, fencing, heartbeats, cancel, cache, fan-out, reaper.

mod support;

use async_trait::async_trait;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::{Harness, plan, run_until_done};
use tessera_core::event::{EventKind, Phase};
use tessera_core::job::{CancelMode, JobStatus};
use tessera_core::ports::compute::ProcessSpec;
use tessera_core::ports::state_store::{Condition, Item, ItemKey, Write};
use tessera_core::task::{ResourceClass, Task, TaskState};
use tessera_core::{ErrorClass, Millis};
use tessera_engine::dispatch::{Claim, Handled};
use tessera_engine::{Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan};

const LEASE: Duration = Duration::from_millis(900);
const WAIT: Duration = Duration::from_secs(30);

/// Appends its name to the results of its dependencies.
struct Concat;

#[async_trait]
impl TaskHandler for Concat {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let started = ctx.phase_started(Phase::Checksum).await?;
        let mut parts: Vec<String> = ctx
            .upstream_results()
            .await?
            .into_iter()
            .map(|(_, v)| v.as_str().unwrap_or_default().to_string())
            .collect();
        parts.sort();
        parts.push(ctx.task().name.clone());
        ctx.phase_completed(Phase::Checksum, started).await?;
        Ok(TaskOutput::result(json!(parts.join("+"))))
    }
}

/// Fails with `class` the first `times` attempts, then succeeds; counts runs.
struct Flaky {
    class: ErrorClass,
    times: u32,
    runs: Arc<AtomicU32>,
}

#[async_trait]
impl TaskHandler for Flaky {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= self.times {
            return Err(TaskError {
                class: self.class,
                message: format!("planned failure {n}"),
                moved_on: false,
            });
        }
        Ok(TaskOutput::result(
            json!({ "class": ctx.task().resource_class }),
        ))
    }

    fn compensate(&self, task: &Task) -> Vec<Write> {
        vec![Write::Put {
            item: Item::new(
                ItemKey::new(format!("UNPUBLISHED#{}", task.id), "X"),
                json!({ "why": "dead" }),
            ),
            condition: Condition::None,
        }]
    }
}

/// Sleeps in small steps, checking for cancel at each step.
struct Sleeper {
    ms: u64,
}

#[async_trait]
impl TaskHandler for Sleeper {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let steps = self.ms / 50;
        for _ in 0..steps {
            ctx.checkpoint().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(TaskOutput::result(json!("slept")))
    }
}

/// Runs `sleep 30` as a subprocess and records its pid.
struct Subprocess {
    pid: Arc<AtomicU32>,
}

#[async_trait]
impl TaskHandler for Subprocess {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let pid = self.pid.clone();
        let spec = ProcessSpec::new("sh", ["-c", "echo $$; exec sleep 30"]);
        let report = ctx
            .run_process(spec, &move |_, line: &str| {
                if let Ok(p) = line.trim().parse() {
                    pid.store(p, Ordering::SeqCst);
                }
            })
            .await?;
        if report.success() {
            Ok(TaskOutput::result(json!("done")))
        } else {
            Err(TaskError::cancelled("killed"))
        }
    }
}

/// Defers its events; fails its first run (transient) after two of them. Records how
/// many of the job's events were stored at the middle of each run.
struct Deferring {
    runs: Arc<AtomicU32>,
    stored_mid_run: Arc<std::sync::Mutex<Vec<usize>>>,
}

#[async_trait]
impl TaskHandler for Deferring {
    fn defers_events(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let started = ctx.phase_started(Phase::Checksum).await?;
        ctx.metric("run", f64::from(n), None).await?;
        let stored = ctx
            .ports()
            .events
            .read_after(ctx.task().job_id, 0, 100)
            .await
            .map_err(TaskError::from_classified)?
            .len();
        self.stored_mid_run.lock().unwrap().push(stored);
        if n == 1 {
            return Err(TaskError::transient("planned failure"));
        }
        ctx.phase_completed(Phase::Checksum, started).await?;
        Ok(TaskOutput::result(json!(n)))
    }
}

/// Ends with an effect and a check that fails while `MOVED` exists: the state the run
/// decided from has moved on. Declares `declared` as its `moved_on` writes.
struct DecidesFrom {
    declared: Vec<usize>,
}

const MOVED: &str = "STATE#MOVED";

#[async_trait]
impl TaskHandler for DecidesFrom {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Ok(TaskOutput {
            result: json!("decided"),
            writes: vec![
                Write::Put {
                    item: Item::new(ItemKey::new("EFFECT#1", "X"), json!({})),
                    condition: Condition::None,
                },
                Write::Check {
                    key: ItemKey::new(MOVED, "X"),
                    condition: Condition::Absent,
                },
            ],
            moved_on: self.declared.clone(),
            taken_over: None,
        })
    }
}

/// Owns version `mine` of `OWNER`: ends with an effect, publishing only while `OWNER`'s
/// version is still `mine` and `MOVED` is absent, and stands down when a newer owner
/// raised the version.
struct Owns {
    mine: u64,
}

const OWNER: &str = "STATE#OWNER";

#[async_trait]
impl TaskHandler for Owns {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Ok(TaskOutput {
            result: json!("published"),
            writes: vec![
                Write::Put {
                    item: Item::new(ItemKey::new("EFFECT#2", "X"), json!({})),
                    condition: Condition::None,
                },
                Write::Check {
                    key: ItemKey::new(OWNER, "X"),
                    condition: Condition::field_eq("version", self.mine),
                },
                Write::Check {
                    key: ItemKey::new(MOVED, "X"),
                    condition: Condition::Absent,
                },
            ],
            moved_on: Vec::new(),
            taken_over: Some(tessera_engine::TakenOver {
                key: ItemKey::new(OWNER, "X"),
                field: "version".into(),
                mine: self.mine,
                result: json!("stood down"),
            }),
        })
    }
}

fn registry_with(kind: &str, h: impl TaskHandler) -> Registry {
    let mut r = Registry::new();
    r.register(kind, h);
    r
}

async fn task_named(engine: &tessera_engine::Engine, job: tessera_core::JobId, name: &str) -> Task {
    engine
        .job_tasks(job)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dag_runs_in_dependency_order_and_events_have_no_gaps() {
    let h = Harness::new();
    let engine = h.engine(registry_with("concat", Concat), LEASE).await;
    let t = |n: &str| TaskPlan::new(n, "concat", json!(null));
    let job = engine
        .submit(plan(
            "dag",
            vec![
                t("d").after(["b", "c"]),
                t("b").after(["a"]),
                t("c").after(["a"]),
                t("a"),
            ],
        ))
        .await
        .unwrap();
    assert!(!job.existing);
    let done = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(done.status(), JobStatus::Succeeded);
    let d = task_named(&engine, job.job_id, "d").await;
    assert_eq!(
        d.result,
        Some(json!("a+b+a+c+d")),
        "d saw b and c, which each saw a"
    );
    let events = engine
        .ports()
        .events
        .read_after(job.job_id, 0, 1000)
        .await
        .unwrap();
    assert_eq!(events.len(), 8, "two phase events per task");
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 + 1),
        "gap-free from 1"
    );
}

/// A handler that defers its events (a photo's short runs) stores them with its run's
/// end: none while it runs, all of them in order and gap-free after, a failed run's
/// before the warning that it is tried again, and a run that lost its lease none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deferred_events_are_stored_with_the_run_that_ends_and_only_with_it() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let stored_mid_run = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = || Deferring {
        runs: runs.clone(),
        stored_mid_run: stored_mid_run.clone(),
    };
    let engine = h.engine(registry_with("deferring", handler()), LEASE).await;
    let job = engine
        .submit(plan(
            "deferred",
            vec![TaskPlan::new("x", "deferring", json!(null))],
        ))
        .await
        .unwrap();
    let done = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(done.status(), JobStatus::Succeeded);
    assert_eq!(
        *stored_mid_run.lock().unwrap(),
        [0, 3],
        "nothing while the first run ran; its two events and the warning during the second"
    );
    let events = engine
        .ports()
        .events
        .read_after(job.job_id, 0, 100)
        .await
        .unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match &e.kind {
            EventKind::PhaseStarted { .. } => "started",
            EventKind::Metric { .. } => "metric",
            EventKind::PhaseCompleted { .. } => "completed",
            EventKind::Warning { .. } => "warning",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "started",
            "metric",
            "warning",
            "started",
            "metric",
            "completed"
        ]
    );
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 + 1)
    );
    assert!(
        events.windows(2).all(|w| w[0].at <= w[1].at),
        "each keeps when it happened"
    );

    // A run whose lease was taken over stores none of what it deferred.
    let a = h
        .engine(
            registry_with("deferring", handler()),
            Duration::from_millis(200),
        )
        .await;
    let b = h
        .engine(
            registry_with("deferring", handler()),
            Duration::from_millis(200),
        )
        .await;
    runs.store(1, Ordering::SeqCst);
    let job = a
        .submit(plan(
            "deferred-fence",
            vec![TaskPlan::new("y", "deferring", json!(null))],
        ))
        .await
        .unwrap();
    let t = task_named(&a, job.job_id, "y").await;
    let Claim::Claimed(held_by_a) = a.claim(t.clone()).await.unwrap() else {
        panic!("a claims")
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Claim::Claimed(held_by_b) = b.claim(held_by_a.clone()).await.unwrap() else {
        panic!("b claims an expired lease")
    };
    assert_eq!(a.execute(held_by_a).await.unwrap(), Handled::LostLease);
    assert_eq!(
        b.execute(held_by_b).await.unwrap(),
        Handled::Ran(TaskState::Succeeded)
    );
    let events = a
        .ports()
        .events
        .read_after(job.job_id, 0, 100)
        .await
        .unwrap();
    assert_eq!(events.len(), 3, "b's three, none of a's: {events:?}");
}

/// A fan-out of small jobs in batches: every job submitted once, sealed, and runnable; a
/// batch that holds a job submitted before is submitted job by job (the old one found
/// again); a guard that no longer holds stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_small_jobs_are_submitted_in_batches_and_once_each() {
    let h = Harness::new();
    let engine = h.engine(registry_with("concat", Concat), LEASE).await;
    let two = |label: &str| {
        plan(
            label,
            vec![
                TaskPlan::new("a", "concat", json!(null)),
                TaskPlan::new("b", "concat", json!(null)).after(["a"]),
            ],
        )
    };
    let plans: Vec<_> = (0..45).map(|i| two(&format!("fan {i}"))).collect();
    let before = engine.submit(plans[30].clone()).await.unwrap().job_id;
    let ids = engine.submit_all(plans.clone(), None).await.unwrap();
    assert_eq!(ids.len(), 45);
    assert_eq!(ids[30], before, "the job submitted before is found again");
    assert_eq!(
        ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
        45,
        "one job each"
    );
    for id in &ids {
        assert!(engine.job(*id).await.unwrap().sealed, "written whole");
    }
    let done = run_until_done(&engine, ids[44], WAIT).await;
    assert_eq!(done.status(), JobStatus::Succeeded);

    // A guard that fails (a run that lost its fence) stores none of its batch.
    let guard = Write::Check {
        key: ItemKey::new("NO#SUCH", "ITEM"),
        condition: Condition::Exists,
    };
    let fresh = two("guarded");
    let err = engine
        .submit_all(vec![fresh.clone()], Some(guard))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            tessera_engine::EngineError::Store(
                tessera_core::ports::state_store::StoreError::Conflict { index: 0, .. }
            )
        ),
        "{err}"
    );
    let resubmitted = engine.submit(fresh).await.unwrap();
    assert!(
        !resubmitted.existing,
        "nothing of the guarded batch was stored"
    );
}

/// A run whose declared write finds the state moved on runs again after a back-off with
/// its attempt given back, so a task with two attempts outlives many such runs; past the
/// limit, and for a conflict on a write it did not declare, the conflict is a counted
/// transient failure. Nothing of a refused run is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_whose_state_moved_on_runs_again_without_spending_an_attempt() {
    let h = Harness::new();
    for declared in [vec![1], vec![0], vec![]] {
        let engine = h
            .engine(
                registry_with(
                    "decides",
                    DecidesFrom {
                        declared: declared.clone(),
                    },
                ),
                LEASE,
            )
            .await;
        let store = engine.ports().store.clone();
        store
            .put(
                Item::new(ItemKey::new(MOVED, "X"), json!({})),
                Condition::None,
            )
            .await
            .unwrap();
        let mut tp = TaskPlan::new("t", "decides", json!(null));
        tp.max_attempts = Some(2);
        let job = engine
            .submit(plan(&format!("decides {declared:?}"), vec![tp]))
            .await
            .unwrap();
        let run = || async {
            let t = task_named(&engine, job.job_id, "t").await;
            let due = t.not_before.since(tessera_core::Millis::now());
            tokio::time::sleep(due).await;
            let Claim::Claimed(held) = engine.claim(t).await.unwrap() else {
                panic!("claims")
            };
            let handled = engine.execute(held).await.unwrap();
            (handled, task_named(&engine, job.job_id, "t").await)
        };
        let runs_given_back = if declared == [1] {
            tessera_engine::lifecycle::MOVED_ON_LIMIT
        } else {
            0
        };
        for k in 1..=runs_given_back {
            let (handled, after) = run().await;
            assert_eq!(handled, Handled::Ran(TaskState::Queued));
            assert_eq!(
                (after.attempts, after.moved_on, after.state),
                (0, k, TaskState::Queued),
                "run {k} gave its attempt back"
            );
            assert!(
                after.not_before > tessera_core::Millis::now(),
                "backed off as a retry is"
            );
        }
        // Past the limit, or undeclared: counted, and backed off.
        let (handled, after) = run().await;
        assert_eq!(handled, Handled::Ran(TaskState::Queued), "{declared:?}");
        assert_eq!(after.attempts, 1, "{declared:?}: the attempt is spent");
        assert!(after.not_before > tessera_core::Millis::now(), "backed off");
        assert!(
            after.last_error.unwrap().message.contains("conflicted"),
            "{declared:?}"
        );
        let effect = store.get(&ItemKey::new("EFFECT#1", "X")).await.unwrap();
        assert!(effect.is_none(), "none of its writes");
        let counters = engine.job(job.job_id).await.unwrap().counters;
        assert_eq!(counters.started, 1, "one task started, once");
        store
            .transact(vec![Write::Delete {
                key: ItemKey::new(MOVED, "X"),
                condition: Condition::None,
            }])
            .await
            .unwrap();
    }
}

/// Fails every run; its compensation sets a field of an item that is gone.
struct UndoesWhatIsGone;

#[async_trait]
impl TaskHandler for UndoesWhatIsGone {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Err(TaskError::transient("planned failure"))
    }

    fn compensate(&self, _task: &Task) -> Vec<Write> {
        vec![Write::Set {
            key: ItemKey::new("GONE#1", "X"),
            fields: vec![("undone".into(), json!(true))],
            condition: Condition::None,
        }]
    }
}

/// A task whose compensation is refused (what it undoes is gone: a photo erased) still
/// ends, without it, instead of lapsing and being refused the same way at every try,
/// and its record says so (its notices must not claim what it did not undo).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_whose_compensation_is_refused_ends_without_it() {
    let h = Harness::new();
    let engine = h
        .engine(registry_with("undoes", UndoesWhatIsGone), LEASE)
        .await;
    let mut tp = TaskPlan::new("t", "undoes", json!(null));
    tp.max_attempts = Some(1);
    let job = engine.submit(plan("undoes", vec![tp])).await.unwrap();
    let t = task_named(&engine, job.job_id, "t").await;
    let Claim::Claimed(held) = engine.claim(t).await.unwrap() else {
        panic!("claims")
    };
    assert_eq!(
        engine.execute(held).await.unwrap(),
        Handled::Ran(TaskState::Dead)
    );
    let ended = task_named(&engine, job.job_id, "t").await;
    assert_eq!(ended.state, TaskState::Dead);
    assert!(
        ended.compensation_refused,
        "the task says it ended without its compensation: {ended:?}"
    );
    assert!(engine.job(job.job_id).await.unwrap().is_over());
    let gone = engine.ports().store.get(&ItemKey::new("GONE#1", "X")).await;
    assert!(
        gone.unwrap().is_none(),
        "nothing was created by the refused write"
    );
}

/// A run whose write conflicts because a newer owner raised the counter it owned ends
/// succeeded with its stand-down result, none of its writes and no second run; a
/// conflict while the counter is still its own (or lower) is a counted failure as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_a_newer_owner_took_over_stands_down_and_any_other_conflict_is_retried() {
    let h = Harness::new();
    // (version stored, MOVED stored, how the run ends)
    let cases = [
        (4, false, TaskState::Succeeded),
        (4, true, TaskState::Succeeded),
        (3, true, TaskState::Queued),
        (2, true, TaskState::Queued),
    ];
    for (stored, moved, ends) in cases {
        let engine = h
            .engine(registry_with("owns", Owns { mine: 3 }), LEASE)
            .await;
        let store = engine.ports().store.clone();
        let mut setup = vec![Write::Put {
            item: Item::new(ItemKey::new(OWNER, "X"), json!({ "version": stored })),
            condition: Condition::None,
        }];
        setup.push(if moved {
            Write::Put {
                item: Item::new(ItemKey::new(MOVED, "X"), json!({})),
                condition: Condition::None,
            }
        } else {
            Write::Delete {
                key: ItemKey::new(MOVED, "X"),
                condition: Condition::None,
            }
        });
        store.transact(setup).await.unwrap();
        let job = engine
            .submit(plan(
                &format!("owns at {stored} {moved}"),
                vec![TaskPlan::new("t", "owns", json!(null))],
            ))
            .await
            .unwrap();
        let t = task_named(&engine, job.job_id, "t").await;
        let Claim::Claimed(held) = engine.claim(t).await.unwrap() else {
            panic!("claims")
        };
        let handled = engine.execute(held).await.unwrap();
        let after = task_named(&engine, job.job_id, "t").await;
        let case = format!("stored {stored}, moved {moved}");
        assert_eq!(handled, Handled::Ran(ends), "{case}");
        assert_eq!(after.state, ends, "{case}");
        let effect = store.get(&ItemKey::new("EFFECT#2", "X")).await.unwrap();
        assert!(effect.is_none(), "{case}: none of its writes");
        if ends == TaskState::Succeeded {
            assert_eq!(after.result, Some(json!("stood down")), "{case}");
            assert_eq!((after.attempts, after.moved_on), (1, 0), "{case}: one run");
            assert_eq!(
                engine.job(job.job_id).await.unwrap().status(),
                JobStatus::Succeeded,
                "{case}"
            );
        } else {
            assert_eq!(after.attempts, 1, "{case}: the attempt is spent");
            assert!(
                after.last_error.unwrap().message.contains("conflicted"),
                "{case}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_identical_spec_returns_the_existing_job() {
    let h = Harness::new();
    let engine = h.engine(registry_with("concat", Concat), LEASE).await;
    let p = plan("same", vec![TaskPlan::new("a", "concat", json!(null))]);
    let first = engine.submit(p.clone()).await.unwrap();
    let mut again = p.clone();
    again.priority = 50;
    again.spec["priority"] = json!(50);
    let second = engine.submit(again).await.unwrap();
    assert_eq!(second.job_id, first.job_id);
    assert!(second.existing);
    let mut other = p;
    other.spec["label"] = json!("different");
    assert_ne!(engine.submit(other).await.unwrap().job_id, first.job_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_are_handled_by_class() {
    let h = Harness::new();
    let cases = [
        (
            ErrorClass::Transient,
            2,
            TaskState::Succeeded,
            3,
            ResourceClass::Small,
        ),
        (
            ErrorClass::Resource,
            2,
            TaskState::Succeeded,
            3,
            ResourceClass::Large,
        ),
        (
            ErrorClass::Permanent,
            1,
            TaskState::Failed,
            1,
            ResourceClass::Small,
        ),
        (
            ErrorClass::Poison,
            1,
            TaskState::Dead,
            1,
            ResourceClass::Small,
        ),
        (
            ErrorClass::Cancelled,
            1,
            TaskState::Cancelled,
            1,
            ResourceClass::Small,
        ),
    ];
    for (class, times, state, runs_expected, final_class) in cases {
        let runs = Arc::new(AtomicU32::new(0));
        let engine = h
            .engine(
                registry_with(
                    "flaky",
                    Flaky {
                        class,
                        times,
                        runs: runs.clone(),
                    },
                ),
                LEASE,
            )
            .await;
        let job = engine
            .submit(plan(
                &format!("{class}"),
                vec![TaskPlan::new("f", "flaky", json!(null))],
            ))
            .await
            .unwrap();
        run_until_done(&engine, job.job_id, WAIT).await;
        let t = task_named(&engine, job.job_id, "f").await;
        assert_eq!(t.state, state, "{class}");
        assert_eq!(runs.load(Ordering::SeqCst), runs_expected, "{class}: runs");
        assert_eq!(
            t.resource_class, final_class,
            "{class}: a resource failure grows the class, others keep it"
        );
        if state != TaskState::Succeeded {
            assert_eq!(t.last_error.as_ref().unwrap().class, class);
        }
        let events = engine
            .ports()
            .events
            .read_after(job.job_id, 0, 100)
            .await
            .unwrap();
        assert!(
            !events.is_empty(),
            "{class}: failures are reported as events"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_attempt_ceiling_ends_in_dead_with_compensation() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let engine = h
        .engine(
            registry_with(
                "flaky",
                Flaky {
                    class: ErrorClass::Transient,
                    times: 100,
                    runs: runs.clone(),
                },
            ),
            LEASE,
        )
        .await;
    let mut tp = TaskPlan::new("f", "flaky", json!(null));
    tp.max_attempts = Some(3);
    let job = engine.submit(plan("ceiling", vec![tp])).await.unwrap();
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    let t = task_named(&engine, job.job_id, "f").await;
    assert_eq!(
        (t.state, t.attempts, runs.load(Ordering::SeqCst)),
        (TaskState::Dead, 3, 3)
    );
    assert_eq!(j.status(), JobStatus::Failed);
    assert_eq!(j.counters.dead, 1);
    let comp = engine
        .ports()
        .store
        .get(&ItemKey::new(format!("UNPUBLISHED#{}", t.id), "X"))
        .await
        .unwrap();
    assert!(
        comp.is_some(),
        "the compensating write committed with the dead state"
    );
}

/// Finds `times` runs in a row that what it decided from moved on mid-run, then
/// succeeds.
struct MovesOn {
    times: u32,
    runs: Arc<AtomicU32>,
}

#[async_trait]
impl TaskHandler for MovesOn {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= self.times {
            return Err(TaskError::moved_on(format!(
                "the row changed under run {n}"
            )));
        }
        Ok(TaskOutput::result(json!(n)))
    }
}

/// A run that finds mid-run that the state moved on (a conditional write refused by a
/// change it did not make) runs again with its attempt given back: more such runs than
/// the task's attempt ceiling still end in success.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_whose_state_moved_on_mid_run_spends_no_attempt() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let engine = h
        .engine(
            registry_with(
                "moves_on",
                MovesOn {
                    times: 5,
                    runs: runs.clone(),
                },
            ),
            LEASE,
        )
        .await;
    let mut tp = TaskPlan::new("m", "moves_on", json!(null));
    tp.max_attempts = Some(3);
    let job = engine.submit(plan("moves on", vec![tp])).await.unwrap();
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    let t = task_named(&engine, job.job_id, "m").await;
    assert_eq!(
        (t.state, t.attempts, t.moved_on, runs.load(Ordering::SeqCst)),
        (TaskState::Succeeded, 1, 5, 6),
        "{t:?}"
    );
    assert_eq!(j.status(), JobStatus::Succeeded);
}

/// With no ceiling of its own, a task gets its kind's from the attempt policy table: a
/// photo task that keeps failing transiently is tried three times, not the fallback's
/// five.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_without_a_ceiling_gets_its_kinds_policy() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let kind = "photo.always_busy";
    let engine = h
        .engine(
            registry_with(
                kind,
                Flaky {
                    class: ErrorClass::Transient,
                    times: 100,
                    runs: runs.clone(),
                },
            ),
            LEASE,
        )
        .await;
    let job = engine
        .submit(plan("policy", vec![TaskPlan::new("p", kind, json!(null))]))
        .await
        .unwrap();
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    let t = task_named(&engine, job.job_id, "p").await;
    let ceiling = tessera_core::attempts::attempt_policy(kind).max_attempts;
    assert_eq!(ceiling, 3);
    assert_eq!(
        (t.state, t.attempts, runs.load(Ordering::SeqCst)),
        (TaskState::Dead, ceiling, ceiling)
    );
    assert!(
        t.last_error
            .unwrap()
            .message
            .contains("attempt ceiling 3 reached"),
        "the reason names the ceiling"
    );
    assert_eq!(j.status(), JobStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_permanent_failure_commits_the_compensation_too() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let engine = h
        .engine(
            registry_with(
                "flaky",
                Flaky {
                    class: ErrorClass::Permanent,
                    times: 1,
                    runs: runs.clone(),
                },
            ),
            LEASE,
        )
        .await;
    let job = engine
        .submit(plan(
            "permanent",
            vec![TaskPlan::new("f", "flaky", json!(null))],
        ))
        .await
        .unwrap();
    run_until_done(&engine, job.job_id, WAIT).await;
    let t = task_named(&engine, job.job_id, "f").await;
    assert_eq!(
        (t.state, runs.load(Ordering::SeqCst)),
        (TaskState::Failed, 1)
    );
    assert!(
        engine
            .ports()
            .store
            .get(&ItemKey::new(format!("UNPUBLISHED#{}", t.id), "X"))
            .await
            .unwrap()
            .is_some(),
        "a step that cannot finish undoes what must not stay visible"
    );
    // Operators hear of it: counted by kind and final state (`/metrics`, and one
    // CloudWatch embedded-metric line per final failure on AWS).
    assert!(
        tessera_engine::outcomes::snapshot()
            .iter()
            .any(|(kind, state, n)| kind == "flaky" && state == "failed" && *n >= 1),
        "{:?}",
        tessera_engine::outcomes::snapshot()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_presumed_dead_is_fenced_out() {
    let h = Harness::new();
    let a = h
        .engine(registry_with("concat", Concat), Duration::from_millis(200))
        .await;
    let b = h
        .engine(registry_with("concat", Concat), Duration::from_millis(200))
        .await;
    let job = a
        .submit(plan(
            "fence",
            vec![TaskPlan::new("x", "concat", json!(null))],
        ))
        .await
        .unwrap();
    let t = task_named(&a, job.job_id, "x").await;
    let Claim::Claimed(held_by_a) = a.claim(t.clone()).await.unwrap() else {
        panic!("a claims")
    };
    // b cannot take a valid lease.
    let Claim::Skipped(why, _) = b.claim(held_by_a.clone()).await.unwrap() else {
        panic!("b must not claim a live lease")
    };
    assert!(why.contains("another lease"));
    // a stalls past its lease (no heartbeat); b takes over at the next epoch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Claim::Claimed(held_by_b) = b.claim(held_by_a.clone()).await.unwrap() else {
        panic!("b claims an expired lease")
    };
    assert_eq!(held_by_b.epoch, held_by_a.epoch + 1);
    // a wakes up: its run and its events are refused; b's succeed.
    assert_eq!(
        a.execute(held_by_a.clone()).await.unwrap(),
        Handled::LostLease
    );
    assert_eq!(
        b.execute(held_by_b).await.unwrap(),
        Handled::Ran(TaskState::Succeeded)
    );
    let events = a
        .ports()
        .events
        .read_after(job.job_id, 0, 100)
        .await
        .unwrap();
    assert!(events.iter().all(|e| e.task_id == Some(t.id)));
    assert_eq!(
        events.len(),
        2,
        "only the current epoch's phase events are stored"
    );
    let done = task_named(&a, job.job_id, "x").await;
    assert_eq!((done.state, done.attempts), (TaskState::Succeeded, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_keep_a_long_task_alive() {
    let h = Harness::new();
    let engine = h
        .engine(
            registry_with("sleep", Sleeper { ms: 2500 }),
            Duration::from_millis(600),
        )
        .await;
    let job = engine
        .submit(plan("long", vec![TaskPlan::new("s", "sleep", json!(null))]))
        .await
        .unwrap();
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(j.status(), JobStatus::Succeeded);
    let t = task_named(&engine, job.job_id, "s").await;
    assert_eq!(
        (t.attempts, t.epoch),
        (1, 1),
        "a task that outlives its lease but heartbeats is never re-claimed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_renew_the_lease_without_moving_the_due_index_entry() {
    let h = Harness::new();
    let engine = h
        .engine(
            registry_with("sleep", Sleeper { ms: 3000 }),
            Duration::from_millis(600),
        )
        .await;
    let job = engine
        .submit(plan(
            "beats",
            vec![TaskPlan::new("s", "sleep", json!(null))],
        ))
        .await
        .unwrap();
    let id = task_named(&engine, job.job_id, "s").await.id;
    // A worker with no reaper of its own: this test reaps by hand.
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tessera_engine::Worker::new(engine.clone(), 1, None);
    let s = stop.clone();
    let running = tokio::spawn(async move { worker.run(s).await });
    let read = || async {
        let item = engine
            .ports()
            .store
            .get(&tessera_core::records::task_key(id))
            .await
            .unwrap()
            .unwrap();
        let t = tessera_core::records::task_from(&item).unwrap();
        (t, item.by_due)
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    let (first, entry) = loop {
        let (t, due) = read().await;
        if t.state == TaskState::Running {
            break (t, due);
        }
        assert!(tokio::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Two heartbeats later (every 200 ms): the lease moved, the index entry did not.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (beaten, same_entry) = read().await;
    assert_eq!(beaten.state, TaskState::Running);
    assert!(
        beaten.lease.as_ref().unwrap().expires_at > first.lease.as_ref().unwrap().expires_at,
        "the heartbeat renewed the lease"
    );
    assert_eq!(same_entry, entry, "a heartbeat is no index write");
    // The entry is due (its first expiry passed) but the lease is held: the reaper moves
    // the entry to the lease's expiry and leaves the task running.
    let report = engine.reap_once(Millis::now(), 100).await.unwrap();
    assert_eq!((report.reindexed, report.requeued), (1, 0), "{report:?}");
    let (after, moved) = read().await;
    assert_eq!(after.state, TaskState::Running);
    assert_eq!(after.epoch, first.epoch, "not re-claimed");
    assert_ne!(moved, entry, "the reaper moved the entry");
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cooperative_cancel_stops_at_a_checkpoint_and_cancels_the_rest() {
    let h = Harness::new();
    let engine = h
        .engine(registry_with("sleep", Sleeper { ms: 20_000 }), LEASE)
        .await;
    let job = engine
        .submit(plan(
            "cancel",
            vec![
                TaskPlan::new("s", "sleep", json!(null)),
                TaskPlan::new("after", "sleep", json!(null)).after(["s"]),
            ],
        ))
        .await
        .unwrap();
    let e2 = engine.clone();
    let runner = tokio::spawn(async move { run_until_done(&e2, job.job_id, WAIT).await });
    while task_named(&engine, job.job_id, "s").await.state != TaskState::Running {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = engine
        .cancel(job.job_id, CancelMode::Cooperative)
        .await
        .unwrap();
    assert_eq!((report.cancelled, report.stopping), (1, 1));
    let j = runner.await.unwrap();
    assert_eq!(j.status(), JobStatus::Cancelled);
    assert_eq!(
        task_named(&engine, job.job_id, "s").await.state,
        TaskState::Cancelled
    );

    // Resume puts both back in line; with a short sleeper they now finish.
    let quick = h
        .engine(registry_with("sleep", Sleeper { ms: 50 }), LEASE)
        .await;
    assert_eq!(quick.resume(job.job_id).await.unwrap().requeued, 2);
    assert_eq!(
        run_until_done(&quick, job.job_id, WAIT).await.status(),
        JobStatus::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forced_cancel_kills_the_subprocess() {
    let h = Harness::new();
    let pid = Arc::new(AtomicU32::new(0));
    let engine = h
        .engine(
            registry_with("proc", Subprocess { pid: pid.clone() }),
            Duration::from_millis(600),
        )
        .await;
    let job = engine
        .submit(plan("force", vec![TaskPlan::new("p", "proc", json!(null))]))
        .await
        .unwrap();
    let e2 = engine.clone();
    let runner = tokio::spawn(async move { run_until_done(&e2, job.job_id, WAIT).await });
    while pid.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let p = pid.load(Ordering::SeqCst);
    assert!(
        std::path::Path::new(&format!("/proc/{p}")).exists(),
        "the subprocess runs"
    );
    engine.cancel(job.job_id, CancelMode::Force).await.unwrap();
    let j = runner.await.unwrap();
    assert_eq!(j.status(), JobStatus::Cancelled);
    // The heartbeat notices the revoked lease within a beat and kills the group.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{p}")).exists()
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{p}")).exists(),
        "no subprocess outlives a forced cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cached_key_completes_without_running() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let engine = h
        .engine(
            registry_with(
                "flaky",
                Flaky {
                    class: ErrorClass::Transient,
                    times: 0,
                    runs: runs.clone(),
                },
            ),
            LEASE,
        )
        .await;
    let cached = |label: &str| {
        let mut t = TaskPlan::new("c", "flaky", json!(null));
        t.cache_key = Some("features:abc".into());
        plan(label, vec![t])
    };
    let one = engine.submit(cached("one")).await.unwrap();
    run_until_done(&engine, one.job_id, WAIT).await;
    let two = engine.submit(cached("two")).await.unwrap();
    assert_eq!(
        run_until_done(&engine, two.job_id, WAIT).await.status(),
        JobStatus::Succeeded
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the second task used the cached result"
    );
    assert_eq!(
        task_named(&engine, two.job_id, "c").await.result,
        task_named(&engine, one.job_id, "c").await.result
    );
    // Another tenant with the same key runs its own task: cached results (and the task
    // they name) never cross tenants.
    let mut other = cached("three");
    other.tenant = "tenant-b".parse().unwrap();
    let three = engine.submit(other).await.unwrap();
    assert_eq!(
        run_until_done(&engine, three.job_id, WAIT).await.status(),
        JobStatus::Succeeded
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2, "tenant-b ran its own task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fan_out_larger_than_a_transaction_reaches_every_dependent() {
    let h = Harness::new();
    let engine = h.engine(registry_with("concat", Concat), LEASE).await;
    let mut tasks = vec![TaskPlan::new("root", "concat", json!(null))];
    tasks.extend(
        (0..250)
            .map(|i| TaskPlan::new(format!("leaf{i:03}"), "concat", json!(null)).after(["root"])),
    );
    tasks.push(
        TaskPlan::new("sink", "concat", json!(null)).after((0..250).map(|i| format!("leaf{i:03}"))),
    );
    let job = engine.submit(plan("fan", tasks)).await.unwrap();
    let j = run_until_done(&engine, job.job_id, Duration::from_secs(120)).await;
    assert_eq!(j.status(), JobStatus::Succeeded);
    assert_eq!(j.counters.succeeded, 252);
    let sink = task_named(&engine, job.job_id, "sink").await;
    assert_eq!(
        sink.result
            .unwrap()
            .as_str()
            .unwrap()
            .matches("leaf")
            .count(),
        250
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_requeues_expired_leases_and_kills_at_the_ceiling() {
    let h = Harness::new();
    let engine = h
        .engine(registry_with("concat", Concat), Duration::from_millis(100))
        .await;
    let mut two = TaskPlan::new("twice", "concat", json!(null));
    two.max_attempts = Some(2);
    let mut one = TaskPlan::new("once", "concat", json!(null));
    one.max_attempts = Some(1);
    let job = engine.submit(plan("reap", vec![two, one])).await.unwrap();
    for name in ["twice", "once"] {
        let t = task_named(&engine, job.job_id, name).await;
        assert!(matches!(engine.claim(t).await.unwrap(), Claim::Claimed(_)));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = engine.reap_once(Millis::now(), 100).await.unwrap();
    assert_eq!((r.requeued, r.dead), (1, 1));
    let once = task_named(&engine, job.job_id, "once").await;
    assert_eq!(once.state, TaskState::Dead);
    assert!(once.last_error.unwrap().message.contains("presumed dead"));
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!((j.counters.succeeded, j.counters.dead), (1, 1));
    assert_eq!(task_named(&engine, job.job_id, "twice").await.attempts, 2);
}

/// One record the reaper cannot read, at the head of every due partition it walks (the
/// oldest entry, which every pass meets first), must not stop the pass: the expired lease
/// behind it is still reclaimed, and each corrupt entry is counted and skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_skips_a_record_it_cannot_read_and_goes_on() {
    let h = Harness::new();
    let engine = h
        .engine(registry_with("concat", Concat), Duration::from_millis(100))
        .await;
    let job = engine
        .submit(plan(
            "reap-past-garbage",
            vec![TaskPlan::new("lost", "concat", json!(null))],
        ))
        .await
        .unwrap();
    let t = task_named(&engine, job.job_id, "lost").await;
    let t_id = t.id;
    assert!(matches!(engine.claim(t).await.unwrap(), Claim::Claimed(_)));
    let partitions: Vec<String> = tessera_core::records::due_partition(TaskState::Running)
        .into_iter()
        .chain(tessera_core::records::due_partition(TaskState::Queued))
        .chain(tessera_core::records::due_partitions("advance"))
        .collect();
    let store = engine.ports().store.clone();
    for (i, pk) in partitions.iter().enumerate() {
        let mut item = Item::new(
            ItemKey::new(format!("TASK#corrupt{i}"), "TASK"),
            json!({ "not": "a task" }),
        );
        // Sorts before every real entry ("0#" < "00…").
        item.by_due = Some(ItemKey::new(pk.clone(), "0#corrupt"));
        store.put(item, Condition::Absent).await.unwrap();
    }
    // More corrupt entries than one pass's page holds, in the partition the lapsed lease
    // is in: the pass pages past them.
    let lease_partition = store
        .get(&ItemKey::new(format!("TASK#{}", t_id), "TASK"))
        .await
        .unwrap()
        .unwrap()
        .by_due
        .unwrap()
        .pk;
    for i in 0..5 {
        let mut item = Item::new(
            ItemKey::new(format!("TASK#corrupt-more{i}"), "TASK"),
            json!({ "not": "a task" }),
        );
        item.by_due = Some(ItemKey::new(lease_partition.clone(), format!("0#more{i}")));
        store.put(item, Condition::Absent).await.unwrap();
    }
    let unreadable_before = tessera_engine::outcomes::unreadable_total();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = engine.reap_once(Millis::now(), 3).await.unwrap();
    assert_eq!(r.requeued, 1, "the lapsed lease behind the garbage: {r:?}");
    assert_eq!(r.unreadable, partitions.len() + 5, "{r:?}");
    assert!(
        tessera_engine::outcomes::unreadable_total()
            >= unreadable_before + partitions.len() as u64 + 5
    );
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(j.status(), JobStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_messages_and_unknown_kinds_are_archived_on_the_first_try() {
    let h = Harness::new();
    let engine = h.engine(Registry::new(), LEASE).await;
    engine
        .ports()
        .queue
        .send("tasks", "{not json", Duration::ZERO)
        .await
        .unwrap();
    let missing = serde_json::json!({ "task": tessera_core::TaskId::new(), "job": tessera_core::JobId::new() }).to_string();
    engine
        .ports()
        .queue
        .send("tasks", &missing, Duration::ZERO)
        .await
        .unwrap();
    let job = engine
        .submit(plan(
            "unknown",
            vec![TaskPlan::new("u", "no-such-kind", json!(null))],
        ))
        .await
        .unwrap();
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(j.counters.dead, 1);
    let t = task_named(&engine, job.job_id, "u").await;
    assert_eq!((t.state, t.attempts), (TaskState::Dead, 1));
    assert!(
        t.last_error
            .unwrap()
            .message
            .contains("no handler for task kind `no-such-kind`")
    );
    assert_eq!(
        engine.ports().queue.depth("tasks").await.unwrap().dead,
        2,
        "both bad messages are in the dead-letter queue"
    );
    let events = engine
        .ports()
        .events
        .read_after(job.job_id, 0, 10)
        .await
        .unwrap();
    assert!(matches!(
        events[0].kind,
        EventKind::Error {
            class: ErrorClass::Poison,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_task_cancels_what_depends_on_it_and_the_job_still_ends() {
    let h = Harness::new();
    let runs = Arc::new(AtomicU32::new(0));
    let mut r = registry_with("concat", Concat);
    r.register(
        "flaky",
        Flaky {
            class: ErrorClass::Permanent,
            times: 1,
            runs: runs.clone(),
        },
    );
    let engine = h.engine(r, LEASE).await;
    let c = |n: &str| TaskPlan::new(n, "concat", json!(null));
    let job = engine
        .submit(plan(
            "cascade",
            vec![
                TaskPlan::new("bad", "flaky", json!(null)),
                c("ok"),
                c("mid").after(["bad", "ok"]),
                c("leaf").after(["mid"]),
                c("other").after(["ok"]),
            ],
        ))
        .await
        .unwrap();
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(j.finished(), 5, "every task reaches a terminal state");
    assert_eq!(j.status(), JobStatus::Failed);
    assert_eq!(
        (
            j.counters.succeeded,
            j.counters.failed,
            j.counters.cancelled
        ),
        (2, 1, 2)
    );
    let leaf = task_named(&engine, job.job_id, "leaf").await;
    assert_eq!(leaf.state, TaskState::Cancelled);
    assert!(
        leaf.last_error
            .unwrap()
            .message
            .contains("upstream task `mid` cancelled")
    );
    assert!(
        task_named(&engine, job.job_id, "mid")
            .await
            .last_error
            .unwrap()
            .message
            .contains("upstream task `bad` failed")
    );

    // Resume: the failed task runs again (and now succeeds), the cancelled ones follow.
    assert_eq!(engine.resume(job.job_id).await.unwrap().requeued, 3);
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(j.status(), JobStatus::Succeeded);
    let leaf = task_named(&engine, job.job_id, "leaf").await;
    assert_eq!(leaf.state, TaskState::Succeeded);
    assert!(
        leaf.result
            .unwrap()
            .as_str()
            .unwrap()
            .ends_with("ok+mid+leaf")
    );
}

/// Launches nothing; counts what it was asked to launch.
struct CountingLauncher(AtomicU32);

#[async_trait]
impl tessera_engine::remote::Launcher for CountingLauncher {
    async fn launch(&self, _task: &Task) -> Result<String, TaskError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("job-{n}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remote_job_is_launched_once_per_epoch_and_its_failure_closes_the_task() {
    use tessera_engine::remote::{Launched, RemoteEnd, remote_owner};
    let h = Harness::new();
    let lease = Duration::from_secs(30);
    let orchestrator = h.engine(registry_with("concat", Concat), lease).await;
    let mut heavy = TaskPlan::new("heavy", "concat", json!(null));
    heavy.resource_class = ResourceClass::Large;
    let job = orchestrator
        .submit(plan("remote", vec![heavy]))
        .await
        .unwrap()
        .job_id;
    let t = task_named(&orchestrator, job, "heavy").await;
    let launcher = CountingLauncher(AtomicU32::new(0));

    // A redelivered message launches nothing more.
    assert_eq!(
        orchestrator.launch_task(t.id, &launcher).await.unwrap(),
        Launched::Started("job-1".into())
    );
    assert_eq!(
        orchestrator.launch_task(t.id, &launcher).await.unwrap(),
        Launched::AlreadyStarted
    );

    // The job claims under its own identity, then dies out of memory.
    let remote = h
        .engine_as(
            registry_with("concat", Concat),
            lease,
            Some(remote_owner("job-1")),
        )
        .await;
    let Claim::Claimed(_) = remote.claim(t.clone()).await.unwrap() else {
        panic!("the remote job claims")
    };
    let end = |job_id: &str, reason: &str| RemoteEnd {
        job_id: job_id.into(),
        task: t.id,
        succeeded: false,
        reason: reason.into(),
    };
    // Another job's end does not touch a task it does not hold.
    assert_eq!(
        orchestrator
            .remote_ended(&end("job-7", "host lost"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        task_named(&orchestrator, job, "heavy").await.state,
        TaskState::Running
    );
    let closed = orchestrator
        .remote_ended(&end(
            "job-1",
            "OutOfMemoryError: Container killed; exit code 137",
        ))
        .await
        .unwrap();
    assert!(closed.is_some());
    let after = task_named(&orchestrator, job, "heavy").await;
    assert_eq!(after.state, TaskState::Queued, "retried");
    assert_eq!(
        after.resource_class,
        ResourceClass::Xlarge,
        "one class up after OOM"
    );
    assert_eq!(
        after.last_error.as_ref().unwrap().class,
        ErrorClass::Resource
    );

    // The retry is a new epoch: one new launch. Its job fails before claiming (the
    // container never started): the launch is forgotten and the task offered again.
    assert_eq!(
        orchestrator.launch_task(t.id, &launcher).await.unwrap(),
        Launched::Started("job-2".into())
    );
    assert_eq!(
        orchestrator
            .remote_ended(&end("job-2", "CannotPullContainerError"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        orchestrator.launch_task(t.id, &launcher).await.unwrap(),
        Launched::Started("job-3".into()),
        "launched again after a job that never claimed"
    );
    // A worker image that never starts does not loop: the launches back off and, after
    // the fifth job that never claimed the task, it fails for good, naming the cause.
    assert_eq!(
        tessera_engine::remote::unclaimed_backoff(1),
        Duration::from_secs(30)
    );
    assert_eq!(
        tessera_engine::remote::unclaimed_backoff(4),
        Duration::from_secs(240)
    );
    assert_eq!(
        tessera_engine::remote::unclaimed_backoff(40),
        Duration::from_secs(900)
    );
    for n in 3..=tessera_engine::remote::MAX_UNCLAIMED_LAUNCHES + 1 {
        let job_id = format!("job-{n}");
        let closed = orchestrator
            .remote_ended(&end(&job_id, "CannotPullContainerError: image not found"))
            .await
            .unwrap();
        if n <= tessera_engine::remote::MAX_UNCLAIMED_LAUNCHES {
            assert_eq!(closed, None, "{job_id} ends unclaimed: offered again");
            assert_eq!(
                task_named(&orchestrator, job, "heavy").await.state,
                TaskState::Queued
            );
            assert_eq!(
                orchestrator.launch_task(t.id, &launcher).await.unwrap(),
                Launched::Started(format!("job-{}", n + 1))
            );
        } else {
            assert!(closed.is_some(), "the task is closed");
        }
    }
    let failed = task_named(&orchestrator, job, "heavy").await;
    assert_eq!(failed.state, TaskState::Failed);
    let why = &failed.last_error.as_ref().unwrap().message;
    assert!(
        why.contains("ended before it started its task")
            && why.contains("CannotPullContainerError"),
        "{why}"
    );
}

/// "Every job is over" is only said after two listings in a row show the same jobs, all
/// over: one listing reads its shards one after another and can miss a job submitted
/// meanwhile (a flaky wait in the photo tests returned before a follow-up ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_over_only_when_two_listings_in_a_row_agree() {
    let h = Harness::new();
    let engine = h.engine(registry_with("concat", Concat), LEASE).await;
    let tenant = tessera_core::TenantId::local();
    let mut seen = None;
    assert!(!engine.all_jobs_over(&tenant, &mut seen).await.unwrap());
    assert!(
        engine.all_jobs_over(&tenant, &mut seen).await.unwrap(),
        "no job, twice"
    );
    let first = engine
        .submit(plan("one", vec![TaskPlan::new("a", "concat", json!(null))]))
        .await
        .unwrap()
        .job_id;
    assert!(
        !engine.all_jobs_over(&tenant, &mut seen).await.unwrap(),
        "one running"
    );
    run_until_done(&engine, first, WAIT).await;
    assert!(
        !engine.all_jobs_over(&tenant, &mut seen).await.unwrap(),
        "over once is not yet over"
    );
    assert!(engine.all_jobs_over(&tenant, &mut seen).await.unwrap());
    // A job that appears between two listings that were all over: not over.
    let second = engine
        .submit(plan("two", vec![TaskPlan::new("a", "concat", json!(null))]))
        .await
        .unwrap()
        .job_id;
    run_until_done(&engine, second, WAIT).await;
    assert!(
        !engine.all_jobs_over(&tenant, &mut seen).await.unwrap(),
        "a new job, even over, is checked again"
    );
    assert!(engine.all_jobs_over(&tenant, &mut seen).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_job_listing_is_spread_over_shards_and_pages_in_order() {
    // One index partition took every listing entry of a tenant (about four jobs a
    // photo): the load rehearsal's hottest index partition (infra/rehearsal/load.py).
    let h = Harness::new();
    let engine = h.engine(registry_with("concat", Concat), LEASE).await;
    let mut ids = Vec::new();
    for n in 0..40 {
        let p = plan(
            &format!("job {n}"),
            vec![TaskPlan::new("a", "concat", json!(null))],
        );
        ids.push(engine.submit(p).await.unwrap().job_id);
    }
    // An entry written before the listing was sharded, in the old partition.
    let legacy = engine
        .submit(plan(
            "legacy",
            vec![TaskPlan::new("a", "concat", json!(null))],
        ))
        .await
        .unwrap()
        .job_id;
    let store = engine.ports().store.clone();
    let mut item = store
        .get(&tessera_core::records::job_key(legacy))
        .await
        .unwrap()
        .unwrap();
    let tenant = tessera_core::TenantId::local();
    item.by_parent = Some(ItemKey::new(
        format!("TENANT#{tenant}#JOBS"),
        legacy.to_string(),
    ));
    let rev = item.rev;
    store
        .transact(vec![Write::Put {
            item,
            condition: Condition::Rev(rev),
        }])
        .await
        .unwrap();
    ids.push(legacy);
    let old = store
        .query(&tessera_core::ports::state_store::Query::partition(
            tessera_core::ports::state_store::Index::ByParent,
            format!("TENANT#{tenant}#JOBS"),
            10,
        ))
        .await
        .unwrap();
    assert_eq!(
        old.items.len(),
        1,
        "the legacy entry is in the old partition"
    );

    let mut partitions = std::collections::BTreeSet::new();
    for id in &ids[..40] {
        partitions.insert(tessera_core::records::tenant_jobs_partition(&tenant, *id));
    }
    assert!(partitions.len() >= 8, "40 jobs in {partitions:?}");

    let (mut seen, mut after) = (Vec::new(), None);
    loop {
        let (page, next) = engine.list_jobs(&tenant, after, 7).await.unwrap();
        assert!(page.len() <= 7);
        seen.extend(page.iter().map(|j| j.id));
        match next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.sort_by_key(|id| id.to_string());
    assert_eq!(
        seen, expected,
        "every job once, oldest first, the legacy one too"
    );
}

/// A queued task nobody claims looks the same to the reaper whether its message was lost
/// or is waiting behind a backlog. Re-offering it on every pass added one message per
/// waiting task per pass: under a backlog older than the grace period the queue grew
/// faster than workers drained it (a kill test saw 138,000 messages for 120 photos). Each
/// re-offer doubles the wait before the next, and a claim starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_re_offers_a_waiting_task_less_and_less_often() {
    let h = Harness::new();
    let engine = h
        .engine(registry_with("concat", Concat), Duration::from_millis(100))
        .await;
    let grace = engine.config().reoffer_grace.as_millis() as i64;
    let job = engine
        .submit(plan(
            "backlog",
            vec![TaskPlan::new("waits", "concat", json!(null))],
        ))
        .await
        .unwrap();
    let t0 = task_named(&engine, job.job_id, "waits").await.not_before;
    // Twenty passes, one per grace period: offers at 1, 2, 4 and 8 grace periods after
    // the due time, not at every pass.
    let mut offered_at = Vec::new();
    for k in 1..=20i64 {
        let r = engine
            .reap_once(Millis(t0.0 + grace * k + 1), 100)
            .await
            .unwrap();
        if r.reoffered > 0 {
            offered_at.push(k);
        }
    }
    assert_eq!(offered_at, vec![1, 3, 7, 15]);
    let waits = task_named(&engine, job.job_id, "waits").await;
    assert_eq!(waits.reoffered.map(|r| r.times), Some(4));
    // Every message offered is still there to be claimed: one claim runs the task and
    // clears the count.
    let claimed = match engine.claim(waits).await.unwrap() {
        Claim::Claimed(t) => t,
        other => panic!("not claimed: {other:?}"),
    };
    assert_eq!(claimed.reoffered, None);
    let j = run_until_done(&engine, job.job_id, WAIT).await;
    assert_eq!(j.counters.succeeded, 1);
}
