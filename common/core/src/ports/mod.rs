//! Ports: the traits business logic talks to. Adapters implement them for one machine
//! (`tessera-local`) and for AWS (`tessera-aws`); the conformance suite
//! (`tessera-conformance`) holds every implementation to the same behaviour.
//!
//! They are shaped after what DynamoDB, S3 and SQS can do, so the embedded adapters
//! cannot offer anything the AWS ones could not: single-item conditional writes,
//! transactions of at most [`MAX_TRANSACTION_ITEMS`] items, no joins, paginated reads.

pub mod compute;
pub mod event_log;
pub mod notice_bus;
pub mod object_store;
pub mod queue;
pub mod state_store;

pub use compute::{
    Compute, ComputeError, ComputePermit, ProcessReport, ProcessSpec, ResourceDemand,
};
pub use event_log::{EventLog, EventLogError, Fence, StagedEvent, StagedEvents};
pub use notice_bus::{NoticeBus, NoticeBusError};
pub use object_store::{ObjectMeta, ObjectStore, ObjectStoreError};
pub use queue::{Delivery, Queue, QueueError, QueueSettings, Turn};
pub use state_store::{
    Condition, Index, Item, ItemKey, MAX_TRANSACTION_ITEMS, Page, Query, StateStore, StoreError,
    Write, validate_transaction,
};

/// The adapters a deployment runs on, one of each port: what the engine, the handlers
/// and the routes are given. Built once per process by its adapters' crate
/// (`tessera_local::embedded` on one machine, `tessera-lambda` on AWS).
#[derive(Clone)]
pub struct Ports {
    /// State: tasks, jobs, cache entries, anything a handler stores.
    pub store: std::sync::Arc<dyn StateStore>,
    /// "Task X may be runnable" messages.
    pub queue: std::sync::Arc<dyn Queue>,
    /// Progress events.
    pub events: std::sync::Arc<dyn EventLog>,
    /// Blobs.
    pub objects: std::sync::Arc<dyn ObjectStore>,
    /// Admission and subprocesses.
    pub compute: std::sync::Arc<dyn Compute>,
}
