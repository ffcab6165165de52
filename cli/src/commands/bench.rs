//! `tessera bench engine|chaos`: measurements that later checks call exactly so.

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
    Chaos(super::chaos::Args),
    /// The same COLMAP commands run bare and through Tessera on the same photos.
    Reconstruct(ReconstructBench),
    /// Face processing per photo on one core: decode, detect, embed, match, blur,
    /// encode variants and thumbnails.
    Photos(super::blur::PhotosBench),
    /// Recall, over-blur and leaks of the privacy pipeline on phone-shaped photos
    /// (rotated, tagged and untagged, tilted heads, small faces, HEIC).
    Privacy(super::bench_privacy::Args),
    /// Size and start-to-ready time of each Lambda handler binary.
    Handlers(super::bench_handlers::Args),
}

#[derive(clap::Args, Debug)]
pub struct ReconstructBench {
    /// Folder of photos.
    pub images: PathBuf,
    /// Pairs for both runs.
    #[arg(long, value_enum, default_value_t = super::reconstruct::Pairs::Auto)]
    pub pairs: super::reconstruct::Pairs,
    /// Sequential overlap.
    #[arg(long, default_value_t = 8)]
    pub overlap: u32,
    /// SIFT features per image.
    #[arg(long, default_value_t = 4096)]
    pub max_features: u32,
    /// Longest image side for features.
    #[arg(long, default_value_t = 1000)]
    pub max_image_size: u32,
}

pub async fn run(json: bool, cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Engine { tasks, workers } => {
            engine(json, tasks as usize, workers as usize).await
        }
        BenchCommand::Chaos(args) => super::chaos::run(json, args).await,
        BenchCommand::Reconstruct(b) => reconstruct(json, b).await,
        BenchCommand::Photos(b) => super::blur::bench(json, b).await,
        BenchCommand::Handlers(a) => super::bench_handlers::run(json, a).await,
        BenchCommand::Privacy(a) => super::bench_privacy::run(json, a).await,
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
        if j.finished() >= j.tasks_total {
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

#[derive(Serialize)]
struct ReconstructReport {
    images: usize,
    bare_s: f64,
    tessera_s: f64,
    ratio: f64,
    bare_registered: usize,
    tessera_registered: u64,
    bare_points: usize,
    tessera_points: u64,
    /// Attempts over all stages (one each when nothing was retried).
    tessera_attempts: u64,
    /// Per stage: wall time and peak RSS, for the memory model.
    tessera_stages: Vec<serde_json::Value>,
    colmap_version: String,
    /// The pairs both runs matched (`--pairs auto` chooses from the photos).
    pairs: tessera_jobs::reconstruct::pairing::Choice,
}

/// Run one COLMAP command bare, failing loudly.
fn bare(args: &[String]) -> anyhow::Result<()> {
    let out = std::process::Command::new(tessera_sfm::colmap::program())
        .args(args)
        .output()
        .context("cannot run colmap")?;
    if !out.status.success() {
        anyhow::bail!(
            "bare `colmap {}` failed: {}",
            args[0],
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok(())
}

async fn reconstruct(json: bool, b: ReconstructBench) -> anyhow::Result<ExitCode> {
    use super::reconstruct::{Args, Ba, GeorefArg, Mapper, Pairs};
    let files = crate::photos::list_images(&b.images)?;
    let backend =
        tessera_jobs::reconstruct::stages::backend().map_err(|e| anyhow::anyhow!(e.message))?;
    let scratch = Scratch::new("bench-reconstruct")?;
    let args = Args {
        images: b.images.clone(),
        out: scratch.path().join("out"),
        pairs: b.pairs,
        overlap: b.overlap,
        neighbors: 8,
        vocab_tree: None,
        mapper: Mapper::Incremental,
        ba: Ba::Standard,
        georef: GeorefArg::None,
        export: vec!["colmap-bin".into()],
        camera_model: "SIMPLE_RADIAL".into(),
        max_features: b.max_features,
        max_image_size: b.max_image_size,
        ignore_exif_orientation: false,
        resume: false,
        workers: 1,
        memory_limit: Vec::new(),
    };
    if matches!(b.pairs, Pairs::Vocabtree) {
        anyhow::bail!("the bench runs exhaustive, sequential or spatial pairs");
    }

    // Bare: the same commands as a plain sequence, no Tessera.
    let bare_dir = scratch.path().join("bare");
    let images = bare_dir.join("images");
    std::fs::create_dir_all(&images)?;
    for f in &files {
        std::fs::copy(f, images.join(f.file_name().context("file name")?))?;
    }
    // The very spec Tessera runs below, so both sides run the same COLMAP options.
    let photos = files
        .iter()
        .map(|f| {
            let name = f
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            std::fs::read(f)
                .map(|b| (name, b))
                .with_context(|| format!("cannot read {}", f.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let auto = super::reconstruct::choose_pairs(&photos);
    let spec = super::reconstruct::spec_from(&args, "bench".into(), Some(&auto))?;
    let pairs = tessera_jobs::reconstruct::pairing::Choice {
        strategy: spec.pairs.clone(),
        why: if b.pairs == Pairs::Auto {
            auto.why.clone()
        } else {
            "given with --pairs".into()
        },
    };
    use tessera_sfm::colmap::commands;
    let db = bare_dir.join("database.db");
    let (sparse, adjusted) = (bare_dir.join("sparse"), bare_dir.join("adjusted"));
    std::fs::create_dir_all(&sparse)?;
    std::fs::create_dir_all(&adjusted)?;
    let t0 = Instant::now();
    bare(&commands::extract(
        &spec,
        &db,
        &images,
        backend.info().cuda,
        true,
    ))?;
    bare(&commands::match_pairs(
        &spec.pairs,
        &db,
        backend.info().cuda,
        None,
    ))?;
    let map = vec![
        "mapper".to_string(),
        "--database_path".into(),
        db.display().to_string(),
        "--image_path".into(),
        images.display().to_string(),
        "--output_path".into(),
        sparse.display().to_string(),
    ];
    bare(&map)?;
    let best = std::fs::read_dir(&sparse)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| tessera_sfm::model_bin::read(&p).ok().map(|r| (p, r)))
        .max_by_key(|(_, r)| r.images.len())
        .context("bare COLMAP registered no images")?;
    for args in commands::bundle_adjust(
        tessera_core::spec::BaMode::Standard,
        &best.0,
        &adjusted,
        &adjusted,
    ) {
        bare(&args)?;
    }
    let bare_s = t0.elapsed().as_secs_f64();
    let bare_model = tessera_sfm::model_bin::read(&adjusted)?;

    let t1 = Instant::now();
    let report =
        super::reconstruct::reconstruct(&scratch.path().join("state"), &args, false).await?;
    let tessera_s = t1.elapsed().as_secs_f64();
    let r = ReconstructReport {
        images: files.len(),
        bare_s,
        tessera_s,
        ratio: tessera_s / bare_s,
        bare_registered: bare_model.images.len(),
        tessera_registered: report.registered_images,
        bare_points: bare_model.points.len(),
        tessera_points: report.points,
        tessera_attempts: report
            .stages
            .iter()
            .filter_map(|s| s["attempts"].as_u64())
            .sum(),
        tessera_stages: report
            .stages
            .iter()
            .map(|s| serde_json::json!({ "stage": s["stage"], "wall_s": s["wall_s"], "peak_rss_bytes": s["peak_rss_bytes"] }))
            .collect(),
        colmap_version: backend.info().version.clone(),
        pairs,
    };
    emit(json, &r, || {
        format!(
            "{} photos: bare COLMAP {:.1} s ({} registered, {} points); Tessera {:.1} s ({} registered, {} points); ratio {:.3}",
            r.images,
            r.bare_s,
            r.bare_registered,
            r.bare_points,
            r.tessera_s,
            r.tessera_registered,
            r.tessera_points,
            r.ratio
        )
    });
    Ok(if report.status == "succeeded" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
