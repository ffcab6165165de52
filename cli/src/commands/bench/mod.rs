//! `tessera bench …`: the benchmarks, one sub-command each (most in their own module),
//! and the engine's claim-and-complete throughput on embedded SQLite.

mod baselines;
mod curve;
mod fairness;
pub mod handlers;
mod photos;
mod privacy;
mod queue;
mod reconstruct;
mod scenes;

use crate::output::emit;
use anyhow::Context;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_core::TenantId;
use tessera_core::ports::state_store::{Condition, Item, ItemKey};
use tessera_engine::{EngineStats, JobPlan, TaskPlan, Worker};
use tokio_util::sync::CancellationToken;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Claim + complete throughput of no-op tasks on embedded SQLite.
    Engine {
        /// No-op tasks to run.
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        tasks: u32,
        /// Workers, each with its own database connections (like separate processes).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
        workers: u32,
    },
    /// SIGKILL worker processes at random while tasks run, then check the invariants.
    Chaos(crate::commands::chaos::Args),
    /// The engines a user would pick, on the same photos in one run: bare COLMAP, and
    /// Tessera on the COLMAP command line and on COLMAP 4 (incremental and global).
    Reconstruct(reconstruct::ReconstructBench),
    /// Face processing per photo on one core: decode, detect, embed, match, blur,
    /// encode variants and thumbnails.
    Photos(photos::PhotosBench),
    /// Recall, over-blur and leaks of the privacy pipeline on phone-shaped photos
    /// (rotated, tagged and untagged, tilted heads, small faces, HEIC).
    Privacy(privacy::Args),
    /// Size and start-to-ready time of each Lambda handler binary.
    Handlers(handlers::Args),
    /// How long one tenant's single photo waits behind another tenant's burst.
    Fairness(fairness::Args),
    /// What one receive from the embedded queue costs as the backlog grows.
    Queue(queue::Args),
}

pub async fn run(json: bool, cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Engine { tasks, workers } => {
            engine(json, tasks as usize, workers as usize).await
        }
        BenchCommand::Chaos(args) => crate::commands::chaos::run(json, args).await,
        BenchCommand::Reconstruct(b) => reconstruct::run(json, b).await,
        BenchCommand::Photos(b) => photos::bench(json, b).await,
        BenchCommand::Handlers(a) => handlers::run(json, a).await,
        BenchCommand::Privacy(a) => privacy::run(json, a).await,
        BenchCommand::Fairness(a) => fairness::run(json, a).await,
        BenchCommand::Queue(a) => queue::run(json, a).await,
    }
}

/// A scratch state directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(what: &str) -> anyhow::Result<Self> {
        let p = std::env::temp_dir().join(format!("tessera-{what}-{}", tessera_core::JobId::new()));
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(Scratch(p))
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Serialize)]
struct EngineReport {
    tasks: usize,
    workers: usize,
    wall_s: f64,
    tasks_per_sec: f64,
    p50_claim_ms: f64,
    p99_claim_ms: f64,
    max_claim_ms: f64,
    /// Bare conditional single-item writes per second on the same store, same run: the
    /// floor under everything the engine does (a task costs several such writes).
    baseline_writes_per_sec: f64,
    /// tasks_per_sec / baseline_writes_per_sec.
    tasks_per_baseline_write: f64,
    succeeded: i64,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

async fn engine(json: bool, tasks: usize, workers: usize) -> anyhow::Result<ExitCode> {
    let scratch = Scratch::new("bench-engine")?;
    let (_dir, submitter) =
        crate::embedded::engine(scratch.path(), Some(Duration::from_secs(30))).await?;

    // Baseline: the same number of writers doing bare conditional puts.
    let baseline_n = (tasks / 4).clamp(100, 5000);
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let (_d, e) = crate::embedded::engine(scratch.path(), None).await?;
        handles.push(tokio::spawn(async move {
            for i in 0..baseline_n / workers {
                let item = Item::new(
                    ItemKey::new(format!("BASELINE#{w}#{i}"), "X"),
                    serde_json::json!({ "i": i }),
                );
                e.ports().store.put(item, Condition::Absent).await?;
            }
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let baseline = (baseline_n / workers * workers) as f64 / t0.elapsed().as_secs_f64();

    let plan = JobPlan {
        tenant: TenantId::local(),
        project: None,
        kind: "bench".into(),
        label: format!("bench engine: {tasks} no-op tasks"),
        spec: serde_json::json!({ "bench": "engine", "tasks": tasks, "nonce": tessera_core::JobId::new() }),
        priority: 0,
        tasks: (0..tasks)
            .map(|i| TaskPlan::new(format!("noop-{i}"), "bench.noop", serde_json::Value::Null))
            .collect(),
    };
    let job_id = submitter.submit(plan).await?.job_id;

    let stats = Arc::new(EngineStats::default());
    let stop = CancellationToken::new();
    let started = Instant::now();
    let mut running = Vec::new();
    for _ in 0..workers {
        let (_d, e) =
            crate::embedded::engine(scratch.path(), Some(Duration::from_secs(30))).await?;
        let worker = Worker::new(e.with_stats(stats.clone()), 1, None);
        let s = stop.clone();
        running.push(tokio::spawn(async move { worker.run(s).await }));
    }
    let job = loop {
        let j = submitter.job(job_id).await?;
        if j.is_over() {
            break j;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wall = started.elapsed().as_secs_f64();
    stop.cancel();
    for r in running {
        let _ = r.await;
    }
    let mut claims = stats
        .claim_micros
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    claims.sort_unstable();
    let report = EngineReport {
        tasks,
        workers,
        wall_s: wall,
        tasks_per_sec: tasks as f64 / wall,
        p50_claim_ms: percentile(&claims, 0.50),
        p99_claim_ms: percentile(&claims, 0.99),
        max_claim_ms: percentile(&claims, 1.0),
        baseline_writes_per_sec: baseline,
        tasks_per_baseline_write: tasks as f64 / wall / baseline,
        succeeded: job.counters.succeeded,
    };
    emit(json, &report, || {
        format!(
            "{} no-op tasks, {} workers: {:.0} tasks/s ({:.2} s); claim p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms\nbaseline: {:.0} bare conditional writes/s on the same store (ratio {:.3} tasks per write)",
            report.tasks,
            report.workers,
            report.tasks_per_sec,
            report.wall_s,
            report.p50_claim_ms,
            report.p99_claim_ms,
            report.max_claim_ms,
            report.baseline_writes_per_sec,
            report.tasks_per_baseline_write
        )
    });
    Ok(if report.succeeded == tasks as i64 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
