//! What every Tessera Lambda handler shares, so that each `functions/<name>/main.rs`
//! is a few lines: the queue routes of the AWS deployment ([`routes`]), recognising
//! message bodies ([`body`]), the engine built from the environment ([`function`]), one
//! SQS batch with partial batch failures over the ports ([`sqs_batch`]), JSON logs ([`logging`]), and the runtime
//! loop with graceful shutdown ([`serve_sqs`]).
#![deny(missing_docs)]

pub mod api;
pub mod archive;
pub mod body;
pub mod function;
pub mod launch;
pub mod logging;
pub mod routes;
pub mod s3_source;
pub mod sqs_batch;

pub use function::{Function, Role, face_service};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{LambdaEvent, service_fn};

/// How long the invocation of `context` has before Lambda ends it (its deadline less the
/// wall clock now; zero once past). Work that sizes itself to the time it has reads this,
/// never the function's configured timeout, which the runtime does not tell.
pub fn time_left(context: &lambda_runtime::Context) -> std::time::Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    std::time::Duration::from_millis(context.deadline).saturating_sub(now)
}

/// Register for Lambda's SIGTERM before the sandbox is shut down, so the last log
/// lines are flushed. Work in flight needs nothing more: its lease lapses and the
/// reaper offers it again.
pub async fn on_shutdown() {
    lambda_runtime::spawn_graceful_shutdown_handler(|| async {
        tracing::info!("shutting down");
    })
    .await;
}

/// Serve SQS batches until the runtime stops. A setup error (missing environment
/// variable) ends the process with the variable named in the log.
pub async fn serve_sqs(function: Function) -> Result<(), lambda_runtime::Error> {
    tracing::info!(queue = %function.batch.queue, "function ready");
    on_shutdown().await;
    let f = &function;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(f.handle_sqs(event.payload).await)
    }))
    .await
}
