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
pub use event_log::{EventLog, EventLogError, Fence, StagedEvent};
pub use notice_bus::{NoticeBus, NoticeBusError};
pub use object_store::{ObjectMeta, ObjectStore, ObjectStoreError};
pub use queue::{Delivery, Queue, QueueError, QueueSettings, Turn};
pub use state_store::{
    Condition, Index, Item, ItemKey, MAX_TRANSACTION_ITEMS, Page, Query, StateStore, StoreError,
    Write, validate_transaction,
};
