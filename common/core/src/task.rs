//! Tasks: the unit of work the engine claims, leases, runs and retries.
//!
//! The fields here are the durable truth about a task. The transitions between states
//! are pure functions in `tessera_engine::lifecycle`, so they can be property-tested
//! without a store.

use crate::clock::Millis;
use crate::error::ErrorClass;
use crate::ids::{JobId, TaskId, TenantId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// Where a task is in its life.
///
/// ```text
/// waiting ──deps done──▶ queued ──claim──▶ running ──▶ succeeded
///                          ▲                 │ ├──▶ failed    (permanent)
///                          └──retry/reap─────┘ ├──▶ dead      (poison, or ceiling reached)
///                                              └──▶ cancelled
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Some dependencies have not succeeded yet.
    Waiting,
    /// Runnable once `not_before` has passed.
    Queued,
    /// Claimed by a worker that holds a lease.
    Running,
    /// Done; `result` holds its output.
    Succeeded,
    /// Failed for good with a permanent error.
    Failed,
    /// Archived: poison, or the attempt ceiling was reached.
    Dead,
    /// Stopped on request.
    Cancelled,
}

impl TaskState {
    /// True for states no transition leaves (except an explicit resume).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Dead | TaskState::Cancelled
        )
    }

    /// The stored spelling, as used in conditions and index keys.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Dead => "dead",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much memory and time a task may need, from smallest to largest.
///
/// A task that fails with a *resource* error is retried one class up; a task that fails
/// that way in the largest class is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ResourceClass {
    /// Fits in a small Lambda: under 512 MiB, seconds.
    Small,
    /// Fits in a large Lambda: under 3 GiB, minutes.
    Medium,
    /// Needs a container: under 15,000 MiB (what the CPU job definition gives).
    Large,
    /// Needs a big container (GPU on AWS): under 60,000 MiB (the GPU job definition's).
    Xlarge,
}

impl ResourceClass {
    /// The next larger class, if any.
    pub fn next(self) -> Option<ResourceClass> {
        match self {
            ResourceClass::Small => Some(ResourceClass::Medium),
            ResourceClass::Medium => Some(ResourceClass::Large),
            ResourceClass::Large => Some(ResourceClass::Xlarge),
            ResourceClass::Xlarge => None,
        }
    }

    /// The memory this class may use, in bytes; what the memory gate reserves for a task
    /// of this class when no better estimate is given. The container classes are what
    /// their Batch job definitions give a container (`infra/template.yaml`; a test holds
    /// the two equal), less than the instance's memory so that ECS can place the job.
    pub fn memory_bytes(self) -> u64 {
        const MIB: u64 = 1024 * 1024;
        match self {
            ResourceClass::Small => 512 * MIB,
            ResourceClass::Medium => 3 * 1024 * MIB,
            ResourceClass::Large => 15_000 * MIB,
            ResourceClass::Xlarge => 60_000 * MIB,
        }
    }

    /// The CPU-seconds a task of this class may need: the light classes run in a Lambda
    /// function (about 1.7 vCPU at 3 GB, killed at 15 minutes), so a stage that would run
    /// longer must start in a container class whatever its memory. 600 CPU-s is about
    /// six minutes there, leaving room for COLMAP's single-threaded phases and for moving
    /// checkpoints in and out. `None`: no limit.
    pub fn cpu_seconds(self) -> Option<f64> {
        match self {
            ResourceClass::Small => Some(120.0),
            ResourceClass::Medium => Some(600.0),
            ResourceClass::Large | ResourceClass::Xlarge => None,
        }
    }

    /// Heavy classes go through the memory gate locally and to Batch on AWS.
    pub fn is_heavy(self) -> bool {
        self >= ResourceClass::Large
    }
}

/// The right to run a task until `expires_at`, held by `owner`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The worker holding the lease (host, pid and a random suffix).
    pub owner: String,
    /// When the lease lapses unless renewed by a heartbeat.
    pub expires_at: Millis,
}

/// A classified failure, kept on the task for people and for the retry decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailure {
    /// What the engine did with it.
    pub class: ErrorClass,
    /// What went wrong and, where possible, what to do about it.
    pub message: String,
    /// The attempt that failed.
    pub attempt: u32,
    /// When.
    pub at: Millis,
}

/// The reaper's re-offers of a queued task that no claim has taken yet.
///
/// A queued task waiting behind a long backlog looks exactly like one whose message was
/// lost; offering it again on every reaper pass would add one message per waiting task
/// per pass, and the backlog would grow faster than workers drain it. Each re-offer
/// therefore doubles the wait before the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reoffered {
    /// Re-offers so far.
    pub times: u32,
    /// The reaper's grace period counts from here (its due-index time while queued).
    pub due_from: Millis,
}

/// One task of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The task's id.
    pub id: TaskId,
    /// The job it belongs to.
    pub job_id: JobId,
    /// Which handler runs it (`demo.checksum`, `sfm.extract`, …).
    pub kind: String,
    /// The tenant of its job: the queue lane it waits in, so claims take turns between
    /// tenants. `None` on tasks planned before lanes (they wait in the no-tenant lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantId>,
    /// Its job's priority: higher is offered first within the tenant's lane.
    #[serde(default)]
    pub priority: i32,
    /// A short name unique within the job (`extract`, `checksum-3`), for people.
    pub name: String,
    /// The handler's input.
    pub payload: serde_json::Value,
    /// Current state.
    pub state: TaskState,
    /// Claims so far; never above `max_attempts`.
    pub attempts: u32,
    /// The attempt ceiling.
    pub max_attempts: u32,
    /// Runs that ended because the state they decided from moved on as they committed
    /// (their handler declared which write says so): each ran again at once with its
    /// attempt given back, up to the engine's limit. A task is not failing when the
    /// world changes under it, and its attempts are for failures.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moved_on: u32,
    /// The fencing epoch: increases by one on every claim. Every write a worker makes
    /// is conditioned on it, so a worker whose lease was taken over cannot write.
    pub epoch: u64,
    /// The current lease while running.
    pub lease: Option<Lease>,
    /// The last heartbeat.
    pub heartbeat_at: Option<Millis>,
    /// Earliest time the task may be claimed (back-off).
    pub not_before: Millis,
    /// Memory/time class it runs in now.
    pub resource_class: ResourceClass,
    /// The memory this task is expected to need, when a model estimated it; else the
    /// class's budget applies.
    #[serde(default)]
    pub memory_estimate: Option<u64>,
    /// The last classified failure.
    pub last_error: Option<TaskFailure>,
    /// The handler's output once succeeded.
    pub result: Option<serde_json::Value>,
    /// When set, a task whose key already succeeded completes at once with that result.
    pub cache_key: Option<String>,
    /// Every dependency, as planned (never changes).
    #[serde(default)]
    pub depends_on: Vec<TaskId>,
    /// Dependencies that have not yet succeeded; the task is `waiting` while non-empty.
    pub deps_pending: BTreeSet<TaskId>,
    /// Tasks that depend on this one.
    pub dependents: Vec<TaskId>,
    /// Dependents not yet told how this task ended. Non-empty only between the
    /// success write and the last follow-up write of a fan-out larger than one
    /// transaction; the reaper finishes it if the worker died in between.
    #[serde(default)]
    pub advance_pending: Vec<TaskId>,
    /// Set by the reaper each time it offers this queued task again because no claim
    /// came: its message may have been lost, or may only be waiting behind a backlog.
    /// Cleared by the next claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reoffered: Option<Reoffered>,
    /// Set in the terminal commit of a task whose end may be news to a webhook (its
    /// tenant has webhooks, and the task may have ended its job or names a photo); the
    /// engine raises the notices and clears it in one transaction with the deliveries,
    /// and the reaper does it for a worker that died in between (the task stays in the
    /// `advance` due index while it is set).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notify_pending: bool,
    /// Set when the task ended without the compensations its handler gave, because one
    /// of their conditions no longer held (what they would undo is gone, or now another
    /// run's): its end undid nothing, and its notices must not say it did.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compensation_refused: bool,
    /// When the task was created.
    pub created_at: Millis,
    /// When the task reached a terminal state.
    pub finished_at: Option<Millis>,
    /// The store's revision of this record, for optimistic concurrency. Not part of the
    /// stored body: the store owns it.
    #[serde(skip)]
    pub rev: u64,
}

impl Task {
    /// Why it ended without success, as its last error says, or `otherwise`.
    pub fn failure_message(&self, otherwise: &str) -> String {
        self.last_error
            .as_ref()
            .map_or_else(|| otherwise.to_string(), |e| e.message.clone())
    }

    /// The time that matters for the reaper: when a queued task becomes due, or when a
    /// running task's lease lapses. `None` for states the reaper never looks at.
    pub fn due_at(&self) -> Option<Millis> {
        match self.state {
            TaskState::Queued => Some(self.reoffered.map_or(self.not_before, |r| r.due_from)),
            TaskState::Running => self.lease.as_ref().map(|l| l.expires_at),
            s if s.is_terminal() && (!self.advance_pending.is_empty() || self.notify_pending) => {
                self.finished_at
            }
            _ => None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
