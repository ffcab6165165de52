//! `tessera reconstruct IMAGES_DIR --out OUT`: the main job in embedded mode — photos
//! become a bundle-adjusted (optionally georeferenced) sparse model with exports and a
//! report, with live progress, Ctrl-C to cancel and `--resume` to continue.

use super::reconstruct_report::{Report, build_report};
use crate::embedded;
use crate::output::emit;
use anyhow::{Context, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_core::TenantId;
use tessera_core::crs::OutputCrs;
use tessera_core::event::EventKind;
use tessera_core::job::{CancelMode, JobStatus};
use tessera_core::spec::{
    BaMode, BackendSpec, CameraModel, ExportFormat, Georef, MapperKind, PairStrategy,
};
use tessera_engine::{Engine, Worker};
use tessera_jobs::reconstruct::recipe::{self, GeorefAsk, PairsAsk, PhotoFact, Placement, Recipe};
use tessera_jobs::reconstruct::{self};
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
    #[arg(long, default_value_t = recipe::SEQUENTIAL_OVERLAP, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub overlap: u32,
    /// Spatial pairs: neighbours per image.
    #[arg(long, default_value_t = recipe::SPATIAL_NEIGHBOURS, value_parser = clap::value_parser!(u32).range(1..=500))]
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
    /// Map in overlapping clusters that run in parallel and are merged: `auto` (above
    /// 400 photos), `none`, a cluster size (`25`), or a size and the photos each cluster
    /// shares with its neighbours (`25/8`; default a third of the size).
    #[arg(long, default_value = "auto")]
    pub split: tessera_jobs::reconstruct::recipe::SplitAsk,
    /// Georeferencing.
    #[arg(long, value_enum, default_value_t = GeorefArg::Auto)]
    pub georef: GeorefArg,
    /// Place the model by ground control points: an OpenDroneMap `gcp_list.txt` (first
    /// line the coordinate system, then `geo_x geo_y geo_z im_x im_y image_name
    /// [gcp_name]` per mark). The survey exports default to its coordinate system.
    #[arg(long)]
    pub gcp: Option<PathBuf>,
    /// Exports, comma-separated: ply, nvm, colmap-text, colmap-bin, points-bin, and for a
    /// georeferenced model las, laz (points in `--crs`) and cameras-geojson.
    #[arg(long, value_delimiter = ',', default_value = "ply,colmap-bin")]
    pub export: Vec<String>,
    /// Coordinate system of the las, laz and cameras-geojson exports: EPSG:NNNN, or auto
    /// (the UTM zone of the photos). Default: auto for an east-north-up model, EPSG:4978
    /// for `--georef gps-ecef`.
    #[arg(long, value_parser = parse_crs)]
    pub crs: Option<OutputCrs>,
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
    /// Tasks run at once in this process (default: one, or for a split run one per
    /// cluster up to the number of CPUs; the memory gate holds back what does not fit).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub workers: Option<u32>,
    /// Print the spec this run would submit and the choices made from the photos, and
    /// run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Set a stage's memory estimate for its first attempt, e.g. `map=20` (MB); the
    /// stage is killed above twice that and retried one resource class up.
    #[arg(long, value_parser = parse_limit)]
    pub memory_limit: Vec<(String, u64)>,
}

fn parse_crs(s: &str) -> Result<OutputCrs, String> {
    s.parse()
}

fn parse_limit(s: &str) -> Result<(String, u64), String> {
    let (stage, mb) = s.split_once('=').ok_or("use STAGE=MB, e.g. map=20")?;
    let mb: u64 = mb
        .parse()
        .map_err(|_| format!("`{mb}` is not a number of megabytes"))?;
    Ok((stage.to_string(), mb))
}

/// The ground control file `--gcp` names: its object-store key (named by its content,
/// so the same file makes the same spec), its bytes and what it says; every problem
/// named with the file's path before anything runs.
pub struct ControlInput {
    /// Where it is stored.
    pub key: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Parsed.
    pub file: tessera_core::gcp::ControlFile,
}

/// `--gcp`, read and checked.
pub fn control_input(args: &Args) -> anyhow::Result<Option<ControlInput>> {
    let Some(path) = &args.gcp else {
        return Ok(None);
    };
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read the ground control file {}", path.display()))?
        .len();
    if size > tessera_core::gcp::MAX_BYTES {
        bail!(
            "{} is {size} bytes; a gcp_list.txt is a line per mark, and files over {} bytes are refused",
            path.display(),
            tessera_core::gcp::MAX_BYTES
        );
    }
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the ground control file {}", path.display()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        anyhow::anyhow!(
            "{} is not text; --gcp takes an OpenDroneMap gcp_list.txt",
            path.display()
        )
    })?;
    let file =
        tessera_core::gcp::parse(text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    Ok(Some(ControlInput {
        key: format!("inputs/gcp/{}.txt", &digest[..32]),
        bytes,
        file,
    }))
}

/// What `args` ask for, as a [`Recipe`]: the flags translated, every choice left to the
/// photos made by [`recipe::prepare`], as for the API.
pub fn recipe_from(args: &Args) -> anyhow::Result<Recipe> {
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
                    "--export `{e}` is not one of ply, nvm, colmap-text, colmap-bin, points-bin, las, laz, cameras-geojson"
                )
            })?;
        exports.push(f);
    }
    let pairs = match args.pairs {
        Pairs::Auto => PairsAsk::Auto,
        Pairs::Exhaustive => PairsAsk::Given(PairStrategy::Exhaustive),
        Pairs::Sequential => PairsAsk::Given(PairStrategy::Sequential {
            overlap: args.overlap,
        }),
        Pairs::Spatial => PairsAsk::Given(PairStrategy::Spatial {
            max_neighbors: args.neighbors,
            max_distance_m: recipe::SPATIAL_DISTANCE_M,
        }),
        Pairs::Vocabtree => {
            let tree = args
                .vocab_tree
                .as_ref()
                .context("--pairs vocabtree needs --vocab-tree FILE")?;
            let tree = std::fs::canonicalize(tree)
                .with_context(|| format!("vocabulary tree {} does not exist", tree.display()))?;
            PairsAsk::Given(PairStrategy::VocabTree {
                tree: tree.display().to_string(),
                num_images: 20,
            })
        }
    };
    Ok(Recipe {
        camera_model,
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
        split: args.split,
        georef: match (control_input(args)?, args.georef) {
            (Some(_), GeorefArg::None) => {
                bail!(
                    "--gcp places the model by ground control, and --georef none leaves it in its own frame; drop one"
                )
            }
            (Some(c), GeorefArg::GpsEcef) => GeorefAsk::Given(Georef::Gcp {
                file: c.key,
                target_epsg: Some(4978),
            }),
            (Some(c), _) => GeorefAsk::Given(Georef::Gcp {
                file: c.key,
                target_epsg: None,
            }),
            (None, GeorefArg::Auto) => GeorefAsk::Auto,
            (None, GeorefArg::None) => GeorefAsk::Given(Georef::None),
            (None, GeorefArg::Gps) => GeorefAsk::Given(Georef::Gps { target_epsg: None }),
            (None, GeorefArg::GpsEcef) => GeorefAsk::Given(Georef::Gps {
                target_epsg: Some(4978),
            }),
        },
        exports,
        crs: args.crs,
        max_features: args.max_features,
        max_image_size: args.max_image_size,
        respect_exif_orientation: !args.ignore_exif_orientation,
        per_image_intrinsics: args.per_image_intrinsics,
    })
}

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
