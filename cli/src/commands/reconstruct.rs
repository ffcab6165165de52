//! `tessera reconstruct IMAGES_DIR --out OUT`: the main job in embedded mode — photos
//! become a bundle-adjusted (optionally georeferenced) sparse model with exports and a
//! report, with live progress, Ctrl-C to cancel and `--resume` to continue.

use super::reconstruct_report::{Report, build_report};
use crate::embedded;
use crate::output::emit;
use anyhow::{Context, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_core::TenantId;
use tessera_core::event::EventKind;
use tessera_core::job::{CancelMode, JobStatus};
use tessera_core::spec::{
    BaMode, BackendSpec, CameraModel, ExportFormat, Georef, MapperKind, PairStrategy,
    ReconstructionSpec,
};
use tessera_engine::{Engine, Worker};
use tessera_jobs::reconstruct::{self, georef_choice, pairing, resolution};
use tokio_util::sync::CancellationToken;

/// The project every embedded reconstruction belongs to.
pub const LOCAL_PROJECT: &str = "00000000000000000000000000";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairs {
    /// Chosen from the photos (tessera_jobs::reconstruct::pairing): every pair up to 60
    /// photos, then neighbours by GPS, then by name order for frames, then every pair
    /// again up to 200 unordered photos.
    Auto,
    Exhaustive,
    Sequential,
    Spatial,
    Vocabtree,
}

/// The reconstruction engine.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineArg {
    /// pycolmap (COLMAP 4) where installed, else the COLMAP command line.
    Auto,
    /// COLMAP 4 through pycolmap.
    Pycolmap,
    /// The COLMAP command line (Debian's 3.8 here; the worker image's CUDA build on AWS).
    Colmap,
}

impl EngineArg {
    /// The backend this names, its version resolved now, at submission.
    pub fn resolve(self) -> anyhow::Result<BackendSpec> {
        use tessera_jobs::reconstruct::stages;
        match self {
            EngineArg::Auto => stages::default_backend(),
            EngineArg::Pycolmap => stages::resolve("pycolmap"),
            EngineArg::Colmap => stages::resolve("colmap"),
        }
        .map_err(|e| anyhow::anyhow!(e.message))
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapper {
    Incremental,
    Hierarchical,
    Global,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ba {
    Standard,
    TwoStage,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeorefArg {
    /// GPS when at least 80 % of three or more photos carry it, else none; a model
    /// that cannot be placed stays in its own frame with a warning.
    Auto,
    None,
    /// Align to EXIF GPS in a local east-north-up frame.
    Gps,
    /// Align to EXIF GPS in earth-centred coordinates (EPSG:4978).
    GpsEcef,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Folder of photos.
    pub images: PathBuf,
    /// Output folder: sparse/0 (COLMAP binary), the exports, report.json.
    #[arg(long)]
    pub out: PathBuf,
    /// How image pairs are chosen.
    #[arg(long, value_enum, default_value_t = Pairs::Auto)]
    pub pairs: Pairs,
    /// Sequential pairs: images matched with each following one.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub overlap: u32,
    /// Spatial pairs: neighbours per image.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub neighbors: u32,
    /// Vocabulary-tree pairs: the tree file.
    #[arg(long)]
    pub vocab_tree: Option<PathBuf>,
    /// Engine: pycolmap (COLMAP 4) where installed, else the COLMAP command line.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,
    /// Mapper (`global` needs the pycolmap engine, or a CUDA COLMAP >= 3.14).
    #[arg(long, value_enum, default_value_t = Mapper::Incremental)]
    pub mapper: Mapper,
    /// Bundle adjustment.
    #[arg(long, value_enum, default_value_t = Ba::Standard)]
    pub ba: Ba,
    /// Georeferencing.
    #[arg(long, value_enum, default_value_t = GeorefArg::Auto)]
    pub georef: GeorefArg,
    /// Exports, comma-separated: ply, nvm, colmap-text, colmap-bin, points-bin.
    #[arg(long, value_delimiter = ',', default_value = "ply,colmap-bin")]
    pub export: Vec<String>,
    /// COLMAP camera model.
    #[arg(long, default_value = "SIMPLE_RADIAL")]
    pub camera_model: String,
    /// SIFT features per image (default: chosen from the photos' size and number).
    #[arg(long)]
    pub max_features: Option<u32>,
    /// Longest image side used for features, in pixels (default: chosen from the photos'
    /// size and number).
    #[arg(long)]
    pub max_image_size: Option<u32>,
    /// Feed COLMAP the pixels as stored, ignoring EXIF orientation (by default a phone
    /// portrait is turned upright first, as every viewer shows it).
    #[arg(long)]
    pub ignore_exif_orientation: bool,
    /// Give every photo its own intrinsics, even where all share one size (photos from
    /// several lenses or zoom settings at one resolution). By default photos of one size
    /// share one camera.
    #[arg(long)]
    pub per_image_intrinsics: bool,
    /// Continue a previous run of the same reconstruction (damaged checkpoints re-run).
    #[arg(long)]
    pub resume: bool,
    /// Tasks run at once in this process.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub workers: u32,
    /// Set a stage's memory estimate for its first attempt, e.g. `map=20` (MB); the
    /// stage is killed above twice that and retried one resource class up.
    #[arg(long, value_parser = parse_limit)]
    pub memory_limit: Vec<(String, u64)>,
}

fn parse_limit(s: &str) -> Result<(String, u64), String> {
    let (stage, mb) = s.split_once('=').ok_or("use STAGE=MB, e.g. map=20")?;
    let mb: u64 = mb
        .parse()
        .map_err(|_| format!("`{mb}` is not a number of megabytes"))?;
    Ok((stage.to_string(), mb))
}

/// The spec `args` ask for; `auto` is the choice for `--pairs auto`, `resolution` the
/// one for a `--max-image-size` / `--max-features` not given.
pub fn spec_from(
    args: &Args,
    image_set: String,
    auto: Option<&pairing::Choice>,
    georef_auto: Option<&georef_choice::GeorefChoice>,
    resolution: &resolution::Resolution,
    backend: BackendSpec,
) -> anyhow::Result<ReconstructionSpec> {
    let camera_model: CameraModel = serde_json::from_value(serde_json::json!(args.camera_model))
        .map_err(|_| {
            anyhow::anyhow!(
                "--camera-model `{}` is not a COLMAP model (SIMPLE_RADIAL, PINHOLE, OPENCV, …)",
                args.camera_model
            )
        })?;
    let mut exports = Vec::new();
    for e in &args.export {
        let f: ExportFormat =
            serde_json::from_value(serde_json::json!(e.trim())).map_err(|_| {
                anyhow::anyhow!(
                    "--export `{e}` is not one of ply, nvm, colmap-text, colmap-bin, points-bin"
                )
            })?;
        if !exports.contains(&f) {
            exports.push(f);
        }
    }
    let pairs = match args.pairs {
        Pairs::Auto => auto
            .map(|c| c.strategy.clone())
            .context("--pairs auto chooses from the photos, and none were given")?,
        Pairs::Exhaustive => PairStrategy::Exhaustive,
        Pairs::Sequential => PairStrategy::Sequential {
            overlap: args.overlap,
        },
        Pairs::Spatial => PairStrategy::Spatial {
            max_neighbors: args.neighbors,
            max_distance_m: 1000.0,
        },
        Pairs::Vocabtree => {
            let tree = args
                .vocab_tree
                .as_ref()
                .context("--pairs vocabtree needs --vocab-tree FILE")?;
            let tree = std::fs::canonicalize(tree)
                .with_context(|| format!("vocabulary tree {} does not exist", tree.display()))?;
            PairStrategy::VocabTree {
                tree: tree.display().to_string(),
                num_images: 20,
            }
        }
    };
    let spec = ReconstructionSpec {
        project: LOCAL_PROJECT.into(),
        image_set,
        backend,
        camera_model,
        max_features: args.max_features.unwrap_or(resolution.max_features),
        max_image_size: args.max_image_size.unwrap_or(resolution.max_image_size),
        pairs,
        mapper: match args.mapper {
            Mapper::Incremental => MapperKind::Incremental,
            Mapper::Hierarchical => MapperKind::Hierarchical,
            Mapper::Global => MapperKind::Global,
        },
        ba: match args.ba {
            Ba::Standard => BaMode::Standard,
            Ba::TwoStage => BaMode::TwoStage,
        },
        georef: match args.georef {
            GeorefArg::Auto => georef_auto.map_or(Georef::None, |c| c.georef.clone()),
            GeorefArg::None => Georef::None,
            GeorefArg::Gps => Georef::Gps { target_epsg: None },
            GeorefArg::GpsEcef => Georef::Gps {
                target_epsg: Some(4978),
            },
        },
        exports,
        respect_exif_orientation: !args.ignore_exif_orientation,
        per_image_intrinsics: args.per_image_intrinsics,
        image_set_digest: None,
        // Chosen for the photos, not asked for: a model that cannot be placed goes on.
        georef_if_possible: args.georef == GeorefArg::Auto
            && georef_auto.is_some_and(|c| c.georef != Georef::None),
        priority: 0,
    };
    spec.validate()?;
    Ok(spec)
}

/// Photos stored for a reconstruction.
pub struct Uploaded {
    /// Their image set (a content address of the whole set).
    pub set: String,
    /// How many.
    pub count: usize,
    /// Mean megapixels.
    pub megapixels: f64,
    /// What they decide where no option is given.
    pub choices: super::photo_choices::PhotoChoices,
}

/// Upload the photos under a content address of the whole set, so the same photos make
/// the same spec (and the same job).
pub async fn upload(engine: &Engine, files: &[PathBuf]) -> anyhow::Result<Uploaded> {
    let mut entries = Vec::new();
    for path in files {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("photo names must be UTF-8")?
            .to_string();
        entries.push((name, hex::encode(Sha256::digest(&bytes)), bytes));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let manifest: String = entries
        .iter()
        .map(|(n, s, _)| format!("{n}\t{s}\n"))
        .collect();
    let set = format!(
        "images/{}",
        &hex::encode(Sha256::digest(manifest.as_bytes()))[..32]
    );
    let mut mp = 0.0;
    let mut counted = 0;
    for (name, _, bytes) in &entries {
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
        if let Ok(s) = imagesize::blob_size(bytes) {
            mp += (s.width * s.height) as f64 / 1e6;
            counted += 1;
        }
    }
    let count = entries.len();
    let photos: Vec<(String, Vec<u8>)> = entries.into_iter().map(|(n, _, b)| (n, b)).collect();
    let choices = super::photo_choices::PhotoChoices::of(&photos);
    Ok(Uploaded {
        set,
        count,
        megapixels: if counted > 0 {
            mp / counted as f64
        } else {
            1.0
        },
        choices,
    })
}

/// Run (or continue) a reconstruction and write its outputs; `ui` shows progress bars.
pub async fn reconstruct(state: &Path, args: &Args, ui: bool) -> anyhow::Result<Report> {
    let started = Instant::now();
    let files = crate::photos::list_images(&args.images)?;
    let (_dir, engine) = embedded::engine(state, Some(Duration::from_secs(30))).await?;
    let backend_spec = args.engine.resolve()?;
    let backend = tessera_jobs::reconstruct::stages::backend_for(&backend_spec)
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let Uploaded {
        set,
        count,
        megapixels,
        choices:
            super::photo_choices::PhotoChoices {
                pairs: choice,
                resolution,
                georef,
            },
    } = upload(&engine, &files).await?;
    let auto = (args.pairs == Pairs::Auto).then_some(choice);
    if let Some(c) = &auto
        && ui
    {
        eprintln!("pairs: {} ({})", c.strategy_name(), c.why);
    }
    let georef_auto = (args.georef == GeorefArg::Auto).then_some(georef);
    if let Some(c) = &georef_auto
        && ui
    {
        eprintln!("georeference: {}", c.why);
    }
    if ui {
        eprintln!("engine: {} {}", backend.info().name, backend.info().version);
    }
    let chosen_resolution =
        (args.max_image_size.is_none() || args.max_features.is_none()).then(|| resolution.clone());
    if let Some(r) = &chosen_resolution
        && ui
    {
        eprintln!("{}", r.line());
    }
    let spec = spec_from(
        args,
        set,
        auto.as_ref(),
        georef_auto.as_ref(),
        &resolution,
        backend_spec,
    )?;
    backend.info().check_spec(&spec)?;
    let mut plan = reconstruct::plan(
        &spec,
        TenantId::local(),
        None,
        // Named by its folder (`.` by what it is), as the API names a run by its dataset.
        &reconstruct::default_label(
            &std::fs::canonicalize(&args.images)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| args.images.display().to_string()),
            &spec,
            count,
        ),
        count,
        megapixels,
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
        if let Some(c) = &auto {
            c.announce(&engine, job_id).await;
        }
        if let Some(r) = &chosen_resolution {
            r.announce(&engine, job_id).await;
        }
        if let Some(g) = &georef_auto {
            g.announce(&engine, job_id).await;
        }
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

    let job = drive(&engine, job_id, args.workers, submitted.existing, ui).await?;
    let mut report = build_report(&engine, job_id, &job, backend.info(), started, args).await?;
    report.pairs_auto = auto;
    report.georef_auto = georef_auto;
    report.resolution_auto = chosen_resolution;
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
        if job.finished() >= job.tasks_total {
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
