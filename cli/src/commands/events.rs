//! `tessera events JOB [--after N] [--follow]`. With `--json`, one event a line as the API
//! streams it: sfmapi's `ProgressEvent` v1, Tessera's fields beside.

use crate::embedded;
use crate::output::event_line;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Job id.
    pub job: String,
    /// Only events with a sequence number above this.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// Keep printing new events until the job finishes (or Ctrl-C).
    #[arg(long)]
    pub follow: bool,
}

pub async fn run(state: &Path, json: bool, args: Args) -> anyhow::Result<ExitCode> {
    let id = super::parse_job(&args.job)?;
    let (_dir, engine) = embedded::engine(state, None).await?;
    engine.job(id).await?;
    let mut after = args.after;
    let interrupted = super::interrupted();
    tokio::pin!(interrupted);
    loop {
        let batch = engine.ports().events.read_after(id, after, 500).await?;
        for e in &batch {
            if json {
                println!("{}", tessera_core::event::sfmapi::event(e));
            } else {
                println!("{}", event_line(e));
            }
            after = e.seq;
        }
        if batch.len() == 500 {
            continue;
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        let job = engine.job(id).await?;
        let finished = job.is_over();
        if finished && engine.ports().events.last_seq(id).await? == after {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = &mut interrupted => return Ok(ExitCode::SUCCESS),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}
