//! Jobs: a submitted unit of work made of tasks.
//!
//! A job's status is *derived* from counters that task transitions bump atomically in
//! the same transaction, so finishing a task never has to read-modify-write the job
//! (which would make parallel tasks of one job contend).

use crate::clock::Millis;
use crate::ids::{JobId, ProjectId, TenantId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a cancel was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelMode {
    /// Running tasks stop at their next phase boundary; their work so far is kept.
    Cooperative,
    /// Running tasks lose their lease now and their subprocesses are killed.
    Force,
}

/// A cancel request recorded on a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Cooperative or forced.
    pub mode: CancelMode,
    /// When it was asked for.
    pub at: Millis,
}

/// The job's derived status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Accepted; no task has started.
    Queued,
    /// At least one task started and not every task is finished.
    Running,
    /// Every task succeeded.
    Succeeded,
    /// A task failed or died; nothing more will run unless resumed.
    Failed,
    /// Cancelled on request.
    Cancelled,
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        })
    }
}

/// Counters bumped atomically by task transitions. The names are the stored field names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounters {
    /// Tasks that have been claimed at least once.
    pub started: i64,
    /// Tasks that succeeded.
    pub succeeded: i64,
    /// Tasks that failed permanently.
    pub failed: i64,
    /// Tasks archived as dead.
    pub dead: i64,
    /// Tasks cancelled.
    pub cancelled: i64,
    /// Tasks put back in line by a resume or a rerun, ever: a job that ends again after
    /// one has ended anew (its notices get new ids).
    #[serde(default)]
    pub requeued: i64,
}

/// A submitted job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The job's id.
    pub id: JobId,
    /// Its owner.
    pub tenant: TenantId,
    /// The project it belongs to, when it has one.
    pub project: Option<ProjectId>,
    /// What kind of job (`demo`, `reconstruct`, `photo`, `bench`).
    pub kind: String,
    /// A short human label.
    pub label: String,
    /// The validated spec it was submitted with.
    pub spec: serde_json::Value,
    /// SHA-256 of the canonical spec (priority excluded): identical work, identical
    /// fingerprint, one job.
    pub fingerprint: String,
    /// Higher runs first where a queue supports it; not part of the fingerprint.
    pub priority: i32,
    /// How many tasks the job has.
    pub tasks_total: i64,
    /// False until every task record has been written; an unsealed job is finished by
    /// whoever submits the same fingerprint again.
    pub sealed: bool,
    /// Counters bumped by task transitions.
    #[serde(flatten)]
    pub counters: JobCounters,
    /// A pending cancel request.
    pub cancel: Option<CancelRequest>,
    /// When it was submitted.
    pub created_at: Millis,
    /// The store's revision (not stored in the body).
    #[serde(skip)]
    pub rev: u64,
}

impl Job {
    /// The status these counters and the cancel flag imply.
    pub fn status(&self) -> JobStatus {
        let c = &self.counters;
        let finished = c.succeeded + c.failed + c.dead + c.cancelled;
        if c.failed + c.dead > 0 {
            JobStatus::Failed
        } else if c.cancelled > 0 || (self.cancel.is_some() && finished >= self.tasks_total) {
            JobStatus::Cancelled
        } else if self.sealed && c.succeeded >= self.tasks_total {
            JobStatus::Succeeded
        } else if c.started > 0 || finished > 0 {
            JobStatus::Running
        } else {
            JobStatus::Queued
        }
    }

    /// Tasks in a terminal state.
    pub fn finished(&self) -> i64 {
        let c = &self.counters;
        c.succeeded + c.failed + c.dead + c.cancelled
    }

    /// Whether the job is over: every task record was written and every task has
    /// ended. Only then has the job written every event it will write (until a resume
    /// puts tasks back in line), nothing of it runs, and what it made may be read or
    /// deleted. A failed or cancelled status alone does not say so: the other tasks of
    /// a job whose first task failed may still be running.
    pub fn is_over(&self) -> bool {
        self.sealed && self.finished() >= self.tasks_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(total: i64, sealed: bool, counters: JobCounters) -> Job {
        Job {
            id: JobId::new(),
            tenant: TenantId::local(),
            project: None,
            kind: "photo".into(),
            label: "l".into(),
            spec: serde_json::json!({}),
            fingerprint: "f".into(),
            priority: 0,
            tasks_total: total,
            sealed,
            counters,
            cancel: None,
            created_at: Millis(0),
            rev: 0,
        }
    }

    #[test]
    fn a_job_is_over_only_when_every_task_was_written_and_has_ended() {
        let c = |succeeded, failed, cancelled, started| JobCounters {
            started,
            succeeded,
            failed,
            cancelled,
            ..JobCounters::default()
        };
        // Its tasks all ended, but not every record is written yet.
        assert!(!job(2, false, c(2, 0, 0, 2)).is_over());
        // Failed, with another task still running.
        let failing = job(3, true, c(1, 1, 0, 3));
        assert_eq!(failing.status(), JobStatus::Failed);
        assert!(!failing.is_over());
        // Every task ended, however.
        assert!(job(3, true, c(1, 1, 1, 3)).is_over());
        assert!(job(1, true, c(1, 0, 0, 1)).is_over());
        // A sealed job of no tasks has nothing left to do.
        assert!(job(0, true, c(0, 0, 0, 0)).is_over());
    }
}
