//! `tessera bench fairness`: how long one tenant's single photo waits behind another
//! tenant's burst, in embedded mode with the real photo pipeline.
//!
//! Tenant A uploads `--photos` photos, then tenant B uploads one, and workers start. B's
//! time to published is reported against A's throughput in the same run, as "B waited
//! the time of this many of A's photos". The baseline, in the same run, is the same B
//! photo submitted as one more photo of tenant A (one lane: what claims oldest first
//! give), so the ratio shows what taking turns between tenants buys.

use crate::embedded;
use crate::output::emit;
use anyhow::Context;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_core::photo::Photo;
use tessera_core::{PhotoId, TenantId, projects, records};
use tessera_engine::{Engine, Worker};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Photos tenant A uploads before tenant B's one.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub photos: u32,
    /// Tasks run at once (the worker's concurrency).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,
    /// The photo every upload is a copy of.
    #[arg(long, default_value = "../shared/testdata/faces/grace_hopper.jpg")]
    pub photo: PathBuf,
}

#[derive(Serialize)]
struct Run {
    /// Whether B's photo waited in its own tenant's lane (`true`) or as A's (baseline).
    own_lane: bool,
    /// Seconds from the workers' start to B's photo being servable.
    b_seconds_to_published: f64,
    /// Photos of A published before B's.
    a_published_before_b: usize,
    /// A's photos per second over the whole run.
    a_photos_per_second: f64,
    /// B's wait in A's photos: b_seconds_to_published × a_photos_per_second.
    b_wait_in_a_photos: f64,
    /// Seconds until every photo was servable.
    total_seconds: f64,
}

#[derive(Serialize)]
struct Report {
    photos: u32,
    concurrency: u32,
    runs: Vec<Run>,
    /// The fair run's B wait over the baseline's (lower is better).
    fair_over_baseline: f64,
}

pub async fn run(json: bool, args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.photo.is_file(),
        "--photo {} is not a file; point it at a JPEG",
        args.photo.display()
    );
    let mut runs = Vec::new();
    for own_lane in [true, false] {
        let scratch = tempfile::tempdir().context("a scratch state directory")?;
        runs.push(one_run(scratch.path(), &args, own_lane).await?);
    }
    let fair_over_baseline = runs[0].b_wait_in_a_photos / runs[1].b_wait_in_a_photos.max(1e-9);
    let report = Report {
        photos: args.photos,
        concurrency: args.concurrency,
        runs,
        fair_over_baseline,
    };
    let r = &report;
    emit(json, r, || {
        let mut s = format!(
            "tenant A: {} photos, then tenant B: 1; {} tasks at once\n",
            r.photos, r.concurrency
        );
        for run in &r.runs {
            s.push_str(&format!(
                "  B {}: published after {:.1} s, {} of A's before it ({:.1} of A's photos' time); A {:.2} photos/s; all in {:.1} s\n",
                if run.own_lane { "in its own lane" } else { "as one of A's (baseline)" },
                run.b_seconds_to_published,
                run.a_published_before_b,
                run.b_wait_in_a_photos,
                run.a_photos_per_second,
                run.total_seconds
            ));
        }
        s.push_str(&format!(
            "  fair / baseline wait: {:.3}",
            r.fair_over_baseline
        ));
        s
    });
    Ok(ExitCode::SUCCESS)
}

async fn one_run(state: &Path, args: &Args, own_lane: bool) -> anyhow::Result<Run> {
    let (_dir, engine) = embedded::engine(state, None).await?;
    let store = engine.ports().store.clone();
    let a_tenant: TenantId = "tenant-a".parse()?;
    let b_tenant: TenantId = if own_lane {
        "tenant-b".parse()?
    } else {
        a_tenant.clone()
    };
    let expand = tessera_faces::blur::DEFAULT_EXPAND;
    let a = projects::create(store.as_ref(), a_tenant, "burst", Some(0.363), expand).await?;
    let b = projects::create(store.as_ref(), b_tenant, "single", Some(0.363), expand).await?;
    let mut a_photos = Vec::with_capacity(args.photos as usize);
    for _ in 0..args.photos {
        a_photos.push(
            crate::commands::photos::upload(&engine, &a, &args.photo)
                .await?
                .0,
        );
    }
    let (b_photo, _) = crate::commands::photos::upload(&engine, &b, &args.photo).await?;

    let stop = CancellationToken::new();
    let worker = Worker::new(engine.clone(), args.concurrency as usize, None);
    let s = stop.clone();
    let started = Instant::now();
    let handle = tokio::spawn(async move { worker.run(s).await });
    let mut b_at = None;
    let mut a_before_b = 0;
    let mut pending: Vec<PhotoId> = a_photos.clone();
    loop {
        if b_at.is_none() && published(&engine, b_photo).await? {
            b_at = Some(started.elapsed());
            a_before_b = args.photos as usize - pending.len();
        }
        let mut still = Vec::with_capacity(pending.len());
        for id in pending {
            if !published(&engine, id).await? {
                still.push(id);
            }
        }
        pending = still;
        if pending.is_empty() && b_at.is_some() {
            break;
        }
        anyhow::ensure!(
            !handle.is_finished(),
            "the worker stopped before every photo was published"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = started.elapsed();
    stop.cancel();
    handle.await.context("the worker task")?;
    let b_seconds = b_at.expect("set before the loop ends").as_secs_f64();
    let a_rate = args.photos as f64 / total.as_secs_f64();
    Ok(Run {
        own_lane,
        b_seconds_to_published: b_seconds,
        a_published_before_b: a_before_b,
        a_photos_per_second: a_rate,
        b_wait_in_a_photos: b_seconds * a_rate,
        total_seconds: total.as_secs_f64(),
    })
}

/// Whether the photo's files may be served (its row exists and is published at its
/// project's current subjects).
async fn published(engine: &Engine, id: PhotoId) -> anyhow::Result<bool> {
    let store = engine.ports().store.as_ref();
    let Some(item) = store.get(&records::photo_key(id)).await? else {
        return Ok(false);
    };
    let photo: Photo = records::decode(&item)?;
    let project = projects::load(store, photo.project).await?;
    Ok(photo.servable(project.subjects_rev))
}
