//! `tessera`: the command line of embedded mode, the worker entrypoint, job control,
//! events and benchmarks. This is a binary edge: errors become `anyhow` here and are
//! printed with what to do next.

mod commands;
mod embedded;
mod output;
mod photos;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Tessera turns photo uploads into privacy-safe published photos and 3D reconstructions.
#[derive(Parser, Debug)]
#[command(name = "tessera", version, about, propagate_version = true)]
pub struct Cli {
    /// State directory of embedded mode (SQLite state, queue, object store).
    #[arg(long, global = true, env = "TESSERA_STATE", default_value = ".tessera")]
    pub state: PathBuf,
    /// Print machine-readable JSON instead of text and progress bars.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log filter (`info`, `tessera_engine=debug`, …); logs go to stderr.
    #[arg(long, global = true, env = "TESSERA_LOG", default_value = "warn")]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a worker on the state directory until interrupted.
    Worker(commands::worker::Args),
    /// List, show, cancel and resume jobs.
    #[command(subcommand)]
    Jobs(commands::jobs::JobsCommand),
    /// Print a job's progress events, optionally following new ones.
    Events(commands::events::Args),
    /// Reconstruct a folder of photos into a sparse 3D model (COLMAP), with exports.
    Reconstruct(commands::reconstruction::Args),
    /// Register new photos into a finished reconstruction.
    Relocalize(commands::reconstruction::refine::RelocalizeArgs),
    /// Re-triangulate a finished reconstruction's points with its poses fixed.
    Triangulate(commands::reconstruction::refine::TriangulateArgs),
    /// Run the demo job on a folder of photos (the sample by default) and wait for it.
    Demo(commands::demo::Args),
    /// Blur every face that must be hidden in a folder of photos (one-shot, embedded):
    /// variants, thumbnails and a manifest under OUT.
    Blur(commands::blur::Args),
    /// Serve the HTTP API (sfmapi v1 core) on a local port, with workers.
    Serve(commands::serve::Args),
    /// Run one task against the AWS adapters (the Batch worker container's entrypoint).
    Stage(commands::stage::Args),
    /// Set up a local AWS-compatible server for the Lambda handlers.
    #[command(subcommand)]
    Aws(commands::aws::AwsCommand),
    /// Create and show photo projects.
    #[command(subcommand)]
    Projects(commands::projects::ProjectsCommand),
    /// Enrol people who asked not to be published.
    #[command(subcommand)]
    Subjects(commands::subjects::SubjectsCommand),
    /// Upload, list, show and re-blur photos.
    #[command(subcommand)]
    Photos(commands::photos::PhotosCommand),
    /// List the people a project's photos show, and opt one out.
    #[command(subcommand)]
    Clusters(commands::clusters::ClustersCommand),
    /// Measure the engine.
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var_os("TESSERA_LOG_JSON").is_some() {
        fmt.json().init();
    } else {
        fmt.init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
