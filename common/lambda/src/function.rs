//! One Lambda function: the engine on the AWS adapters, built once per cold start from
//! the environment, and the handling of one SQS batch with partial batch failures.

use crate::body::{self, Body};
use crate::routes;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::future::join_all;
use std::sync::Arc;
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_core::ErrorClass;
use tessera_core::ports::event_log::StoreEventLog;
use tessera_core::ports::queue::{Delivery, Queue};
use tessera_engine::dispatch::Handled;
use tessera_engine::remote::Launcher;
use tessera_engine::{Engine, EngineConfig, Ports, Registry};
use tessera_local::{LocalCompute, MemoryGate};

/// Memory the gate keeps free for the runtime itself inside a Lambda sandbox.
const MEMORY_RESERVE: u64 = 64 * 1024 * 1024;

/// A function's setup failed: a missing variable or an unreachable service.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting is missing.
    #[error(transparent)]
    Settings(#[from] tessera_aws::settings::SettingsError),
    /// ONNX Runtime or the face models could not be loaded.
    #[error("face models: {0}")]
    Faces(String),
}

/// The face models for a function that detects or matches faces. With
/// `TESSERA_PRELOAD_FACES=1` (the template sets it for face-process and reprocess, never
/// for the api, whose every route would go down with a broken layer) they load during
/// the function's init phase, so a missing runtime or model ends
/// the cold start with the path named, and the first photo does not pay for loading;
/// otherwise they load on the first photo task.
pub fn face_service() -> Result<Arc<tessera_jobs::photos::FaceService>, SetupError> {
    let faces = Arc::new(tessera_jobs::photos::FaceService::from_env());
    if std::env::var("TESSERA_PRELOAD_FACES").is_ok_and(|v| v == "1") {
        faces.models().map_err(|e| SetupError::Faces(e.message))?;
        tracing::info!("face models loaded");
    }
    Ok(faces)
}

/// What a function does with task messages.
#[derive(Clone)]
pub enum Role {
    /// Run them here (every function but the orchestrator).
    Run,
    /// Launch them on a remote runner (the orchestrator: Batch).
    Launch(Arc<dyn Launcher>),
}

/// One function: its engine and adapters.
#[derive(Clone)]
pub struct Function {
    /// The engine, consuming `queue`.
    pub engine: Engine,
    /// The adapters it runs on.
    pub adapters: AwsAdapters,
    /// Its task queue (port name, without the deployment prefix).
    pub queue: String,
    /// What it does with task messages.
    pub role: Role,
}

impl Function {
    /// Build from the environment (see [`AwsSettings::from_env`]); `queue` is the task
    /// queue this function consumes.
    pub async fn from_env(queue: &str, registry: Registry, role: Role) -> Result<Self, SetupError> {
        let settings = AwsSettings::from_env()?;
        Ok(Self::connect(&settings, queue, registry, role).await)
    }

    /// Build for these settings.
    pub async fn connect(
        settings: &AwsSettings,
        queue: &str,
        registry: Registry,
        role: Role,
    ) -> Self {
        let adapters = AwsAdapters::connect(settings).await;
        let store: Arc<dyn tessera_core::ports::StateStore> = Arc::new(adapters.store.clone());
        let ports = Ports {
            store: store.clone(),
            queue: Arc::new(adapters.queue.clone()),
            events: Arc::new(StoreEventLog::new(store)),
            objects: Arc::new(adapters.objects.clone()),
            compute: Arc::new(LocalCompute::new(MemoryGate::for_this_machine(
                MEMORY_RESERVE,
            ))),
        };
        // A Batch job claims as `batch:<job id>`, which is how the orchestrator knows
        // whose lease a failed job left behind.
        let owner = std::env::var("AWS_BATCH_JOB_ID")
            .map(|id| tessera_engine::remote::remote_owner(&id))
            .or_else(|_| std::env::var("AWS_LAMBDA_LOG_STREAM_NAME").map(|s| format!("lambda:{s}")))
            .unwrap_or_else(|_| tessera_engine::worker_identity());
        let config = EngineConfig {
            queue: queue.to_string(),
            routes: routes::routes(),
            owner,
            scratch: std::env::temp_dir().join("tessera"),
            ..EngineConfig::default()
        };
        Function {
            engine: Engine::new(ports, config, registry),
            adapters,
            queue: queue.to_string(),
            role,
        }
    }

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
                n.strip_prefix(self.adapters.queue.sqs_name("").as_str())
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
        let _g = span.enter();
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
                            return self.archive(&source, &d, &e.message).await;
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
                self.archive(&source, &d, &why).await
            }
        }
    }

    /// Move a message to its queue's dead-letter queue now; `true` (keep) if even that
    /// failed, so SQS's own redrive gets it there later.
    async fn archive(&self, queue: &str, d: &Delivery, why: &str) -> bool {
        match self.adapters.queue.archive(queue, d, why).await {
            Ok(()) => false,
            Err(e) => {
                tracing::error!(error = %e, "archiving failed; the message is kept");
                true
            }
        }
    }
}
