//! The dead-letter archiver: every message that reaches a dead-letter queue is written
//! to the bucket under `archive/<queue>/<date>/<message id>.json` (body, attributes,
//! why it was archived) so that it outlives the queue's retention and can be replayed.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use tessera_core::ports::ObjectStore;
use tessera_core::ports::object_store::ObjectStoreError;

/// The key a dead message is archived under.
pub fn archive_key(queue: &str, date: &str, message_id: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    format!("archive/{}/{date}/{}.json", clean(queue), clean(message_id))
}

/// Archive one batch of dead-letter messages; a message whose write failed stays.
pub async fn archive_batch(objects: &dyn ObjectStore, event: SqsEvent) -> SqsBatchResponse {
    let date = time::OffsetDateTime::now_utc().date().to_string();
    let mut response = SqsBatchResponse::default();
    for m in event.records {
        let id = m.message_id.clone().unwrap_or_default();
        let queue = m
            .event_source_arn
            .as_deref()
            .and_then(|a| a.rsplit(':').next())
            .unwrap_or("unknown")
            .to_string();
        let attrs: serde_json::Map<String, serde_json::Value> = m
            .message_attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.string_value.clone().unwrap_or_default().into()))
            .collect();
        let record = serde_json::json!({
            "queue": queue,
            "message_id": id,
            "body": m.body,
            "attributes": m.attributes,
            "message_attributes": attrs,
            "archived_at": time::OffsetDateTime::now_utc().unix_timestamp(),
        });
        let key = archive_key(&queue, &date, &id);
        match objects
            .put_if_absent(
                &key,
                serde_json::to_vec_pretty(&record).expect("JSON").into(),
            )
            .await
        {
            Ok(_) | Err(ObjectStoreError::AlreadyExists(_)) => {
                tracing::warn!(message_id = %id, queue = %queue, key = %key, reason = ?attrs.get("tessera_archive_reason"), "dead message archived");
            }
            Err(e) => {
                tracing::error!(message_id = %id, error = %e, "archiving a dead message failed; kept");
                let mut f = BatchItemFailure::default();
                f.item_identifier = id;
                response.batch_item_failures.push(f);
            }
        }
    }
    response
}
