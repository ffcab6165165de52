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
use tessera_core::ports::notice_bus::{MAX_NOTICES_PER_PUBLISH, NoticeBusError, check_notice};

/// Entry error codes after which the same entry may be accepted later.
const RETRYABLE_ENTRY_CODES: &[&str] = &[
    "ThrottlingException",
    "InternalFailure",
    "InternalException",
];

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

    fn entry(&self, notice: &Notice) -> Result<PutEventsRequestEntry, NoticeBusError> {
        let detail = check_notice(notice)?;
        Ok(PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(&self.source)
            .detail_type(notice.kind.as_str())
            .detail(detail)
            .time(aws_smithy_types::DateTime::from_millis(
                notice.occurred_at.0,
            ))
            .build())
    }
}

#[async_trait]
impl NoticeBus for EventBridgeBus {
    async fn publish(&self, notices: &[Notice]) -> Result<(), NoticeBusError> {
        for chunk in notices.chunks(MAX_NOTICES_PER_PUBLISH) {
            let entries = chunk
                .iter()
                .map(|n| self.entry(n))
                .collect::<Result<Vec<_>, _>>()?;
            let answer = self
                .client
                .put_events()
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    let why = describe(&e);
                    match (classify(&e), crate::sdk_error::code(&e)) {
                        (_, Some("AccessDeniedException")) => NoticeBusError::Denied(why),
                        (Failure::Transient, _) => NoticeBusError::Unavailable(why),
                        (Failure::Invalid, _) => NoticeBusError::Unavailable(format!(
                            "{why} (bus `{}`: does it exist in this account and region?)",
                            self.bus
                        )),
                    }
                })?;
            if answer.failed_entry_count() == 0 {
                continue;
            }
            // Entries answer in request order. A retryable failure repeats the whole
            // call (the accepted ones are published again; consumers deduplicate on the
            // notice id); any other names the notice the bus will never take.
            for (notice, entry) in chunk.iter().zip(answer.entries()) {
                let Some(code) = entry.error_code() else {
                    continue;
                };
                let why = format!("{code}: {}", entry.error_message().unwrap_or(""));
                if RETRYABLE_ENTRY_CODES.contains(&code) {
                    return Err(NoticeBusError::Unavailable(why));
                }
                if code == "AccessDeniedException" {
                    return Err(NoticeBusError::Denied(why));
                }
                return Err(NoticeBusError::Refused {
                    id: notice.id.clone(),
                    why,
                });
            }
            return Err(NoticeBusError::Unavailable(format!(
                "{} of {} events failed without a reason",
                answer.failed_entry_count(),
                chunk.len()
            )));
        }
        Ok(())
    }
}
