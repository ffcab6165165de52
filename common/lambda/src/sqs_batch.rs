//! One SQS batch as the Lambda event source delivers it, handled over the engine's ports
//! with partial batch failures: a message is kept (listed in `batchItemFailures`) only
//! when it must come back — a task not due yet, a transient failure; a poison message is
//! archived to its dead-letter queue on the first receive. It depends on the ports, not
//! on the AWS adapters, so it is tested with the sample events on the embedded ones.

use crate::Role;
use crate::body::{self, Body};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::future::join_all;
use tessera_core::ErrorClass;
use tessera_core::ports::queue::Delivery;
use tessera_engine::Engine;
use tessera_engine::dispatch::Handled;
use tracing::Instrument;

/// What handles one function's SQS batches.
#[derive(Clone)]
pub struct SqsBatch {
    /// The engine (and through it the ports).
    pub engine: Engine,
    /// The function's own task queue (port name).
    pub queue: String,
    /// What the deployment puts before port names in SQS queue names (`<stack>-`), so a
    /// message's source queue is known from its ARN.
    pub queue_prefix: String,
    /// What it does with task messages.
    pub role: Role,
}

impl SqsBatch {
    /// Handle one SQS batch; the messages that must come back are listed as batch item
    /// failures (everything else is deleted by the event source, or was already).
    pub async fn handle_sqs(&self, event: SqsEvent) -> SqsBatchResponse {
        let results = join_all(event.records.into_iter().map(|m| async move {
            let id = m.message_id.clone().unwrap_or_default();
            (id, self.handle_message(m).await)
        }))
        .await;
        let mut response = SqsBatchResponse::default();
        for (id, keep) in results {
            if keep {
                let mut f = BatchItemFailure::default();
                f.item_identifier = id;
                response.batch_item_failures.push(f);
            }
        }
        response
    }

    /// Handle one message; `true` when it must stay on its queue (retry later).
    pub async fn handle_message(&self, m: SqsMessage) -> bool {
        let source = m
            .event_source_arn
            .as_deref()
            .and_then(|a| a.rsplit(':').next())
            .map(|n| {
                n.strip_prefix(self.queue_prefix.as_str())
                    .unwrap_or(n)
                    .to_string()
            })
            .unwrap_or_else(|| self.queue.clone());
        let d = Delivery {
            message_id: m.message_id.unwrap_or_default(),
            receipt: m.receipt_handle.unwrap_or_default(),
            receive_count: m
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.parse().ok())
                .unwrap_or(1),
            body: m.body.unwrap_or_default(),
        };
        let span = tracing::info_span!("message", message_id = %d.message_id, queue = %source, receive_count = d.receive_count);
        self.handle_delivery(&source, d).instrument(span).await
    }

    async fn handle_delivery(&self, source: &str, d: Delivery) -> bool {
        match body::parse(&d.body) {
            Body::Task(_) => match &self.role {
                Role::Run => match self.engine.handle_delivery(&d).await {
                    Ok(Handled::Later(after)) => {
                        tracing::info!(after_s = after.as_secs(), "task not due yet; message kept");
                        true
                    }
                    Ok(h) => {
                        tracing::info!(handled = ?h, "task message handled");
                        false
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "task message failed; it comes back after its visibility timeout");
                        true
                    }
                },
                Role::Launch(launcher) => {
                    match self.engine.launch_delivery(&d, launcher.as_ref()).await {
                        Ok(l) => {
                            tracing::info!(launched = ?l, "heavy task");
                            false
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "launch failed; retried");
                            true
                        }
                    }
                }
            },
            Body::Uploads(events) => {
                for ev in &events {
                    match tessera_jobs::photos::submit_upload(&self.engine, ev).await {
                        Ok(_) => {}
                        Err(e) if e.class == ErrorClass::Transient => {
                            tracing::warn!(error = %e.message, key = %ev.key, "upload not submitted; retried");
                            return true;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e.message, key = %ev.key, "upload refused; archived");
                            return self.archive(source, &d, &e.message).await;
                        }
                    }
                }
                false
            }
            Body::S3Test => false,
            Body::BatchProgress(status) => {
                tracing::debug!(status, "Batch job progress");
                false
            }
            Body::BatchEnded(end) => match self.engine.remote_ended(&end).await {
                Ok(h) => {
                    tracing::info!(task_id = %end.task, remote_job = %end.job_id, succeeded = end.succeeded, closed = ?h, "Batch job ended");
                    false
                }
                Err(e) => {
                    tracing::warn!(error = %e, "closing a Batch job's task failed; retried");
                    true
                }
            },
            Body::Unparsable(why) => {
                tracing::warn!(why, "poison message; archived on the first try");
                self.archive(source, &d, &why).await
            }
        }
    }

    /// Move a message to its queue's dead-letter queue now; `true` (keep) if even that
    /// failed, so SQS's own redrive gets it there later.
    async fn archive(&self, queue: &str, d: &Delivery, why: &str) -> bool {
        match self.engine.ports().queue.archive(queue, d, why).await {
            Ok(()) => false,
            Err(e) => {
                tracing::error!(error = %e, "archiving failed; the message is kept");
                true
            }
        }
    }
}
