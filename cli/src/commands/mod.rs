//! One module per command.

pub mod aws;
pub mod bench;
pub mod blur;
mod chaos;
pub mod clusters;
pub mod demo;
pub mod events;
pub mod jobs;
pub mod photos;
pub mod projects;
pub mod reconstruction;
pub mod serve;
pub mod stage;
pub mod subjects;
pub mod worker;

use crate::{Cli, Command};
use std::process::ExitCode;

/// Run the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Worker(a) => worker::run(&cli.state, a).await,
        Command::Jobs(c) => jobs::run(&cli.state, cli.json, c).await,
        Command::Events(a) => events::run(&cli.state, cli.json, a).await,
        Command::Demo(a) => demo::run(&cli.state, cli.json, a).await,
        Command::Reconstruct(a) => reconstruction::run(&cli.state, cli.json, a).await,
        Command::Relocalize(a) => reconstruction::refine::relocalize(&cli.state, cli.json, a).await,
        Command::Triangulate(a) => {
            reconstruction::refine::triangulate(&cli.state, cli.json, a).await
        }
        Command::Bench(c) => bench::run(cli.json, c).await,
        Command::Blur(a) => blur::run(cli.json, a).await,
        Command::Serve(a) => serve::run(&cli.state, a).await,
        Command::Stage(a) => stage::run(cli.json, a).await,
        Command::Aws(c) => aws::run(cli.json, c).await,
        Command::Projects(c) => projects::projects(&cli.state, cli.json, c).await,
        Command::Subjects(c) => subjects::subjects(&cli.state, cli.json, c).await,
        Command::Photos(c) => photos::photos_cmd(&cli.state, cli.json, c).await,
        Command::Clusters(c) => clusters::run(&cli.state, cli.json, c).await,
    }
}

/// Parse a job id with a message that says what one looks like.
pub fn parse_job(s: &str) -> anyhow::Result<tessera_core::JobId> {
    Ok(s.parse()?)
}

/// Resolves on SIGINT or SIGTERM.
pub async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}
