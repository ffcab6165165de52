//! The notice bus on EventBridge: each notice is one event, `Source` the deployment's
//! source (`tessera.<stack>` as the template sets it), `DetailType` the notice type
//! (`job.succeeded`, `photo.published`…) and `Detail` the notice as a webhook receives
//! it. Rules on the bus route them by type, tenant or project.

use crate::sdk_error::{Failure, classify, describe};
use async_trait::async_trait;
use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use tessera_core::notify::Notice;
use tessera_core::ports::NoticeBus;
use tessera_core::ports::notice_bus::{
    MAX_NOTICES_PER_PUBLISH, MAX_PUBLISH_BYTES, NoticeBusError, check_notice,
};

/// Entry error codes after which the same entry may be accepted later.
const RETRYABLE_ENTRY_CODES: &[&str] = &[
    "ThrottlingException",
    "InternalFailure",
    "InternalException",
];

/// What the bus says of one entry it did not take: a setup or permission problem of the
/// deployment (publishing again once the operator fixes it succeeds), or the notice
/// itself (never accepted).
fn entry_error(notice: &Notice, code: &str, why: String) -> NoticeBusError {
    if RETRYABLE_ENTRY_CODES.contains(&code) {
        NoticeBusError::Unavailable(why)
    } else if code.contains("NotAuthorized")
        || code.contains("AccessDenied")
        || code == "InvalidAccountIdException"
    {
        NoticeBusError::Denied(why)
    } else {
        NoticeBusError::Refused {
            id: notice.id.clone(),
            why,
        }
    }
}

/// An entry's size as EventBridge counts it against the request's limit: 14 bytes for
/// the time, and the UTF-8 bytes of source, detail-type and detail.
fn entry_size(source: &str, detail_type: &str, detail: &str) -> usize {
    14 + source.len() + detail_type.len() + detail.len()
}

/// EventBridge as the notice bus.
#[derive(Clone)]
pub struct EventBridgeBus {
    client: Client,
    bus: String,
    source: String,
}

impl EventBridgeBus {
    /// Events to bus `bus` (a name, `default`, or an ARN) with source `source`.
    pub fn new(client: Client, bus: impl Into<String>, source: impl Into<String>) -> Self {
        EventBridgeBus {
            client,
            bus: bus.into(),
            source: source.into(),
        }
    }

    /// The bus events go to.
    pub fn bus(&self) -> &str {
        &self.bus
    }

    fn entry(&self, notice: &Notice) -> Result<(PutEventsRequestEntry, usize), NoticeBusError> {
        let detail = check_notice(notice)?;
        let size = entry_size(&self.source, notice.kind.as_str(), &detail);
        Ok((
            PutEventsRequestEntry::builder()
                .event_bus_name(&self.bus)
                .source(&self.source)
                .detail_type(notice.kind.as_str())
                .detail(detail)
                .time(aws_smithy_types::DateTime::from_millis(
                    notice.occurred_at.0,
                ))
                .build(),
            size,
        ))
    }

    /// One `PutEvents` call.
    async fn put(
        &self,
        batch: Vec<(&Notice, PutEventsRequestEntry)>,
    ) -> Result<(), NoticeBusError> {
        let (notices, entries): (Vec<&Notice>, Vec<PutEventsRequestEntry>) =
            batch.into_iter().unzip();
        let answer = self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| {
                let why = describe(&e);
                match classify(&e) {
                    Failure::Transient => NoticeBusError::Unavailable(why),
                    // Denied, no such bus, a request the service will never take: the
                    // deployment's setup, which the operator fixes.
                    Failure::Invalid => NoticeBusError::Denied(format!(
                        "{why} (bus `{}`: does it exist in this account and region?)",
                        self.bus
                    )),
                }
            })?;
        if answer.failed_entry_count() == 0 {
            return Ok(());
        }
        // Entries answer in request order. The first failure decides: a retryable one
        // repeats the call (the accepted entries are published again; consumers
        // deduplicate on the notice id).
        for (notice, entry) in notices.iter().zip(answer.entries()) {
            if let Some(code) = entry.error_code() {
                let why = format!("{code}: {}", entry.error_message().unwrap_or(""));
                return Err(entry_error(notice, code, why));
            }
        }
        Err(NoticeBusError::Unavailable(format!(
            "{} of {} events failed without a reason",
            answer.failed_entry_count(),
            notices.len()
        )))
    }
}

#[async_trait]
impl NoticeBus for EventBridgeBus {
    /// In calls of at most [`MAX_NOTICES_PER_PUBLISH`] entries and [`MAX_PUBLISH_BYTES`].
    async fn publish(&self, notices: &[Notice]) -> Result<(), NoticeBusError> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        for n in notices {
            let (entry, size) = self.entry(n)?;
            if !batch.is_empty()
                && (batch.len() == MAX_NOTICES_PER_PUBLISH || bytes + size > MAX_PUBLISH_BYTES)
            {
                self.put(std::mem::take(&mut batch)).await?;
                bytes = 0;
            }
            batch.push((n, entry));
            bytes += size;
        }
        if !batch.is_empty() {
            self.put(batch).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice() -> Notice {
        Notice::new(
            tessera_core::notify::NoticeType::PhotoPublished,
            "photo/x/1",
            tessera_core::TenantId::local(),
            None,
            tessera_core::Millis(0),
            serde_json::json!({}),
        )
    }

    #[test]
    fn a_permission_problem_is_denied_and_a_bad_notice_refused() {
        let n = notice();
        for code in [
            "NotAuthorizedForSourceException",
            "NotAuthorizedForDetailTypeException",
            "AccessDeniedException",
            "InvalidAccountIdException",
        ] {
            assert!(
                matches!(
                    entry_error(&n, code, code.into()),
                    NoticeBusError::Denied(_)
                ),
                "{code}"
            );
        }
        assert!(matches!(
            entry_error(&n, "ThrottlingException", String::new()),
            NoticeBusError::Unavailable(_)
        ));
        assert!(matches!(
            entry_error(&n, "MalformedDetail", String::new()),
            NoticeBusError::Refused { .. }
        ));
    }

    #[test]
    fn an_entry_is_sized_as_eventbridge_counts_it() {
        assert_eq!(
            entry_size("tessera.s", "photo.published", "{}"),
            14 + 9 + 15 + 2
        );
    }
}
