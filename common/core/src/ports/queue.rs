//! The queue: at-least-once delivery of small "task X may be runnable" messages (SQS, or
//! a SQLite table in embedded mode). It is never the truth about a task; the state
//! store is.

use crate::error::{Classify, ErrorClass};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a queue behaves; set when the queue is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSettings {
    /// How long a received message stays invisible unless deleted or extended.
    pub visibility: Duration,
    /// Deliveries after which a message moves to the dead-letter queue instead of being
    /// delivered again (SQS's maxReceiveCount).
    pub max_receives: u32,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            visibility: Duration::from_secs(30),
            max_receives: 10,
        }
    }
}

/// Whose turn a message waits for. Receives alternate between lanes (a tenant each), so
/// one tenant's backlog of thousands waits beside another tenant's single message
/// instead of in front of it; within a lane, higher priority goes first.
///
/// On SQS the lane is the message group of a fair queue (a standard queue whose messages
/// carry a group id: SQS keeps a noisy group from delaying the others); SQS has no
/// per-message priority, so there a lane's messages go oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// The lane: a tenant id; empty for work that belongs to no tenant.
    pub lane: String,
    /// Higher first within the lane.
    pub priority: i32,
}

/// One received message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// Stable across deliveries.
    pub message_id: String,
    /// Valid for this delivery only: needed to delete, extend or archive it.
    pub receipt: String,
    /// The body as sent.
    pub body: String,
    /// How many times it has been delivered, this time included.
    pub receive_count: u32,
}

/// Errors of the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue was never created.
    #[error("queue `{0}` does not exist; create it first")]
    NoSuchQueue(String),
    /// The receipt belongs to an earlier delivery (the message became visible again and
    /// was received by someone else); the action was not applied.
    #[error("receipt is stale: message {0} was delivered again since")]
    StaleReceipt(String),
    /// The caller's credentials may not do this to the queue (on AWS: the function's
    /// role lacks the permission). Said apart from a missing queue, which it would
    /// otherwise look like to an operator reading the log.
    #[error("not allowed: {0}; grant the permission to the caller's role")]
    Denied(String),
    /// The request is invalid (body too large, delay too long, bad name).
    #[error("invalid queue request: {0}")]
    Invalid(String),
    /// The queue could not be reached; retrying may help.
    #[error("queue unavailable: {0}")]
    Unavailable(String),
}

impl Classify for QueueError {
    fn class(&self) -> ErrorClass {
        match self {
            QueueError::Unavailable(_) | QueueError::StaleReceipt(_) => ErrorClass::Transient,
            QueueError::NoSuchQueue(_) | QueueError::Denied(_) | QueueError::Invalid(_) => {
                ErrorClass::Permanent
            }
        }
    }
}

/// Largest message body, as on SQS.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Refuse a body over [`MAX_BODY_BYTES`]: every adapter refuses the same bodies with the
/// same words, before anything is sent.
pub fn check_body(body: &str) -> Result<(), QueueError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(QueueError::Invalid(format!(
            "message of {} bytes is over the {MAX_BODY_BYTES}-byte limit",
            body.len()
        )));
    }
    Ok(())
}

/// The queue port. Every queue has a dead-letter queue named `<name>-dlq`.
#[async_trait]
pub trait Queue: Send + Sync + 'static {
    /// Create the queue and its dead-letter queue if missing; idempotent.
    async fn ensure(&self, queue: &str, settings: QueueSettings) -> Result<(), QueueError>;

    /// Send one message, invisible for `delay`, to wait for its turn in `turn`'s lane.
    async fn send_in_turn(
        &self,
        queue: &str,
        body: &str,
        delay: Duration,
        turn: &Turn,
    ) -> Result<String, QueueError>;

    /// Send one message in the lane of work that belongs to no tenant.
    async fn send(&self, queue: &str, body: &str, delay: Duration) -> Result<String, QueueError> {
        self.send_in_turn(queue, body, delay, &Turn::default())
            .await
    }

    /// Receive up to `max` visible messages, waiting up to `wait` for the first, taking
    /// turns between lanes (see [`Turn`]). Each is hidden for the queue's visibility
    /// timeout. A message already delivered
    /// `max_receives` times goes to the dead-letter queue instead.
    async fn receive(
        &self,
        queue: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError>;

    /// Acknowledge: the message is gone. A stale receipt (from an earlier delivery) is
    /// reported as [`QueueError::StaleReceipt`] by the embedded queue; SQS answers
    /// success (and may or may not delete). The engine needs neither: the state store,
    /// not the queue, says whether a task is done.
    async fn delete(&self, queue: &str, receipt: &str) -> Result<(), QueueError>;

    /// Keep a message hidden for `visibility` from now (a long task's heartbeat), or
    /// make it visible again sooner (zero).
    async fn extend(
        &self,
        queue: &str,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), QueueError>;

    /// Move the delivered message to the dead-letter queue now (poison: archived on the
    /// first try), recording why. Takes the whole delivery because SQS has no "move"
    /// call: its adapter re-sends the body to the dead-letter queue, then deletes it.
    async fn archive(
        &self,
        queue: &str,
        delivery: &Delivery,
        reason: &str,
    ) -> Result<(), QueueError>;

    /// Messages currently visible, in flight, and in the dead-letter queue.
    async fn depth(&self, queue: &str) -> Result<QueueDepth, QueueError>;
}

/// Approximate queue depth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDepth {
    /// Ready to be received.
    pub visible: u64,
    /// Received and not yet deleted, or delayed.
    pub hidden: u64,
    /// In the dead-letter queue.
    pub dead: u64,
}
