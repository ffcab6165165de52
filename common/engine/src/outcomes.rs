//! How tasks end, counted where operators can see it: a task that ends failed or dead
//! deletes its message and, without this, would only leave a log line.
//!
//! Every terminal commit is counted in this process by task kind and state (served as
//! `tessera_tasks_ended_total` on an embedded server's `/metrics`). Where
//! `TESSERA_METRICS_STACK` names a stack (the SAM template sets it for every function
//! and the Batch worker), a task that ends failed or dead is also written to stdout as
//! one CloudWatch embedded-metric-format line: CloudWatch Logs turns it into the
//! `Tessera/TasksFailed` metric, per stack and per stack and task kind, which the
//! template's alarm watches. The line carries the task and job ids for the person who
//! follows the alarm.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use tessera_core::task::{Task, TaskState};

/// The environment variable naming the stack whose metrics are written.
pub const STACK_ENV: &str = "TESSERA_METRICS_STACK";
/// The CloudWatch namespace.
pub const NAMESPACE: &str = "Tessera";
/// The metric a final failure adds one to.
pub const FAILED_METRIC: &str = "TasksFailed";

fn counts() -> &'static Mutex<BTreeMap<(String, String), u64>> {
    static C: OnceLock<Mutex<BTreeMap<(String, String), u64>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Count `task`, which was just committed in a terminal state, and announce it if it
/// failed for good.
pub fn ended(task: &Task) {
    {
        let mut c = counts().lock().unwrap_or_else(|p| p.into_inner());
        *c.entry((task.kind.clone(), task.state.to_string()))
            .or_default() += 1;
    }
    if matches!(task.state, TaskState::Failed | TaskState::Dead)
        && let Some(stack) = metrics_stack()
    {
        println!("{}", emf_line(task, &stack, tessera_core::Millis::now().0));
    }
}

/// The stack whose metrics this process writes, if `TESSERA_METRICS_STACK` names one.
fn metrics_stack() -> Option<String> {
    std::env::var(STACK_ENV).ok().filter(|s| !s.is_empty())
}

/// One embedded-metric-format line adding 1 to `metric` of namespace [`NAMESPACE`] under
/// `dimensions`, with `fields` (which must hold the dimensions' values) beside it.
fn emf(
    at_ms: i64,
    dimensions: serde_json::Value,
    metric: &str,
    fields: serde_json::Value,
) -> String {
    let mut line = serde_json::json!({
        "_aws": {
            "Timestamp": at_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": dimensions,
                "Metrics": [{ "Name": metric, "Unit": "Count" }],
            }],
        },
    });
    line[metric] = 1.into();
    if let serde_json::Value::Object(f) = fields {
        line.as_object_mut().expect("an object").extend(f);
    }
    line.to_string()
}

/// The metric an unreadable record adds one to.
pub const UNREADABLE_METRIC: &str = "RecordsUnreadable";

fn unreadable_count() -> &'static std::sync::atomic::AtomicU64 {
    static C: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    &C
}

/// Count a record that could not be decoded and was skipped (its key is logged by the
/// caller; the metric line carries it too).
pub fn unreadable(key: &str) {
    unreadable_count().fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(stack) = metrics_stack() {
        let fields = serde_json::json!({ "Stack": stack, "key": key });
        let line = emf(
            tessera_core::Millis::now().0,
            serde_json::json!([["Stack"]]),
            UNREADABLE_METRIC,
            fields,
        );
        println!("{line}");
    }
}

/// Records this process could not read and skipped.
pub fn unreadable_total() -> u64 {
    unreadable_count().load(std::sync::atomic::Ordering::Relaxed)
}

/// Tasks ended in this process: (task kind, state, count), sorted.
pub fn snapshot() -> Vec<(String, String, u64)> {
    counts()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|((k, s), n)| (k.clone(), s.clone(), *n))
        .collect()
}

/// The embedded-metric-format line for a task that ended failed or dead.
pub fn emf_line(task: &Task, stack: &str, at_ms: i64) -> String {
    emf(
        at_ms,
        serde_json::json!([["Stack"], ["Stack", "TaskKind"]]),
        FAILED_METRIC,
        serde_json::json!({
            "Stack": stack,
            "TaskKind": task.kind,
            "state": task.state.as_str(),
            "task_id": task.id,
            "job_id": task.job_id,
            "attempts": task.attempts,
            "error": task.last_error.as_ref().map(|e| e.message.as_str()),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_failure_is_one_embedded_metric_line_with_its_ids() {
        let mut t: Task = serde_json::from_value(serde_json::json!({
            "id": tessera_core::TaskId::new(), "job_id": tessera_core::JobId::new(),
            "name": "face_process", "kind": "photo.face_process", "state": TaskState::Dead,
            "payload": null, "attempts": 5, "max_attempts": 5, "epoch": 5, "lease": null,
            "heartbeat_at": null, "not_before": 0, "resource_class": "small",
            "last_error": null, "result": null, "cache_key": null, "deps_pending": [],
            "dependents": [], "created_at": 0, "finished_at": null,
        }))
        .unwrap_or_else(|e| panic!("a minimal task: {e}"));
        t.last_error = Some(tessera_core::task::TaskFailure {
            class: tessera_core::ErrorClass::Transient,
            message: "attempt ceiling 5 reached".into(),
            attempt: 5,
            at: tessera_core::Millis(1),
        });
        let line: serde_json::Value =
            serde_json::from_str(&emf_line(&t, "prod", 1_700_000_000_000)).unwrap();
        let aws = &line["_aws"];
        assert_eq!(aws["Timestamp"], 1_700_000_000_000i64);
        let m = &aws["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], NAMESPACE);
        assert_eq!(m["Metrics"][0]["Name"], FAILED_METRIC);
        // Every dimension named is a top-level field, and so is the metric's value.
        for set in m["Dimensions"].as_array().unwrap() {
            for d in set.as_array().unwrap() {
                assert!(line[d.as_str().unwrap()].is_string(), "{d}");
            }
        }
        assert_eq!(line[FAILED_METRIC], 1);
        assert_eq!(line["TaskKind"], "photo.face_process");
        assert_eq!(line["task_id"], t.id.to_string());
        assert_eq!(line["error"], "attempt ceiling 5 reached");
    }
}
