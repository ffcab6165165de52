//! Errors of engine operations (submit, claim, cancel, resume, reap).

use tessera_core::ports::{
    EventLogError, NoticeBusError, ObjectStoreError, QueueError, StoreError,
};
use tessera_core::{Classify, ErrorClass, JobId, TaskId};

/// What can go wrong in the engine itself (not in a task's handler).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The event log failed.
    #[error(transparent)]
    Events(#[from] EventLogError),
    /// The object store failed.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
    /// The notice bus failed.
    #[error(transparent)]
    Bus(#[from] NoticeBusError),
    /// No such job.
    #[error("job {0} does not exist; `tessera jobs list` shows the jobs in this state directory")]
    NoSuchJob(JobId),
    /// No such task.
    #[error("task {0} does not exist")]
    NoSuchTask(TaskId),
    /// The submitted plan is not a valid DAG.
    #[error("invalid job plan: {0}")]
    InvalidPlan(String),
    /// The request does not fit the job's state.
    #[error("{0}")]
    Refused(String),
}

impl Classify for EngineError {
    fn class(&self) -> ErrorClass {
        match self {
            EngineError::Store(e) => e.class(),
            EngineError::Queue(e) => e.class(),
            EngineError::Events(e) => e.class(),
            EngineError::Objects(e) => e.class(),
            EngineError::Bus(e) => e.class(),
            EngineError::NoSuchJob(_) | EngineError::NoSuchTask(_) => ErrorClass::Poison,
            EngineError::InvalidPlan(_) | EngineError::Refused(_) => ErrorClass::Permanent,
        }
    }
}
