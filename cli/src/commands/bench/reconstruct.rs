//! `tessera bench reconstruct DIR`: the engines a user would pick, on the same photos in
//! one run — bare COLMAP (the baseline of every ratio), and Tessera on the COLMAP command
//! line and on COLMAP 4 through pycolmap (incremental and global) — with each run's wall
//! and CPU time, peak memory, per-stage figures and what it produced.

use super::Scratch;
use crate::output::emit;
use anyhow::Context;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct ReconstructBench {
    /// Folder of photos.
    pub images: PathBuf,
    /// Pairs for both runs.
    #[arg(long, value_enum, default_value_t = crate::commands::reconstruct::Pairs::Auto)]
    pub pairs: crate::commands::reconstruct::Pairs,
    /// Sequential overlap.
    #[arg(long, default_value_t = 8)]
    pub overlap: u32,
    /// SIFT features per image (default: chosen from the photos, as `reconstruct` does).
    #[arg(long)]
    pub max_features: Option<u32>,
    /// Longest image side for features (default: chosen from the photos).
    #[arg(long)]
    pub max_image_size: Option<u32>,
    /// The runs to compare, in order; the first `bare` is the baseline of the ratios.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bare,colmap,pycolmap,pycolmap-global"
    )]
    pub engines: Vec<BenchEngine>,
}

/// One engine's run in the comparison.
#[derive(Serialize, Clone)]
struct EngineRun {
    /// `bare colmap`, or `tessera` with the backend below.
    runner: String,
    backend: String,
    version: String,
    mapper: String,
    /// Whether this is what `tessera reconstruct DIR` runs with no options.
    default: bool,
    wall_s: f64,
    /// User + system CPU of the engine processes (and, for Tessera, its own process).
    cpu_s: f64,
    /// Largest resident set of one engine process.
    peak_rss_bytes: u64,
    registered: u64,
    points: u64,
    mean_reprojection_error: Option<f64>,
    /// Wall and CPU time over the bare COLMAP baseline's, measured in this run.
    wall_ratio: Option<f64>,
    cpu_ratio: Option<f64>,
    /// Matching's wall time over the baseline's, in this run.
    match_ratio: Option<f64>,
    /// Per stage: wall time (and, for Tessera, peak RSS and attempts).
    stages: Vec<serde_json::Value>,
    /// What the run produced that is worth knowing (the baseline's mapper building
    /// no model, for one).
    note: Option<String>,
    error: Option<String>,
}

#[derive(Serialize)]
struct ReconstructReport {
    images: usize,
    /// The longest side and features every run used.
    max_image_size: u32,
    max_features: u32,
    /// The pairs every run matched (`--pairs auto` chooses from the photos).
    pairs: tessera_jobs::reconstruct::pairing::Choice,
    runs: Vec<EngineRun>,
}

/// Which runs the comparison makes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchEngine {
    /// The COLMAP command line run bare, no Tessera: the baseline.
    Bare,
    /// Tessera driving the COLMAP command line.
    Colmap,
    /// Tessera driving COLMAP 4 through pycolmap, incremental mapper.
    Pycolmap,
    /// Tessera driving COLMAP 4 through pycolmap, global mapper.
    PycolmapGlobal,
}

/// CPU seconds and the largest resident set of this process's reaped children so far.
fn children_usage() -> (f64, u64) {
    usage(libc::RUSAGE_CHILDREN)
}

fn usage(who: libc::c_int) -> (f64, u64) {
    // SAFETY: getrusage writes one plain struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        secs(u.ru_utime) + secs(u.ru_stime),
        u.ru_maxrss as u64 * 1024,
    )
}

/// Run one COLMAP command bare: its exit status and the last line it printed.
fn bare_status(args: &[String]) -> anyhow::Result<(std::process::ExitStatus, String)> {
    let out = std::process::Command::new(tessera_sfm::colmap::program())
        .args(args)
        .output()
        .context("cannot run colmap")?;
    let last = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    Ok((out.status, last))
}

/// The bare baseline: COLMAP's own commands in sequence (extract, match, mapper, bundle
/// adjuster) with the spec's options, as a user would type them.
fn bare_run(
    spec: &tessera_core::spec::ReconstructionSpec,
    files: &[PathBuf],
    dir: &Path,
) -> anyhow::Result<EngineRun> {
    use tessera_sfm::colmap::commands;
    let info = tessera_sfm::colmap::detect()?;
    let images = dir.join("images");
    std::fs::create_dir_all(&images)?;
    for f in files {
        std::fs::copy(f, images.join(f.file_name().context("file name")?))?;
    }
    let db = dir.join("database.db");
    let (sparse, adjusted) = (dir.join("sparse"), dir.join("adjusted"));
    std::fs::create_dir_all(&sparse)?;
    std::fs::create_dir_all(&adjusted)?;
    let (cpu0, _) = children_usage();
    let t0 = Instant::now();
    let mut stages = Vec::new();
    let mut timed = |stage: &str, args: &[String]| {
        let t = Instant::now();
        let r = bare_status(args);
        stages.push(serde_json::json!({ "stage": stage, "wall_s": t.elapsed().as_secs_f64() }));
        r
    };
    let must = |(status, last): (std::process::ExitStatus, String), what: &str| {
        if status.success() {
            Ok(())
        } else {
            Err(anyhow::anyhow!(
                "bare `colmap {what}` failed ({status}): {last}"
            ))
        }
    };
    must(
        timed(
            "extract",
            &commands::extract(
                spec,
                &db,
                &images,
                info.cuda,
                tessera_sfm::backend::CameraSharing::Shared,
            ),
        )?,
        "feature_extractor",
    )?;
    must(
        timed(
            "match",
            &commands::match_pairs(&spec.pairs, &db, info.cuda, None),
        )?,
        "matcher",
    )?;
    let (mapped, said) = timed(
        "map",
        &commands::map(
            false,
            &db,
            &images,
            &sparse,
            &dir.join("snapshots"),
            1_000_000,
            None,
        ),
    )?;
    let best = std::fs::read_dir(&sparse)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| tessera_sfm::model_bin::read(&p).ok().map(|r| (p, r)))
        .max_by_key(|(_, r)| r.images.len());
    // The mapper exiting 1 with no model is a result of the baseline (0 registered);
    // any other failure (an abort, a signal) fails the bench.
    let note = match (&best, mapped.code()) {
        (_, Some(0)) => None,
        (None, Some(1)) => Some(format!("the mapper built no model: {said}")),
        _ => anyhow::bail!("bare `colmap mapper` failed ({mapped}): {said}"),
    };
    if let Some((path, _)) = &best {
        for args in commands::bundle_adjust(
            tessera_core::spec::BaMode::Standard,
            path,
            &adjusted,
            &adjusted,
        ) {
            must(timed("bundle_adjust", &args)?, "bundle_adjuster")?;
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let (cpu1, peak) = children_usage();
    let model = best
        .is_some()
        .then(|| tessera_sfm::model_bin::read(&adjusted))
        .transpose()?;
    let m = model.as_ref().map(tessera_sfm::metrics::compute);
    Ok(EngineRun {
        runner: "bare colmap".into(),
        backend: info.name,
        version: info.version,
        mapper: "incremental".into(),
        default: false,
        wall_s,
        cpu_s: cpu1 - cpu0,
        peak_rss_bytes: peak,
        registered: model.as_ref().map_or(0, |m| m.images.len() as u64),
        points: model.as_ref().map_or(0, |m| m.points.len() as u64),
        mean_reprojection_error: m.map(|m| m.mean_reprojection_error),
        wall_ratio: None,
        cpu_ratio: None,
        match_ratio: None,
        stages,
        note,
        error: None,
    })
}

/// One Tessera run with `args`, in its own state folder.
async fn tessera_run(
    args: &crate::commands::reconstruct::Args,
    state: &Path,
    default: bool,
) -> anyhow::Result<EngineRun> {
    let backend = args.engine.resolve()?;
    let (self0, _) = usage(libc::RUSAGE_SELF);
    let (cpu0, _) = children_usage();
    let t0 = Instant::now();
    let report = crate::commands::reconstruct::reconstruct(state, args, false).await?;
    let wall_s = t0.elapsed().as_secs_f64();
    let (self1, _) = usage(libc::RUSAGE_SELF);
    let (cpu1, _) = children_usage();
    let stages: Vec<serde_json::Value> = report
        .stages
        .iter()
        .map(|s| serde_json::json!({ "stage": s["stage"], "wall_s": s["wall_s"], "peak_rss_bytes": s["peak_rss_bytes"], "attempts": s["attempts"] }))
        .collect();
    Ok(EngineRun {
        runner: "tessera".into(),
        backend: backend.name,
        version: backend.version.unwrap_or_default(),
        mapper: format!("{:?}", args.mapper).to_lowercase(),
        default,
        wall_s,
        cpu_s: (self1 - self0) + (cpu1 - cpu0),
        peak_rss_bytes: stages
            .iter()
            .filter_map(|s| s["peak_rss_bytes"].as_u64())
            .max()
            .unwrap_or(0),
        registered: report.registered_images,
        points: report.points,
        mean_reprojection_error: report.metrics["mean_reprojection_error"].as_f64(),
        wall_ratio: None,
        cpu_ratio: None,
        match_ratio: None,
        stages,
        note: None,
        error: (report.status != "succeeded").then(|| format!("job {}", report.status)),
    })
}

pub async fn run(json: bool, b: ReconstructBench) -> anyhow::Result<ExitCode> {
    use crate::commands::reconstruct::{Args, Ba, EngineArg, GeorefArg, Mapper, Pairs};
    let files = crate::photos::list_images(&b.images)?;
    let scratch = Scratch::new("bench-reconstruct")?;
    if matches!(b.pairs, Pairs::Vocabtree) {
        anyhow::bail!("the bench runs exhaustive, sequential or spatial pairs");
    }
    let args = |engine: EngineArg, mapper: Mapper, name: &str| Args {
        images: b.images.clone(),
        out: scratch.path().join(name).join("out"),
        pairs: b.pairs,
        overlap: b.overlap,
        neighbors: tessera_jobs::reconstruct::recipe::SPATIAL_NEIGHBOURS,
        vocab_tree: None,
        engine,
        mapper,
        ba: Ba::Standard,
        georef: GeorefArg::None,
        gcp: None,
        export: vec!["colmap-bin".into()],
        crs: None,
        split: tessera_jobs::reconstruct::recipe::SplitAsk::Never,
        camera_model: "SIMPLE_RADIAL".into(),
        max_features: b.max_features,
        max_image_size: b.max_image_size,
        ignore_exif_orientation: false,
        per_image_intrinsics: false,
        resume: false,
        workers: Some(1),
        memory_limit: Vec::new(),
        dry_run: false,
    };
    let folder = crate::commands::reconstruct::Folder::read(&files)?;
    let default_engine = EngineArg::Auto.resolve()?.name;
    // The very spec Tessera runs, so the bare run uses the same COLMAP options.
    let prepared = crate::commands::reconstruct::prepare(
        &args(EngineArg::Colmap, Mapper::Incremental, "spec"),
        &folder,
        tessera_core::spec::BackendSpec {
            name: "colmap".into(),
            version: None,
        },
    )?;
    let spec = prepared.spec.clone();
    let pairs = tessera_jobs::reconstruct::pairing::Choice {
        strategy: spec.pairs.clone(),
        why: prepared
            .pairs_auto
            .as_ref()
            .map_or_else(|| "given with --pairs".into(), |c| c.why.clone()),
    };
    let mut runs = Vec::new();
    for which in &b.engines {
        let failed = |e: anyhow::Error, runner: &str, backend: &str, mapper: &str| EngineRun {
            runner: runner.into(),
            backend: backend.into(),
            version: String::new(),
            mapper: mapper.into(),
            default: false,
            wall_s: 0.0,
            cpu_s: 0.0,
            peak_rss_bytes: 0,
            registered: 0,
            points: 0,
            mean_reprojection_error: None,
            wall_ratio: None,
            cpu_ratio: None,
            match_ratio: None,
            stages: Vec::new(),
            note: None,
            error: Some(format!("{e:#}")),
        };
        let run = match which {
            BenchEngine::Bare => bare_run(&spec, &files, &scratch.path().join("bare"))
                .unwrap_or_else(|e| failed(e, "bare colmap", "colmap", "incremental")),
            BenchEngine::Colmap | BenchEngine::Pycolmap | BenchEngine::PycolmapGlobal => {
                let (engine, mapper, name) = match which {
                    BenchEngine::Colmap => (EngineArg::Colmap, Mapper::Incremental, "colmap"),
                    BenchEngine::Pycolmap => (EngineArg::Pycolmap, Mapper::Incremental, "pycolmap"),
                    _ => (EngineArg::Pycolmap, Mapper::Global, "pycolmap-global"),
                };
                let a = args(engine, mapper, name);
                let default = mapper == Mapper::Incremental
                    && default_engine == format!("{engine:?}").to_lowercase();
                tessera_run(&a, &scratch.path().join(name).join("state"), default)
                    .await
                    .unwrap_or_else(|e| {
                        failed(
                            e,
                            "tessera",
                            &format!("{engine:?}").to_lowercase(),
                            &format!("{mapper:?}").to_lowercase(),
                        )
                    })
            }
        };
        runs.push(run);
    }
    if let Some(base) = runs
        .iter()
        .find(|r| r.runner == "bare colmap" && r.error.is_none())
        .cloned()
    {
        let match_s = |r: &EngineRun| {
            r.stages
                .iter()
                .find(|s| s["stage"] == "match")
                .and_then(|s| s["wall_s"].as_f64())
        };
        // A baseline that built no model skipped bundle adjustment: its total time is
        // not comparable, its matching is.
        let whole = base.registered > 0;
        for r in runs.iter_mut().filter(|r| r.error.is_none()) {
            r.wall_ratio = whole.then(|| r.wall_s / base.wall_s);
            r.cpu_ratio = whole.then(|| r.cpu_s / base.cpu_s.max(1e-9));
            r.match_ratio = match_s(r).zip(match_s(&base)).map(|(m, b)| m / b.max(1e-9));
        }
    }
    let r = ReconstructReport {
        images: files.len(),
        max_image_size: spec.max_image_size,
        max_features: spec.max_features,
        pairs,
        runs,
    };
    emit(json, &r, || {
        let mut lines = vec![format!(
            "{} photos, pairs {}, {} px, {} features",
            r.images,
            r.pairs.strategy_name(),
            r.max_image_size,
            r.max_features
        )];
        for run in &r.runs {
            lines.push(match &run.error {
                Some(e) => format!("{} {} {}: failed: {e}", run.runner, run.backend, run.mapper),
                None => format!(
                    "{} {} {} {}{}: {:.1} s (×{:.2}; matching ×{:.2}), CPU {:.1} s (×{:.2}), peak {} MB, {} of {} registered, {} points, reprojection {:.3} px{}",
                    run.runner,
                    run.backend,
                    run.version,
                    run.mapper,
                    if run.default { " [default]" } else { "" },
                    run.wall_s,
                    run.wall_ratio.unwrap_or(f64::NAN),
                    run.match_ratio.unwrap_or(f64::NAN),
                    run.cpu_s,
                    run.cpu_ratio.unwrap_or(f64::NAN),
                    run.peak_rss_bytes >> 20,
                    run.registered,
                    r.images,
                    run.points,
                    run.mean_reprojection_error.unwrap_or(f64::NAN),
                    run.note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
                ),
            });
        }
        lines.join("\n")
    });
    Ok(if r.runs.iter().all(|run| run.error.is_none()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
