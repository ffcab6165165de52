//! `tessera worker`: run tasks from the state directory's queue until interrupted.

use crate::embedded;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use tessera_engine::Worker;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Tasks run at once by this worker.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    /// Lease length in milliseconds (heartbeats every third of it).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub lease_ms: u64,
    /// Reaper pass interval in milliseconds (0: this worker does not reap).
    #[arg(long, default_value_t = 5_000)]
    pub reap_every_ms: u64,
}

pub async fn run(state: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let (_dir, engine) =
        embedded::engine(state, Some(Duration::from_millis(args.lease_ms))).await?;
    let reap = (args.reap_every_ms > 0).then(|| Duration::from_millis(args.reap_every_ms));
    let worker = Worker::new(engine, args.concurrency as usize, reap);
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        super::interrupted().await;
        eprintln!("stopping: finishing the tasks in flight (interrupt again to abandon them)");
        s.cancel();
        super::interrupted().await;
        std::process::exit(130);
    });
    worker.run(stop).await;
    Ok(ExitCode::SUCCESS)
}
