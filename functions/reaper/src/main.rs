//! The `reaper` function, run on a schedule (EventBridge, every minute): re-offers tasks
//! whose lease expired (their worker is presumed dead) or whose message was lost, and
//! finishes fan-outs that were cut short. Each pass is bounded so it fits the timeout.

use tessera_lambda::{Function, Role, routes};

/// Items one pass looks at per index scan.
const PASS_LIMIT: usize = 200;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let function =
        Function::from_env(routes::STAGE_RUNNER, tessera_jobs::registry(), Role::Run).await?;
    let f = &function;
    tessera_lambda::on_shutdown().await;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |_: lambda_runtime::LambdaEvent<serde_json::Value>| async move {
            let report = f
                .engine
                .reap_once(tessera_core::Millis::now(), PASS_LIMIT)
                .await?;
            tracing::info!(?report, "reaper pass");
            Ok::<_, lambda_runtime::Error>(serde_json::json!({ "report": format!("{report:?}") }))
        },
    ))
    .await
}
