//! The task state machine as pure functions: given a task and a time, what the next
//! version of the task is. The engine turns each decision into one conditional write;
//! the property tests below hold these functions to the invariants (epochs only grow,
//! attempts never exceed the ceiling, a terminal task is never claimed, a resource
//! failure never retries in the same class).

use crate::retry::RetryPolicy;
use std::time::Duration;
use tessera_core::task::{Lease, Task, TaskFailure, TaskState};
use tessera_core::{ErrorClass, Millis};

/// What a claim attempt should do.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimDecision {
    /// Write this (running, epoch + 1, attempts + 1, leased) version.
    Claim(Task),
    /// The lease of a worker presumed dead expired on the final attempt: write this dead
    /// version.
    Exhausted(Task),
    /// Queued but backing off until then.
    NotDue(Millis),
    /// Running under a valid lease until then.
    Busy(Millis),
    /// Dependencies are not done.
    Waiting,
    /// Already in a terminal state.
    Finished,
}

/// Decide a claim by `owner` at `now`. Claimable: queued and due, or running with an
/// expired lease (its worker is presumed dead; that attempt counts).
pub fn decide_claim(task: &Task, now: Millis, owner: &str, lease: Duration) -> ClaimDecision {
    match task.state {
        TaskState::Waiting => ClaimDecision::Waiting,
        s if s.is_terminal() => ClaimDecision::Finished,
        TaskState::Queued if task.not_before > now => ClaimDecision::NotDue(task.not_before),
        TaskState::Running => {
            let expires = task.lease.as_ref().map_or(Millis(0), |l| l.expires_at);
            if expires > now {
                return ClaimDecision::Busy(expires);
            }
            let back = lapsed(task, now);
            if back.state == TaskState::Dead {
                ClaimDecision::Exhausted(back)
            } else {
                ClaimDecision::Claim(claimed(&back, now, owner, lease))
            }
        }
        _ => {
            if task.attempts >= task.max_attempts {
                let mut dead = task.clone();
                dead.state = TaskState::Dead;
                dead.finished_at = Some(now);
                dead.last_error = Some(TaskFailure {
                    class: ErrorClass::Transient,
                    message: format!("attempt ceiling {} reached", task.max_attempts),
                    attempt: task.attempts,
                    at: now,
                });
                return ClaimDecision::Exhausted(dead);
            }
            ClaimDecision::Claim(claimed(task, now, owner, lease))
        }
    }
}

/// The version of a running task whose lease expired (its worker is presumed dead):
/// queued again with that attempt counted, or dead when it was the final attempt.
pub fn lapsed(task: &Task, now: Millis) -> Task {
    let previous = task.lease.as_ref().map_or("?", |l| l.owner.as_str());
    let message = format!(
        "lease of {previous} expired at epoch {} (worker presumed dead)",
        task.epoch
    );
    let mut t = task.clone();
    t.lease = None;
    if task.attempts >= task.max_attempts {
        t.state = TaskState::Dead;
        t.finished_at = Some(now);
        t.last_error = Some(TaskFailure {
            class: ErrorClass::Transient,
            message: format!("{message}; attempt ceiling {} reached", task.max_attempts),
            attempt: task.attempts,
            at: now,
        });
    } else {
        t.state = TaskState::Queued;
        t.not_before = now;
        t.last_error = Some(TaskFailure {
            class: ErrorClass::Transient,
            message,
            attempt: task.attempts,
            at: now,
        });
    }
    t
}

fn claimed(task: &Task, now: Millis, owner: &str, lease: Duration) -> Task {
    let mut t = task.clone();
    t.state = TaskState::Running;
    t.attempts += 1;
    t.epoch += 1;
    t.lease = Some(Lease {
        owner: owner.to_string(),
        expires_at: now.plus(lease),
    });
    t.heartbeat_at = Some(now);
    t.reoffered = None;
    t
}

/// The version of a queued task that the reaper offers again at `now` because no claim
/// took it within `grace` of its due time: the next look comes after `grace` times 2,
/// 4, 8, … (at most 32), so a task waiting behind a backlog gets a handful of duplicate
/// messages, not one per reaper pass.
pub fn reoffered(task: &Task, now: Millis, grace: Duration) -> Task {
    let times = task.reoffered.map_or(0, |r| r.times) + 1;
    let wait = grace * (1u32 << times.min(5));
    let mut t = task.clone();
    // The reaper looks again once `due_from + grace` has passed.
    t.reoffered = Some(tessera_core::task::Reoffered {
        times,
        due_from: now.plus(wait.saturating_sub(grace)),
    });
    t
}

/// The heartbeat's version of a running task: the lease renewed from `now`.
pub fn renewed(task: &Task, now: Millis, lease: Duration) -> Task {
    let mut t = task.clone();
    if let Some(l) = &mut t.lease {
        l.expires_at = now.plus(lease);
    }
    t.heartbeat_at = Some(now);
    t
}

/// The succeeded version of a running task.
pub fn succeeded(task: &Task, result: serde_json::Value, now: Millis) -> Task {
    let mut t = task.clone();
    t.state = TaskState::Succeeded;
    t.result = Some(result);
    t.lease = None;
    t.finished_at = Some(now);
    t.advance_pending = t.dependents.clone();
    t
}

/// How many runs of one task in a row may end with what they decided from moved on
/// before such an end is an ordinary transient failure: a state that never stops moving
/// must not keep a task running for ever.
pub const MOVED_ON_LIMIT: u32 = 20;

/// The version of a running task whose run found, as it committed, that the state it
/// decided from had moved on (the write its handler names in `TaskOutput::moved_on`
/// conflicted): queued again after `delay` with its attempt given back, since nothing
/// failed and a fresh run decides from the new state. The delay is a retry's back-off
/// all the same: what moved the state often has work of its own on the same item (an
/// opt-out's re-decision of the photo), and a run started at once races it. `None` once
/// [`MOVED_ON_LIMIT`] runs ended so: the caller then records a transient failure, which
/// spends the attempt.
pub fn moved_on(task: &Task, message: &str, now: Millis, delay: Duration) -> Option<Task> {
    if task.moved_on >= MOVED_ON_LIMIT || task.state != TaskState::Running {
        return None;
    }
    let mut t = task.clone();
    t.lease = None;
    t.state = TaskState::Queued;
    t.not_before = now.plus(delay);
    t.attempts = task.attempts.saturating_sub(1);
    t.moved_on += 1;
    t.last_error = Some(TaskFailure {
        class: ErrorClass::Transient,
        message: message.to_string(),
        attempt: task.attempts,
        at: now,
    });
    Some(t)
}

/// The version of a running task after a classified failure. `jitter` in [0, 1).
pub fn failed(
    task: &Task,
    class: ErrorClass,
    message: &str,
    now: Millis,
    policy: &RetryPolicy,
    jitter: f64,
) -> Task {
    let mut t = task.clone();
    t.lease = None;
    let mut failure = TaskFailure {
        class,
        message: message.to_string(),
        attempt: task.attempts,
        at: now,
    };
    let exhausted = task.attempts >= task.max_attempts;
    let terminal = |t: &mut Task, state| {
        t.state = state;
        t.finished_at = Some(now);
    };
    match class {
        ErrorClass::Transient if !exhausted => {
            t.state = TaskState::Queued;
            t.not_before = now.plus(policy.delay(task.attempts, jitter));
        }
        ErrorClass::Resource if !exhausted => match task.resource_class.next() {
            Some(bigger) => {
                t.state = TaskState::Queued;
                t.not_before = now;
                t.resource_class = bigger;
                t.memory_estimate = None;
            }
            None => {
                failure.message =
                    format!("{message}; it already ran in the largest resource class");
                terminal(&mut t, TaskState::Dead);
            }
        },
        ErrorClass::Transient | ErrorClass::Resource => {
            failure.message = format!("{message}; attempt ceiling {} reached", task.max_attempts);
            terminal(&mut t, TaskState::Dead);
        }
        ErrorClass::Permanent => terminal(&mut t, TaskState::Failed),
        ErrorClass::Poison => terminal(&mut t, TaskState::Dead),
        ErrorClass::Cancelled => terminal(&mut t, TaskState::Cancelled),
    }
    t.last_error = Some(failure);
    t
}

/// The cancelled version of a task that has not finished.
pub fn cancelled(task: &Task, now: Millis, why: &str) -> Task {
    let mut t = task.clone();
    t.state = TaskState::Cancelled;
    t.lease = None;
    t.finished_at = Some(now);
    t.last_error = Some(TaskFailure {
        class: ErrorClass::Cancelled,
        message: why.to_string(),
        attempt: task.attempts,
        at: now,
    });
    t
}

/// The version of a failed, dead or cancelled task that a resume puts back in line:
/// attempts start over; it waits again if some dependency has not succeeded.
pub fn resumed(task: &Task, now: Millis) -> Task {
    let mut t = task.clone();
    t.state = if t.deps_pending.is_empty() {
        TaskState::Queued
    } else {
        TaskState::Waiting
    };
    t.attempts = 0;
    t.not_before = now;
    t.lease = None;
    t.finished_at = None;
    t.advance_pending.clear();
    // A fresh offer: a count left from before the task ended would hide it from the
    // reaper for up to 31 grace periods.
    t.reoffered = None;
    // Its next end raises its own notices; a raise of the last end that is still
    // running finds the task changed and raises without clearing anything.
    t.notify_pending = false;
    t
}

/// The counter on the job that a task in `state` is counted under, if any.
pub fn job_counter(state: TaskState) -> Option<&'static str> {
    match state {
        TaskState::Succeeded => Some("succeeded"),
        TaskState::Failed => Some("failed"),
        TaskState::Dead => Some("dead"),
        TaskState::Cancelled => Some("cancelled"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use tessera_core::task::ResourceClass;
    use tessera_core::{JobId, TaskId};

    fn task(max_attempts: u32) -> Task {
        Task {
            id: TaskId::new(),
            job_id: JobId::new(),
            kind: "t".into(),
            tenant: None,
            priority: 0,
            name: "t".into(),
            payload: serde_json::Value::Null,
            state: TaskState::Queued,
            attempts: 0,
            max_attempts,
            moved_on: 0,
            epoch: 0,
            lease: None,
            heartbeat_at: None,
            not_before: Millis(0),
            resource_class: ResourceClass::Small,
            memory_estimate: None,
            last_error: None,
            result: None,
            cache_key: None,
            deps_pending: BTreeSet::new(),
            depends_on: Vec::new(),
            dependents: Vec::new(),
            advance_pending: Vec::new(),
            reoffered: None,
            notify_pending: false,
            compensation_refused: false,
            created_at: Millis(0),
            finished_at: None,
            rev: 1,
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Claim { advance_ms: u64 },
        Heartbeat,
        Succeed,
        Fail { class: ErrorClass, jitter: f64 },
        Cancel,
        Resume,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..5000).prop_map(|advance_ms| Step::Claim { advance_ms }),
            Just(Step::Heartbeat),
            Just(Step::Succeed),
            (
                prop_oneof![
                    Just(ErrorClass::Transient),
                    Just(ErrorClass::Resource),
                    Just(ErrorClass::Permanent),
                    Just(ErrorClass::Poison),
                    Just(ErrorClass::Cancelled)
                ],
                0.0f64..1.0
            )
                .prop_map(|(class, jitter)| Step::Fail { class, jitter }),
            Just(Step::Cancel),
            Just(Step::Resume),
        ]
    }

    proptest! {
        /// Random walks through the state machine keep every invariant the engine
        /// relies on.
        #[test]
        fn invariants_hold_on_every_path(max in 1u32..6, steps in proptest::collection::vec(step(), 1..60)) {
            let lease = Duration::from_millis(1000);
            let policy = RetryPolicy { base: Duration::from_millis(10), cap: Duration::from_millis(100) };
            let mut now = Millis(1_000_000);
            let mut t = task(max);
            for s in steps {
                let before = t.clone();
                match s {
                    Step::Claim { advance_ms } => {
                        now = now.plus(Duration::from_millis(advance_ms));
                        match decide_claim(&t, now, "w", lease) {
                            ClaimDecision::Claim(n) => {
                                prop_assert!(before.state == TaskState::Queued || before.state == TaskState::Running);
                                prop_assert_eq!(n.epoch, before.epoch + 1, "every claim bumps the epoch");
                                prop_assert!(n.attempts <= n.max_attempts, "attempts never exceed the ceiling");
                                prop_assert!(n.lease.as_ref().unwrap().expires_at > now);
                                if before.state == TaskState::Running {
                                    prop_assert!(before.lease.as_ref().unwrap().expires_at <= now, "a valid lease is never taken over");
                                }
                                t = n;
                            }
                            ClaimDecision::Exhausted(n) => {
                                prop_assert!(before.attempts >= before.max_attempts);
                                prop_assert_eq!(n.state, TaskState::Dead);
                                t = n;
                            }
                            ClaimDecision::Finished => prop_assert!(before.state.is_terminal(), "terminal tasks are never claimed"),
                            ClaimDecision::Busy(until) => prop_assert!(until > now),
                            ClaimDecision::NotDue(at) => prop_assert!(at > now),
                            ClaimDecision::Waiting => prop_assert_eq!(before.state, TaskState::Waiting),
                        }
                    }
                    Step::Heartbeat if t.state == TaskState::Running => {
                        t = renewed(&t, now, lease);
                        prop_assert_eq!(t.epoch, before.epoch, "a heartbeat never changes the epoch");
                    }
                    Step::Succeed if t.state == TaskState::Running => {
                        t = succeeded(&t, serde_json::json!(1), now);
                        prop_assert!(t.lease.is_none());
                    }
                    Step::Fail { class, jitter } if t.state == TaskState::Running => {
                        t = failed(&t, class, "boom", now, &policy, jitter);
                        prop_assert!(t.lease.is_none(), "a failed attempt releases its lease");
                        prop_assert!(t.last_error.is_some());
                        match class {
                            ErrorClass::Resource if t.state == TaskState::Queued => {
                                prop_assert!(t.resource_class > before.resource_class, "resource failures never retry unchanged");
                            }
                            ErrorClass::Transient if t.state == TaskState::Queued => {
                                prop_assert!(t.not_before > now, "transient retries back off");
                            }
                            ErrorClass::Permanent => prop_assert_eq!(t.state, TaskState::Failed),
                            ErrorClass::Poison => prop_assert_eq!(t.state, TaskState::Dead),
                            ErrorClass::Cancelled => prop_assert_eq!(t.state, TaskState::Cancelled),
                            _ => prop_assert_eq!(t.state, TaskState::Dead),
                        }
                        if t.state == TaskState::Queued {
                            prop_assert!(before.attempts < before.max_attempts);
                        }
                    }
                    Step::Cancel if !t.state.is_terminal() => {
                        t = cancelled(&t, now, "asked");
                    }
                    Step::Resume if matches!(t.state, TaskState::Failed | TaskState::Dead | TaskState::Cancelled) => {
                        t = resumed(&t, now);
                        prop_assert_eq!(t.attempts, 0);
                        prop_assert_eq!(t.epoch, before.epoch, "a resume keeps the epoch so old workers stay fenced");
                    }
                    _ => {}
                }
                prop_assert!(t.epoch >= before.epoch, "epochs never decrease");
                prop_assert!(t.attempts <= t.max_attempts, "attempts never exceed the ceiling");
                prop_assert_eq!(t.state == TaskState::Running, t.lease.is_some(), "exactly running tasks hold a lease");
            }
        }
    }

    /// Each re-offer doubles the wait, and a task that ends and is resumed starts over:
    /// a count carried through a cancel would hide the resumed task from the reaper.
    #[test]
    fn re_offers_back_off_and_a_resumed_task_starts_over() {
        let grace = Duration::from_millis(1000);
        let mut t = task(3);
        let mut looks = Vec::new();
        for now in [1_000, 3_000, 7_000] {
            t = reoffered(&t, Millis(now), grace);
            looks.push(t.due_at().unwrap().0 + 1000);
        }
        assert_eq!(looks, vec![3_000, 7_000, 15_000]);
        let back = resumed(&cancelled(&t, Millis(7_100), "cancel"), Millis(7_200));
        assert_eq!(back.state, TaskState::Queued);
        assert_eq!(back.reoffered, None);
        assert_eq!(back.due_at(), Some(Millis(7_200)));
        match decide_claim(&t, Millis(7_300), "a", grace) {
            ClaimDecision::Claim(c) => assert_eq!(c.reoffered, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_expired_lease_on_the_last_attempt_is_dead_with_a_reason() {
        let mut t = task(1);
        t = match decide_claim(&t, Millis(0), "a", Duration::from_millis(10)) {
            ClaimDecision::Claim(t) => t,
            other => panic!("{other:?}"),
        };
        match decide_claim(&t, Millis(11), "b", Duration::from_millis(10)) {
            ClaimDecision::Exhausted(d) => {
                assert_eq!(d.state, TaskState::Dead);
                assert!(d.last_error.unwrap().message.contains("presumed dead"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_largest_class_cannot_grow() {
        let mut t = task(5);
        t.resource_class = ResourceClass::Xlarge;
        t = match decide_claim(&t, Millis(0), "a", Duration::from_millis(10)) {
            ClaimDecision::Claim(t) => t,
            other => panic!("{other:?}"),
        };
        let f = failed(
            &t,
            ErrorClass::Resource,
            "OOM",
            Millis(1),
            &RetryPolicy::default(),
            0.5,
        );
        assert_eq!(f.state, TaskState::Dead);
        assert!(
            f.last_error
                .unwrap()
                .message
                .contains("largest resource class")
        );
    }

    #[test]
    fn a_run_whose_state_moved_on_gives_its_attempt_back_up_to_the_limit() {
        let mut t = task(2);
        t.state = TaskState::Running;
        t.attempts = 2;
        t.epoch = 7;
        let now = Millis(1_000);
        let delay = Duration::from_millis(300);
        let next = moved_on(&t, "moved", now, delay).expect("under the limit");
        assert_eq!(
            (
                next.state,
                next.attempts,
                next.moved_on,
                next.not_before,
                next.epoch
            ),
            (TaskState::Queued, 1, 1, now.plus(delay), 7)
        );
        assert!(next.lease.is_none());
        t.moved_on = MOVED_ON_LIMIT;
        assert!(
            moved_on(&t, "moved", now, delay).is_none(),
            "past the limit"
        );
        t.moved_on = 0;
        t.state = TaskState::Queued;
        assert!(
            moved_on(&t, "moved", now, delay).is_none(),
            "only a running task"
        );
    }
}
