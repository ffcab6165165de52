//! The notice bus: where every notice goes besides a tenant's webhooks, for the
//! operator's own routing (on AWS: EventBridge's default bus, which rules forward to
//! queues, functions or other accounts). Embedded mode has none.
//!
//! Publishing is at least once: a notice is published again when the commit that
//! records it fails after the publish, so a consumer deduplicates on the notice id,
//! which is stable across raises ([`crate::notify::Notice::new`]).

use crate::error::{Classify, ErrorClass};
use crate::notify::Notice;
use async_trait::async_trait;

/// The most notices one [`NoticeBus::publish`] call carries (EventBridge's `PutEvents`
/// takes at most ten entries).
pub const MAX_NOTICES_PER_PUBLISH: usize = 10;

/// The largest notice a bus accepts, in bytes of its JSON (EventBridge's limit is 256 KB
/// for a whole request; the margin is for the entry's other fields).
pub const MAX_NOTICE_BYTES: usize = 250 * 1024;

/// The most bytes one publish call carries (EventBridge: 256 KB per `PutEvents`
/// request, every entry counted).
pub const MAX_PUBLISH_BYTES: usize = 256 * 1024;

/// Errors of the notice bus.
#[derive(Debug, thiserror::Error)]
pub enum NoticeBusError {
    /// The bus could not be reached or throttled the call; retrying may help.
    #[error("notice bus unavailable: {0}")]
    Unavailable(String),
    /// The caller may not publish (on AWS: the role lacks `events:PutEvents`).
    #[error(
        "not allowed to publish notices: {0}; grant events:PutEvents on the bus to the caller's role"
    )]
    Denied(String),
    /// The bus refused a notice itself (too large, malformed); publishing it again will
    /// not help.
    #[error("notice {id} refused by the bus: {why}")]
    Refused {
        /// The notice's id.
        id: String,
        /// The bus's reason.
        why: String,
    },
}

impl Classify for NoticeBusError {
    fn class(&self) -> ErrorClass {
        match self {
            NoticeBusError::Unavailable(_) => ErrorClass::Transient,
            NoticeBusError::Denied(_) | NoticeBusError::Refused { .. } => ErrorClass::Permanent,
        }
    }
}

/// Refuse a notice over [`MAX_NOTICE_BYTES`] before anything is sent, with the same
/// words for every adapter.
pub fn check_notice(notice: &Notice) -> Result<String, NoticeBusError> {
    let body = serde_json::to_string(notice).expect("a notice serializes");
    if body.len() > MAX_NOTICE_BYTES {
        return Err(NoticeBusError::Refused {
            id: notice.id.clone(),
            why: format!(
                "{} bytes is over the {MAX_NOTICE_BYTES}-byte limit",
                body.len()
            ),
        });
    }
    Ok(body)
}

/// The notice bus port.
#[async_trait]
pub trait NoticeBus: Send + Sync + 'static {
    /// Publish `notices` (the adapter splits them into calls its service takes). `Ok`
    /// means every one was accepted; an error means some may have been and the call
    /// should be repeated (consumers deduplicate on the notice id), without the notice a
    /// [`NoticeBusError::Refused`] names.
    async fn publish(&self, notices: &[Notice]) -> Result<(), NoticeBusError>;
}
