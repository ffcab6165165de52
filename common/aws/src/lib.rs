//! AWS adapters for Tessera's ports.
//!
//! - [`DynamoStateStore`]: the state store (and, through the generic
//!   [`StoreEventLog`](tessera_core::ports::event_log::StoreEventLog), the event log) on one
//!   DynamoDB table with two sparse GSIs;
//! - [`S3ObjectStore`]: the object store on one bucket, multipart for large files,
//!   `If-None-Match: *` for put-if-absent, presigned URLs;
//! - [`SqsQueue`]: the queue on SQS with a redrive policy to `<name>-dlq`;
//! - [`EventBridgeBus`]: the notice bus on EventBridge;
//! - [`BatchLauncher`]: heavy stages as AWS Batch jobs, one job queue and definition per
//!   resource class.
//!
//! [`AwsSettings`] reads where everything is from the environment a Lambda function or
//! the Batch container is given; [`AwsAdapters`] builds the clients once per process.
#![deny(missing_docs)]

mod attr;
pub mod batch;
pub mod notice_bus;
pub mod object_store;
pub mod queue;
mod sdk_error;
pub mod settings;
pub mod state_store;

pub use batch::{BatchJobRequest, BatchLauncher, BatchTarget};
pub use notice_bus::EventBridgeBus;
pub use object_store::S3ObjectStore;
pub use queue::SqsQueue;
pub use settings::{AwsAdapters, AwsSettings};
pub use state_store::DynamoStateStore;

/// A random token for one request (DynamoDB's `ClientRequestToken`).
pub(crate) fn request_token() -> String {
    format!("{:032x}", fastrand::u128(..))
}
