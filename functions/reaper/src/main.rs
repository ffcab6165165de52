//! The `reaper` function, run on a schedule (EventBridge, every minute): re-offers tasks
//! whose lease expired (their worker is presumed dead) or whose message was lost, and
//! finishes fan-outs that were cut short. Each pass is bounded in count and in time: it
//! starts no new work past half of the time its invocation has left, so it ends inside
//! the function's timeout however much is due (what is left is due at the next pass).

use tessera_lambda::{Function, Role, routes};

/// Items one pass looks at per index scan.
const PASS_LIMIT: usize = 200;

/// The share of its invocation's remaining time a pass may spend starting work; the
/// rest is margin for the work in flight at that moment (one release, offer or
/// deletion) and for a slow store.
const TIME_SHARE: f64 = 0.5;

/// The least budget a pass gets, whatever the deadline says (a runtime emulator may give
/// none).
const MIN_TIME: std::time::Duration = std::time::Duration::from_secs(1);

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tessera_lambda::logging::init();
    let function =
        Function::from_env(routes::STAGE_RUNNER, tessera_jobs::registry(), Role::Run).await?;
    let f = &function;
    tessera_lambda::on_shutdown().await;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| async move {
            let left = tessera_lambda::time_left(&event.context);
            let time = left.mul_f64(TIME_SHARE).max(MIN_TIME);
            let budget = tessera_engine::reaper::ReapBudget::within(PASS_LIMIT, time);
            let report = f.engine.reap(tessera_core::Millis::now(), budget).await?;
            tracing::info!(?report, "reaper pass");
            Ok::<_, lambda_runtime::Error>(serde_json::json!({ "report": format!("{report:?}") }))
        },
    ))
    .await
}
