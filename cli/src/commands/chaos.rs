//! `tessera bench chaos`: worker *processes* on one state directory, SIGKILLed (and
//! optionally frozen with SIGSTOP past their lease) at random while tasks of random
//! length run; afterwards every invariant is checked from the stored state.

use super::bench::Scratch;
use crate::output::emit;
use anyhow::Context;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tessera_core::TenantId;
use tessera_core::ports::state_store::{Index, Query};
use tessera_core::task::TaskState;
use tessera_engine::{JobPlan, TaskPlan};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Worker processes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub workers: u32,
    /// Tasks to run.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tasks: u32,
    /// SIGKILLs to deliver.
    #[arg(long, default_value_t = 50)]
    pub kills: u32,
    /// SIGSTOPs longer than the lease (each followed by SIGCONT): workers presumed dead
    /// that come back. Default: one per ten kills.
    #[arg(long)]
    pub pauses: Option<u32>,
    /// Attempt ceiling of every task.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub ceiling: u32,
    /// Longest task duration in milliseconds (durations are uniform from 20).
    #[arg(long, default_value_t = 600)]
    pub max_task_ms: u64,
    /// Lease in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub lease_ms: u64,
    /// Random seed (printed, so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep the state directory here instead of a removed scratch folder.
    #[arg(long)]
    pub keep: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct ChaosReport {
    tasks: usize,
    succeeded: usize,
    dead: usize,
    lost: usize,
    concurrent_overlaps: usize,
    max_attempts: u32,
    ceiling: u32,
    event_gaps: usize,
    kills: u32,
    pauses: u32,
    reclaimed: usize,
    seed: u64,
    wall_s: f64,
    ok: bool,
}

struct Workers {
    exe: std::path::PathBuf,
    state: std::path::PathBuf,
    lease_ms: u64,
    procs: Vec<Child>,
}

impl Workers {
    fn spawn(&self, i: usize) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.join(format!("worker-{i}.log")))?;
        Command::new(&self.exe)
            .args([
                "--state",
                self.state.to_str().context("state path is not UTF-8")?,
                "--log",
                "info",
                "worker",
                "--concurrency",
                "2",
            ])
            .args([
                "--lease-ms",
                &self.lease_ms.to_string(),
                "--reap-every-ms",
                &(self.lease_ms / 3).to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start a worker process")
    }

    fn signal(&self, i: usize, sig: libc::c_int) {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(self.procs[i].id() as libc::pid_t, sig);
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

pub async fn run(json: bool, args: Args) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let scratch = Scratch::new("bench-chaos")?;
    let state = match &args.keep {
        Some(p) => {
            std::fs::create_dir_all(p)?;
            p.clone()
        }
        None => scratch.path().to_path_buf(),
    };
    let lease = Duration::from_millis(args.lease_ms);
    let (_dir, engine) = crate::embedded::engine(&state, Some(lease)).await?;
    let plan = JobPlan {
        tenant: TenantId::local(),
        project: None,
        kind: "bench".into(),
        label: format!("bench chaos: {} tasks, {} kills", args.tasks, args.kills),
        spec: serde_json::json!({ "bench": "chaos", "seed": seed, "tasks": args.tasks }),
        priority: 0,
        tasks: (0..args.tasks)
            .map(|i| {
                let mut t = TaskPlan::new(
                    format!("sleep-{i}"),
                    "bench.sleep",
                    serde_json::json!({ "ms": rng.u64(20..=args.max_task_ms.max(20)) }),
                );
                t.max_attempts = Some(args.ceiling);
                t
            })
            .collect(),
    };
    let job_id = engine.submit(plan).await?.job_id;

    let started = Instant::now();
    let mut workers = Workers {
        exe: std::env::current_exe()?,
        state: state.clone(),
        lease_ms: args.lease_ms,
        procs: Vec::new(),
    };
    for i in 0..args.workers as usize {
        let c = workers.spawn(i)?;
        workers.procs.push(c);
    }
    let pauses = args.pauses.unwrap_or(args.kills / 10);
    let mut schedule: Vec<bool> = (0..args.kills)
        .map(|_| true)
        .chain((0..pauses).map(|_| false))
        .collect();
    rng.shuffle(&mut schedule);
    for kill in schedule {
        tokio::time::sleep(Duration::from_millis(rng.u64(50..=300))).await;
        let i = rng.usize(..workers.procs.len());
        if kill {
            workers.signal(i, libc::SIGKILL);
            let _ = workers.procs[i].wait();
            workers.procs[i] = workers.spawn(i)?;
        } else {
            workers.signal(i, libc::SIGSTOP);
            tokio::time::sleep(lease * 3).await;
            workers.signal(i, libc::SIGCONT);
        }
    }

    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let j = engine.job(job_id).await?;
        if j.is_over() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..workers.procs.len() {
        workers.signal(i, libc::SIGTERM);
    }
    for p in &mut workers.procs {
        let _ = p.wait();
    }
    let wall = started.elapsed().as_secs_f64();

    // The invariants, from the stored state alone.
    let tasks = engine.job_tasks(job_id).await?;
    let mut report = ChaosReport {
        tasks: tasks.len(),
        succeeded: 0,
        dead: 0,
        lost: 0,
        concurrent_overlaps: 0,
        max_attempts: 0,
        ceiling: args.ceiling,
        event_gaps: 0,
        kills: args.kills,
        pauses,
        reclaimed: 0,
        seed,
        wall_s: wall,
        ok: false,
    };
    for t in &tasks {
        report.max_attempts = report.max_attempts.max(t.attempts);
        report.reclaimed += (t.epoch as usize).saturating_sub(1);
        let has_reason = t.last_error.as_ref().is_some_and(|e| !e.message.is_empty());
        match t.state {
            TaskState::Succeeded => report.succeeded += 1,
            TaskState::Dead if has_reason => report.dead += 1,
            _ => report.lost += 1,
        }
        let q = Query::partition(
            Index::Table,
            tessera_jobs::bench::effect_partition(t.id),
            100,
        );
        let effects = engine.ports().store.query(&q).await?.items;
        for e in &effects {
            let epoch = e.body["epoch"].as_u64().unwrap_or(0);
            let legitimate = t.state == TaskState::Succeeded && epoch == t.epoch;
            if !legitimate {
                report.concurrent_overlaps += 1;
            }
        }
        if t.state == TaskState::Succeeded && effects.is_empty() {
            report.lost += 1;
        }
    }
    let events = engine
        .ports()
        .events
        .read_after(job_id, 0, 10_000_000)
        .await?;
    let mut seen = BTreeMap::new();
    for e in &events {
        *seen.entry(e.seq).or_insert(0usize) += 1;
    }
    let last = engine.ports().events.last_seq(job_id).await?;
    report.event_gaps = (1..=last).filter(|s| seen.get(s) != Some(&1)).count()
        + seen.keys().filter(|s| **s > last || **s == 0).count();
    report.ok = report.lost == 0
        && report.concurrent_overlaps == 0
        && report.event_gaps == 0
        && report.max_attempts <= report.ceiling
        && report.tasks == args.tasks as usize;
    emit(json, &report, || {
        format!(
            "{} tasks: {} succeeded, {} dead, {} lost; {} concurrent overlaps; {} event gaps; max attempts {} (ceiling {}); {} kills, {} pauses, {} reclaims; seed {}; {:.1} s\n{}",
            report.tasks,
            report.succeeded,
            report.dead,
            report.lost,
            report.concurrent_overlaps,
            report.event_gaps,
            report.max_attempts,
            report.ceiling,
            report.kills,
            report.pauses,
            report.reclaimed,
            report.seed,
            report.wall_s,
            if report.ok {
                "all invariants hold"
            } else {
                "INVARIANT VIOLATED"
            }
        )
    });
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
