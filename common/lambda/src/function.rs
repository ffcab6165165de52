//! One Lambda function: the engine on the AWS adapters, built once per cold start from
//! the environment. Its SQS batches are handled by [`SqsBatch`], over the ports.

use crate::routes;
use crate::sqs_batch::SqsBatch;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use std::sync::Arc;
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_core::ports::event_log::StoreEventLog;
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

/// The engine's settings in a function or a Batch container, from the variables Lambda
/// or Batch set (`var`). A Batch job claims as `batch:<job id>`, which is how the
/// orchestrator knows whose lease a failed job left behind, and holds the container
/// lease ([`EngineConfig::for_container`]): its stage may run for hours.
pub fn engine_config(queue: &str, var: impl Fn(&str) -> Option<String>) -> EngineConfig {
    let base = EngineConfig {
        queue: queue.to_string(),
        routes: routes::routes(),
        scratch: std::env::temp_dir().join("tessera"),
        ..EngineConfig::default()
    };
    if let Some(job) = var("AWS_BATCH_JOB_ID") {
        return EngineConfig {
            owner: tessera_engine::remote::remote_owner(&job),
            ..base.for_container()
        };
    }
    EngineConfig {
        owner: var("AWS_LAMBDA_LOG_STREAM_NAME")
            .map(|s| format!("lambda:{s}"))
            .unwrap_or_else(tessera_engine::worker_identity),
        ..base
    }
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
    /// The engine, consuming its task queue.
    pub engine: Engine,
    /// The adapters it runs on.
    pub adapters: AwsAdapters,
    /// How its SQS batches are handled: its task queue, its role, over the ports.
    pub batch: SqsBatch,
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
        let config = engine_config(queue, |name| std::env::var(name).ok());
        let mut engine = Engine::new(ports, config, registry);
        if let Some(bus) = &adapters.bus {
            tracing::info!(bus = bus.bus(), "notices are also published to EventBridge");
            engine = engine.with_notice_bus(Arc::new(bus.clone()));
        }
        let batch = SqsBatch {
            engine: engine.clone(),
            queue: queue.to_string(),
            queue_prefix: adapters.queue.sqs_name(""),
            role,
        };
        Function {
            engine,
            adapters,
            batch,
        }
    }

    /// Handle one SQS batch (see [`SqsBatch`]).
    pub async fn handle_sqs(&self, event: SqsEvent) -> SqsBatchResponse {
        self.batch.handle_sqs(event).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_batch_container_holds_the_long_lease_and_a_function_the_short_one() {
        let batch = engine_config("orchestrator", |n| {
            (n == "AWS_BATCH_JOB_ID").then(|| "j-1".to_string())
        });
        assert_eq!(batch.owner, tessera_engine::remote::remote_owner("j-1"));
        assert_eq!(batch.lease, tessera_engine::CONTAINER_LEASE);
        assert!(batch.heartbeat_every * 10 <= batch.lease, "{batch:?}");
        let lambda = engine_config("face-process", |n| {
            (n == "AWS_LAMBDA_LOG_STREAM_NAME").then(|| "s".to_string())
        });
        assert_eq!(
            (lambda.owner.as_str(), lambda.lease),
            ("lambda:s", Duration::from_secs(30))
        );
    }
}
