//! The queue on SQS.
//!
//! Queue `name` is the SQS queue `<prefix><name>`, with a redrive policy to
//! `<prefix><name>-dlq` after `max_receives` receives (for a FIFO queue, `name` ends in
//! `.fifo` and so does its dead-letter queue). On AWS the SAM template creates both and
//! [`Queue::ensure`] only checks they exist; against a local server it creates them.
//!
//! SQS differs from the port in two places, both harmless to the engine: deleting with a
//! stale receipt is reported as [`QueueError::StaleReceipt`] by moto but silently
//! ignored by SQS (the message then comes back, and its task is already finished); and
//! a delay longer than SQS's 15 minutes is cut to 15 minutes (the claim sees the task is
//! not due yet and hides the message again).

use crate::sdk_error::{self, Failure};
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_core::ports::queue::{Delivery, Queue, QueueDepth, QueueError, QueueSettings, Turn};

/// SQS's longest per-message delay.
const MAX_DELAY_SECS: u64 = 900;
/// SQS's longest visibility timeout.
const MAX_VISIBILITY_SECS: u64 = 12 * 3600;
/// SQS's longest long poll.
const MAX_WAIT_SECS: u64 = 20;

/// The SQS queue adapter. Cheap to clone; clones share the queue-URL cache.
#[derive(Clone)]
pub struct SqsQueue {
    client: Client,
    prefix: String,
    urls: Arc<Mutex<HashMap<String, String>>>,
}

/// The dead-letter queue's port name for queue `name`.
pub fn dead_letter_name(name: &str) -> String {
    match name.strip_suffix(".fifo") {
        Some(base) => format!("{base}-dlq.fifo"),
        None => format!("{name}-dlq"),
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000) as u64
}

fn queue_error<E>(what: &str, e: aws_sdk_sqs::error::SdkError<E>) -> QueueError
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let msg = format!("{what}: {}", sdk_error::describe(&e));
    match sdk_error::code(&e) {
        Some(
            "ReceiptHandleIsInvalid"
            | "InvalidParameterValue"
            | "AWS.SimpleQueueService.MessageNotInflight"
            | "MessageNotInflight",
        ) if what.starts_with("receipt") => QueueError::StaleReceipt(msg),
        Some("AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist") => {
            QueueError::NoSuchQueue(msg)
        }
        Some("AccessDenied" | "AccessDeniedException" | "AuthorizationError") => {
            QueueError::Denied(msg)
        }
        _ => match sdk_error::classify(&e) {
            Failure::Invalid => QueueError::Invalid(msg),
            Failure::Transient => QueueError::Unavailable(msg),
        },
    }
}

impl SqsQueue {
    /// Queues named `<prefix><name>`.
    pub fn new(client: Client, prefix: impl Into<String>) -> Self {
        SqsQueue {
            client,
            prefix: prefix.into(),
            urls: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The SQS client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The SQS queue name of port queue `name`.
    pub fn sqs_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The queue's URL (looked up once per process).
    pub async fn url(&self, name: &str) -> Result<String, QueueError> {
        if let Some(u) = self
            .urls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Ok(u.clone());
        }
        let out = self
            .client
            .get_queue_url()
            .queue_name(self.sqs_name(name))
            .send()
            .await
            .map_err(|e| match queue_error("looking up the queue", e) {
                QueueError::NoSuchQueue(_) | QueueError::Invalid(_) => {
                    QueueError::NoSuchQueue(self.sqs_name(name))
                }
                other => other,
            })?;
        let url = out
            .queue_url()
            .ok_or_else(|| QueueError::Unavailable(format!("SQS returned no URL for {name}")))?
            .to_string();
        self.urls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), url.clone());
        Ok(url)
    }

    /// The queue's ARN (for notifications and redrive policies).
    pub async fn arn(&self, name: &str) -> Result<String, QueueError> {
        let url = self.url(name).await?;
        self.attributes(&url, &[QueueAttributeName::QueueArn])
            .await?
            .remove(&QueueAttributeName::QueueArn)
            .ok_or_else(|| QueueError::Unavailable(format!("no ARN for {name}")))
    }

    async fn create(
        &self,
        name: &str,
        attrs: HashMap<QueueAttributeName, String>,
    ) -> Result<String, QueueError> {
        let out = self
            .client
            .create_queue()
            .queue_name(self.sqs_name(name))
            .set_attributes(Some(attrs))
            .send()
            .await
            .map_err(|e| queue_error(&format!("creating queue {}", self.sqs_name(name)), e))?;
        out.queue_url()
            .map(str::to_string)
            .ok_or_else(|| QueueError::Unavailable(format!("SQS returned no URL for {name}")))
    }

    async fn attributes(
        &self,
        url: &str,
        names: &[QueueAttributeName],
    ) -> Result<HashMap<QueueAttributeName, String>, QueueError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .set_attribute_names(Some(names.to_vec()))
            .send()
            .await
            .map_err(|e| queue_error("reading queue attributes", e))?;
        Ok(out.attributes().cloned().unwrap_or_default())
    }

    fn fifo(name: &str) -> bool {
        name.ends_with(".fifo")
    }
}

fn count(attrs: &HashMap<QueueAttributeName, String>, name: QueueAttributeName) -> u64 {
    attrs.get(&name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[async_trait]
impl Queue for SqsQueue {
    async fn ensure(&self, queue: &str, settings: QueueSettings) -> Result<(), QueueError> {
        let dlq = dead_letter_name(queue);
        if self.url(queue).await.is_ok() && self.url(&dlq).await.is_ok() {
            return Ok(());
        }
        let fifo = Self::fifo(queue);
        let mut dlq_attrs = HashMap::from([(
            QueueAttributeName::MessageRetentionPeriod,
            (14 * 24 * 3600).to_string(),
        )]);
        if fifo {
            dlq_attrs.insert(QueueAttributeName::FifoQueue, "true".into());
        }
        self.create(&dlq, dlq_attrs).await?;
        let arn = self.arn(&dlq).await?;
        let redrive = serde_json::json!({
            "deadLetterTargetArn": arn,
            "maxReceiveCount": settings.max_receives,
        });
        let mut attrs = HashMap::from([
            (
                QueueAttributeName::VisibilityTimeout,
                ceil_secs(settings.visibility)
                    .min(MAX_VISIBILITY_SECS)
                    .to_string(),
            ),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ]);
        if fifo {
            attrs.insert(QueueAttributeName::FifoQueue, "true".into());
        }
        self.create(queue, attrs).await?;
        Ok(())
    }

    async fn send_in_turn(
        &self,
        queue: &str,
        body: &str,
        delay: Duration,
        turn: &Turn,
    ) -> Result<String, QueueError> {
        tessera_core::ports::queue::check_body(body)?;
        let url = self.url(queue).await?;
        let mut req = self.client.send_message().queue_url(url).message_body(body);
        if Self::fifo(queue) {
            // FIFO queues order per group and take no per-message delay; the group is
            // the body's `group` field (a photo), so one photo's messages stay in order.
            let group = serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("group").and_then(|g| g.as_str()).map(str::to_string))
                .unwrap_or_else(|| "default".into());
            req = req
                .message_group_id(group)
                .message_deduplication_id(crate::request_token());
        } else {
            req = req.delay_seconds(ceil_secs(delay).min(MAX_DELAY_SECS) as i32);
            if !turn.lane.is_empty() {
                // A standard queue with message groups is an SQS fair queue: a tenant
                // with a backlog does not hold up the others' messages.
                req = req.message_group_id(&turn.lane);
            }
        }
        let out = req
            .send()
            .await
            .map_err(|e| queue_error(&format!("sending to {queue}"), e))?;
        Ok(out.message_id().unwrap_or_default().to_string())
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let url = self.url(queue).await?;
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max.clamp(1, 10) as i32)
            .wait_time_seconds(ceil_secs(wait).min(MAX_WAIT_SECS) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| queue_error(&format!("receiving from {queue}"), e))?;
        Ok(out
            .messages()
            .iter()
            .map(|m| Delivery {
                message_id: m.message_id().unwrap_or_default().to_string(),
                receipt: m.receipt_handle().unwrap_or_default().to_string(),
                body: m.body().unwrap_or_default().to_string(),
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1),
            })
            .collect())
    }

    async fn delete(&self, queue: &str, receipt: &str) -> Result<(), QueueError> {
        let url = self.url(queue).await?;
        self.client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| queue_error("receipt for delete", e))?;
        Ok(())
    }

    async fn extend(
        &self,
        queue: &str,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), QueueError> {
        let url = self.url(queue).await?;
        self.client
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(receipt)
            .visibility_timeout(ceil_secs(visibility).min(MAX_VISIBILITY_SECS) as i32)
            .send()
            .await
            .map_err(|e| queue_error("receipt for extend", e))?;
        Ok(())
    }

    async fn archive(
        &self,
        queue: &str,
        delivery: &Delivery,
        reason: &str,
    ) -> Result<(), QueueError> {
        let dlq = dead_letter_name(queue);
        let url = self.url(&dlq).await?;
        let attr = |v: &str| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(v.chars().take(1024).collect::<String>())
                .build()
                .expect("type and value are set")
        };
        let mut req = self
            .client
            .send_message()
            .queue_url(url)
            .message_body(&delivery.body)
            .message_attributes("tessera_archive_reason", attr(reason))
            .message_attributes("tessera_source_queue", attr(queue))
            .message_attributes("tessera_message_id", attr(&delivery.message_id));
        if Self::fifo(queue) {
            req = req
                .message_group_id("archive")
                .message_deduplication_id(crate::request_token());
        }
        req.send()
            .await
            .map_err(|e| queue_error(&format!("archiving to {dlq}"), e))?;
        match self.delete(queue, &delivery.receipt).await {
            // Redelivered meanwhile: the copy in the dead-letter queue stands, and the
            // new delivery will be archived again or handled.
            Ok(()) | Err(QueueError::StaleReceipt(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, QueueError> {
        use QueueAttributeName as A;
        let main = self
            .attributes(
                &self.url(queue).await?,
                &[
                    A::ApproximateNumberOfMessages,
                    A::ApproximateNumberOfMessagesNotVisible,
                    A::ApproximateNumberOfMessagesDelayed,
                ],
            )
            .await?;
        let dead = self
            .attributes(
                &self.url(&dead_letter_name(queue)).await?,
                &[
                    A::ApproximateNumberOfMessages,
                    A::ApproximateNumberOfMessagesNotVisible,
                ],
            )
            .await?;
        Ok(QueueDepth {
            visible: count(&main, A::ApproximateNumberOfMessages),
            hidden: count(&main, A::ApproximateNumberOfMessagesNotVisible)
                + count(&main, A::ApproximateNumberOfMessagesDelayed),
            dead: count(&dead, A::ApproximateNumberOfMessages)
                + count(&dead, A::ApproximateNumberOfMessagesNotVisible),
        })
    }
}
