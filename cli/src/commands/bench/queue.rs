//! `tessera bench queue`: what one receive from the embedded queue costs as the backlog
//! grows.
//!
//! A burst of photos leaves thousands of messages waiting; every worker's receive must
//! stay cheap while they drain, or the queue drains slower the fuller it is. Each size
//! is a fresh queue holding that many visible messages spread over `--lanes` tenants'
//! lanes; the figure is the mean time of `--receives` receive-and-delete rounds. The
//! baseline, in the same run, is the smallest size, so the ratios show how the cost
//! grows with the backlog (1.0: not at all).

use crate::output::emit;
use anyhow::Context;
use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_core::ports::queue::{Queue, QueueSettings, Turn};
use tessera_local::SqliteQueue;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Backlog sizes to measure; the first is the baseline of the ratios.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    pub sizes: Vec<u32>,
    /// Tenants' lanes the messages are spread over.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub lanes: u32,
    /// Receive-and-delete rounds timed at each size (two messages each, as a worker of
    /// concurrency two asks).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub receives: u32,
}

#[derive(Serialize)]
struct Size {
    waiting: u32,
    mean_receive_us: f64,
    over_baseline: f64,
}

#[derive(Serialize)]
struct Report {
    lanes: u32,
    receives: u32,
    sizes: Vec<Size>,
}

pub async fn run(json: bool, args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(!args.sizes.is_empty(), "--sizes needs at least one size");
    let mut sizes: Vec<Size> = Vec::new();
    for &waiting in &args.sizes {
        let dir = tempfile::tempdir().context("a scratch directory")?;
        let queue = SqliteQueue::open(&dir.path().join("queue.db"))?;
        queue.ensure("tasks", QueueSettings::default()).await?;
        // Enough messages that every timed round finds its two.
        let total = waiting + 2 * args.receives;
        for i in 0..total {
            let turn = Turn {
                lane: format!("tenant-{}", i % args.lanes),
                priority: 0,
            };
            queue
                .send_in_turn("tasks", "{}", Duration::ZERO, &turn)
                .await?;
        }
        let started = Instant::now();
        for _ in 0..args.receives {
            for d in queue.receive("tasks", 2, Duration::ZERO).await? {
                queue.delete("tasks", &d.receipt).await?;
            }
        }
        let mean_receive_us = started.elapsed().as_secs_f64() * 1e6 / args.receives as f64;
        let base = sizes.first().map_or(mean_receive_us, |b| b.mean_receive_us);
        sizes.push(Size {
            waiting,
            mean_receive_us,
            over_baseline: mean_receive_us / base.max(1e-9),
        });
    }
    let report = Report {
        lanes: args.lanes,
        receives: args.receives,
        sizes,
    };
    let r = &report;
    emit(json, r, || {
        let mut s = format!(
            "embedded queue, {} lanes, {} receive+delete rounds per size\n",
            r.lanes, r.receives
        );
        for z in &r.sizes {
            s += &format!(
                "  {:>7} waiting: {:>8.1} µs per receive  ({:.2}× the first size)\n",
                z.waiting, z.mean_receive_us, z.over_baseline
            );
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}
