//! `tessera reconstruct IMAGES_DIR --out OUT`: the main job in embedded mode — photos
//! become a bundle-adjusted (optionally georeferenced) sparse model with exports and a
//! report, with live progress, Ctrl-C to cancel and `--resume` to continue. The
//! commands on a finished reconstruction (`relocalize`, `triangulate`) are in
//! [`refine`]; the flags in `args`, the report in `report`.

mod args;
pub mod refine;
mod report;

use crate::embedded;
use crate::output::emit;
use anyhow::{Context, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use report::{Report, build_report};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_core::TenantId;
use tessera_core::event::EventKind;
use tessera_core::job::{CancelMode, JobStatus};
use tessera_core::spec::BackendSpec;
use tessera_core::spec::PairStrategy;
use tessera_engine::{Engine, Worker};
use tessera_jobs::reconstruct::recipe::{self, PhotoFact, Placement};
use tessera_jobs::reconstruct::{self};
use tokio_util::sync::CancellationToken;

pub use args::*;

/// A folder's photos, read once: their bytes and what a recipe is prepared from.
pub struct Folder {
    /// (name, bytes), by name.
    pub photos: Vec<(String, Vec<u8>)>,
    /// What each is, in the same order.
    pub facts: Vec<PhotoFact>,
}

impl Folder {
    /// Read `files`, checking each with the admission a run's ingest applies.
    pub fn read(files: &[PathBuf]) -> anyhow::Result<Folder> {
        let mut photos = Vec::new();
        for path in files {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .context("photo names must be UTF-8")?
                .to_string();
            photos.push((name, bytes));
        }
        photos.sort_by(|a, b| a.0.cmp(&b.0));
        let facts = photos.iter().map(|(n, b)| PhotoFact::read(n, b)).collect();
        Ok(Folder { photos, facts })
    }

    /// The set's object-store prefix: a content address of the names and bytes, so the
    /// same photos make the same spec (and the same job).
    pub fn image_set(&self) -> String {
        let digest = tessera_core::catalog::datasets::digest_of_names(
            self.facts
                .iter()
                .map(|f| (f.name.as_str(), f.content_sha.as_str())),
        );
        format!("images/{}", &digest[..32])
    }

    /// Store the photos under [`Folder::image_set`] (those stored before are kept).
    pub async fn upload(&self, engine: &Engine) -> anyhow::Result<()> {
        let set = self.image_set();
        for (name, bytes) in &self.photos {
            let key = format!("{set}/{name}");
            tessera_core::ports::object_store::validate_key(&key)
                .with_context(|| format!("photo name `{name}` cannot be stored; rename it"))?;
            if engine.ports().objects.head(&key).await?.is_none() {
                engine
                    .ports()
                    .objects
                    .put(&key, bytes.clone().into())
                    .await?;
            }
        }
        Ok(())
    }
}

/// The recipe `args` ask for, prepared over the folder's photos for `backend`.
pub fn prepare(
    args: &Args,
    folder: &Folder,
    backend: BackendSpec,
) -> anyhow::Result<recipe::Prepared> {
    if let Some(c) = control_input(args)? {
        let names: std::collections::HashSet<&str> =
            folder.photos.iter().map(|(n, _)| n.as_str()).collect();
        if let Some(m) = c.file.marks_outside(&names) {
            bail!(
                "{} line {}: `{}` is not one of the photos in {}; mark control points in the run's photos",
                args.gcp
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                m.line,
                m.image,
                args.images.display()
            );
        }
    }
    let place = Placement {
        project: LOCAL_PROJECT.into(),
        image_set: folder.image_set(),
        backend,
    };
    Ok(recipe::prepare(
        &recipe_from(args)?,
        place,
        &folder.facts,
        &args.images.display().to_string(),
    )?)
}

/// Run (or continue) a reconstruction and write its outputs; `ui` shows progress bars.
pub async fn reconstruct(state: &Path, args: &Args, ui: bool) -> anyhow::Result<Report> {
    let started = Instant::now();
    let files = crate::photos::list_images(&args.images)?;
    let backend_spec = args.engine.resolve()?;
    let backend = tessera_jobs::reconstruct::stages::backend_for(&backend_spec)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let folder = Folder::read(&files)?;
    let prepared = prepare(args, &folder, backend_spec)?;
    let spec = &prepared.spec;
    backend.info().check_spec(spec)?;
    if ui {
        if let Some(c) = &prepared.pairs_auto {
            eprintln!("pairs: {} ({})", c.strategy_name(), c.why);
        }
        if let Some(c) = &prepared.georef_auto {
            eprintln!("georeference: {}", c.why);
        }
        if let Some(c) = &prepared.split_auto {
            eprintln!("split: {}", c.why);
        }
        eprintln!("engine: {} {}", backend.info().name, backend.info().version);
        if let Some(r) = &prepared.resolution_auto {
            eprintln!("{}", r.line());
        }
    }
    let (_dir, engine) = embedded::engine(state, Some(Duration::from_secs(30))).await?;
    folder.upload(&engine).await?;
    if let Some(c) = control_input(args)? {
        engine.ports().objects.put(&c.key, c.bytes.into()).await?;
    }
    // The tree `--vocab-tree` gave, under the key the recipe named it by (hashed once).
    if let (
        PairStrategy::VocabTree {
            tree: Some(key), ..
        },
        Some(path),
    ) = (&spec.pairs, &args.vocab_tree)
    {
        engine.ports().objects.put_file(key, path).await?;
    }
    let count = folder.photos.len();
    let mut plan = reconstruct::plan(
        spec,
        TenantId::local(),
        None,
        // Named by its folder (`.` by what it is), as the API names a run by its dataset.
        &reconstruct::default_label(
            &std::fs::canonicalize(&args.images)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| args.images.display().to_string()),
            spec,
            count,
        ),
        prepared.images,
        prepared.megapixels,
    )?;
    for (stage, mb) in &args.memory_limit {
        let t = plan
            .tasks
            .iter_mut()
            .find(|t| &t.name == stage)
            .with_context(|| {
                format!("--memory-limit names `{stage}`, which is not a stage of this job")
            })?;
        t.memory_estimate = Some(mb * 1024 * 1024);
        t.resource_class = tessera_core::task::ResourceClass::Small;
    }
    let submitted = engine.submit(plan).await?;
    let job_id = submitted.job_id;
    if !submitted.existing {
        prepared.announce(&engine, job_id).await;
    }
    if submitted.existing {
        let released = engine
            .release_dead_leases(job_id, embedded::local_owner_is_dead)
            .await?;
        if released > 0 && ui {
            eprintln!("{released} stage(s) held by a worker that died are taken over");
        }
        let job = engine.job(job_id).await?;
        let damaged = reconstruct::requeue_damaged(&engine, job_id).await?;
        if !damaged.is_empty() && ui {
            eprintln!(
                "checkpoints of {} are missing or damaged: those stages run again",
                damaged.join(", ")
            );
        }
        if matches!(job.status(), JobStatus::Failed | JobStatus::Cancelled) {
            if !args.resume {
                bail!(
                    "this reconstruction (job {job_id}) ran before and ended {}; add --resume to continue it, or see `tessera jobs show {job_id}`",
                    job.status()
                );
            }
            engine.resume(job_id).await?;
        }
    }

    let workers = args.workers.unwrap_or_else(|| {
        let clusters = spec.split.map_or(1, |s| s.clusters_for(prepared.images));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        clusters.min(cpus).clamp(1, 16) as u32
    });
    let job = drive(&engine, job_id, workers, submitted.existing, ui).await?;
    let mut report = build_report(&engine, job_id, &job, backend.info(), started, args).await?;
    report.pairs_auto = prepared.pairs_auto;
    report.georef_auto = prepared.georef_auto;
    report.split_auto = prepared.split_auto;
    report.resolution_auto = prepared.resolution_auto;
    Ok(report)
}

/// Run the job with in-process workers until it finishes, showing progress; the first
/// Ctrl-C cancels cooperatively, the second by force.
pub async fn drive(
    engine: &Engine,
    job_id: tessera_core::JobId,
    workers: u32,
    existing: bool,
    ui: bool,
) -> anyhow::Result<tessera_core::job::Job> {
    let stop = CancellationToken::new();
    let worker = Worker::new(
        engine.clone(),
        workers as usize,
        Some(Duration::from_secs(5)),
    );
    let s = stop.clone();
    let worker_task = tokio::spawn(async move { worker.run(s).await });
    let bars = if ui {
        MultiProgress::new()
    } else {
        MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden())
    };
    let stages = bars.add(ProgressBar::new(0));
    stages.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] tasks {pos}/{len} {msg}")
            .expect("template"),
    );
    let phase = bars.add(ProgressBar::new(0));
    phase
        .set_style(ProgressStyle::with_template("  {bar:30} {pos}/{len} {msg}").expect("template"));
    let interrupted = super::interrupted();
    tokio::pin!(interrupted);
    let mut cancels = 0;
    // A job seen before shows only what happens from now on.
    let mut seen = if existing {
        engine.ports().events.last_seq(job_id).await?
    } else {
        0
    };
    let job = loop {
        let job = engine.job(job_id).await?;
        stages.set_length(job.tasks_total as u64);
        stages.set_position(job.counters.succeeded as u64);
        for e in engine.ports().events.read_after(job_id, seen, 500).await? {
            seen = e.seq;
            match &e.kind {
                EventKind::PhaseStarted { phase: p } => {
                    stages.set_message(p.to_string());
                    phase.set_position(0);
                    phase.set_length(0);
                    phase.set_message(p.to_string());
                }
                EventKind::PhaseProgress {
                    phase: p,
                    current,
                    total,
                    ..
                } => {
                    phase.set_length(total.unwrap_or(0));
                    phase.set_position(*current);
                    phase.set_message(p.to_string());
                }
                EventKind::Warning { message } => stages.println(format!("warning: {message}")),
                EventKind::Error { message, .. } => stages.println(format!("error: {message}")),
                EventKind::SnapshotAvailable { snapshot, .. } => {
                    stages.println(format!("snapshot {snapshot} sealed"))
                }
                _ => {}
            }
        }
        if job.is_over() {
            break job;
        }
        tokio::select! {
            _ = &mut interrupted => {
                cancels += 1;
                let mode = if cancels == 1 { CancelMode::Cooperative } else { CancelMode::Force };
                stages.println(format!("cancelling ({mode:?}); interrupt again to force; continue later with --resume"));
                engine.cancel(job_id, mode).await?;
                interrupted.set(super::interrupted());
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    };
    stages.finish_and_clear();
    phase.finish_and_clear();
    stop.cancel();
    let _ = worker_task.await;
    Ok(job)
}

pub async fn run(state: &Path, json: bool, args: Args) -> anyhow::Result<ExitCode> {
    if args.dry_run {
        return dry_run(json, &args);
    }
    let report = reconstruct(state, &args, !json).await?;
    let ok = report.status == "succeeded";
    emit(json, &report, || {
        if ok {
            format!(
                "reconstruction {}: {} of {} photos registered, {} points, mean reprojection error {:.3} px, {:.1} s\noutputs in {}: {}\nreport: {}",
                report.job_id,
                report.registered_images,
                report.images,
                report.points,
                report.metrics["mean_reprojection_error"]
                    .as_f64()
                    .unwrap_or(0.0),
                report.elapsed_s,
                args.out.display(),
                report.outputs.join(", "),
                args.out.join("report.json").display()
            )
        } else {
            let why: Vec<String> = report
                .stages
                .iter()
                .filter_map(|s| {
                    s["last_error"]["message"]
                        .as_str()
                        .map(|m| format!("{}: {m}", s["stage"].as_str().unwrap_or("?")))
                })
                .collect();
            format!(
                "reconstruction {} {}:\n  {}\nsee `tessera events {}`; continue with --resume",
                report.job_id,
                report.status,
                why.join("\n  "),
                report.job_id
            )
        }
    });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--dry-run`: the spec this run would submit, its fingerprints and each choice made
/// from the photos with why; nothing is stored or run (the API's `?validate_only=true`).
fn dry_run(json: bool, args: &Args) -> anyhow::Result<ExitCode> {
    let files = crate::photos::list_images(&args.images)?;
    let folder = Folder::read(&files)?;
    let prepared = prepare(args, &folder, args.engine.resolve()?)?;
    let view = prepared.view();
    emit(json, &view, || {
        let mut lines = vec![format!(
            "{} of {} photos would run; fingerprint {}",
            prepared.images,
            folder.photos.len(),
            view["fingerprint"].as_str().unwrap_or_default()
        )];
        if let Some(c) = &prepared.pairs_auto {
            lines.push(format!("pairs: {} ({})", c.strategy_name(), c.why));
        }
        if let Some(c) = &prepared.georef_auto {
            lines.push(format!("georeference: {}", c.why));
        }
        if let Some(c) = &prepared.split_auto {
            lines.push(format!("split: {}", c.why));
        }
        if let Some(r) = &prepared.resolution_auto {
            lines.push(r.line());
        }
        lines.push(serde_json::to_string_pretty(&view["spec"]).unwrap_or_default());
        lines.join("\n")
    });
    Ok(ExitCode::SUCCESS)
}
