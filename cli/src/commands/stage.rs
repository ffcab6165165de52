//! `tessera stage --task ID`: the Batch worker container's entrypoint. Runs one task
//! against the AWS adapters (settings from the environment: `TESSERA_TABLE`,
//! `TESSERA_BUCKET`, `TESSERA_QUEUE_PREFIX`, `AWS_ENDPOINT_URL`) through the same
//! engine as every Lambda: claim under `batch:$AWS_BATCH_JOB_ID`, heartbeat, fenced
//! writes, completion that advances the job.

use std::process::ExitCode;
use tessera_core::TaskId;
use tessera_engine::dispatch::Handled;
use tessera_lambda::{Function, Role, routes};

/// Arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The task to run.
    #[arg(long, env = "TESSERA_TASK_ID")]
    pub task: String,
}

/// Run it. The exit status is 0 whenever the engine recorded the outcome (success, or
/// a failure it retries or ends), since retries are the engine's, not Batch's.
pub async fn run(json: bool, args: Args) -> anyhow::Result<ExitCode> {
    let task: TaskId = args.task.parse()?;
    let function =
        Function::from_env(routes::ORCHESTRATOR, tessera_jobs::registry(), Role::Run).await?;
    let handled = function.engine.run_task(task).await?;
    let task_now = function.engine.task(task).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "task": task, "handled": format!("{handled:?}"), "state": task_now.state,
                "attempts": task_now.attempts, "epoch": task_now.epoch,
            })
        );
    } else {
        println!(
            "task {task}: {handled:?}; now {} (attempt {}, epoch {})",
            task_now.state, task_now.attempts, task_now.epoch
        );
    }
    Ok(match handled {
        Handled::Poison(_) => ExitCode::from(2),
        _ => ExitCode::SUCCESS,
    })
}
