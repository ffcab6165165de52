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
    #[arg(long, value_enum, default_value_t = crate::commands::reconstruction::Pairs::Auto)]
    pub pairs: crate::commands::reconstruction::Pairs,
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
    /// Run the comparison over the first N photos by name for each N given
    /// (`--scale 20,40,80`) and print each run's figures per photo: how time and memory
    /// grow with the survey.
    #[arg(long, value_delimiter = ',')]
    pub scale: Vec<usize>,
    /// Cluster size of the `pycolmap-split` run (its overlap a third of it).
    #[arg(long, default_value_t = 25)]
    pub split_size: u32,
}

/// One engine's run in the comparison.
#[derive(Serialize, Clone)]
pub(super) struct EngineRun {
    /// `bare colmap`, or `tessera` with the backend below.
    pub(super) runner: String,
    pub(super) backend: String,
    pub(super) version: String,
    pub(super) mapper: String,
    /// Whether this is what `tessera reconstruct DIR` runs with no options.
    pub(super) default: bool,
    pub(super) wall_s: f64,
    /// User + system CPU of the engine processes (and, for Tessera, its own process).
    pub(super) cpu_s: f64,
    /// Largest resident set of one engine process.
    pub(super) peak_rss_bytes: u64,
    pub(super) registered: u64,
    pub(super) points: u64,
    pub(super) mean_reprojection_error: Option<f64>,
    /// Wall and CPU time over the bare COLMAP baseline's, measured in this run.
    pub(super) wall_ratio: Option<f64>,
    pub(super) cpu_ratio: Option<f64>,
    /// Wall time over the bare COLMAP 4 (pycolmap) baseline's, where it ran.
    pub(super) wall_vs_colmap4: Option<f64>,
    /// Matching's wall time over the baseline's, in this run.
    pub(super) match_ratio: Option<f64>,
    /// Per stage: wall time (and, for Tessera, peak RSS and attempts).
    pub(super) stages: Vec<serde_json::Value>,
    /// What the run produced that is worth knowing (the baseline's mapper building
    /// no model, for one).
    pub(super) note: Option<String>,
    /// Mean distance of the placed cameras from their photos' GPS, where Tessera
    /// georeferenced the model (no option given: photos that carry GPS).
    pub(super) gps_residual_m: Option<f64>,
    /// Median distance of the same cameras from their GPS.
    pub(super) gps_median_m: Option<f64>,
    /// The scale still left between the placed cameras and their GPS (0.01: 1 %).
    pub(super) gps_scale_error: Option<f64>,
    pub(super) error: Option<String>,
}

#[derive(Serialize)]
struct ReconstructReport {
    images: usize,
    /// The longest side and features every run used.
    max_image_size: u32,
    max_features: u32,
    /// SIFT started at the photos' own pixels, not a doubled copy, in Tessera's runs on
    /// the default engine (the bare runs keep COLMAP's own octaves).
    sift_native_scale: bool,
    /// The pairs every run matched (`--pairs auto` chooses from the photos).
    pairs: tessera_jobs::reconstruct::pairing::Choice,
    runs: Vec<EngineRun>,
}

/// Which runs the comparison makes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchEngine {
    /// The COLMAP command line run bare, no Tessera: the baseline.
    Bare,
    /// COLMAP 4 through pycolmap run bare with its own defaults (`extract_features`,
    /// `match_exhaustive`, `incremental_mapping`): what a user who knows COLMAP 4 runs.
    BarePycolmap,
    /// Tessera driving the COLMAP command line.
    Colmap,
    /// Tessera driving COLMAP 4 through pycolmap, incremental mapper.
    Pycolmap,
    /// Tessera driving COLMAP 4 through pycolmap, global mapper.
    PycolmapGlobal,
    /// Tessera on pycolmap, the photos mapped in clusters of `--split-size` side by side
    /// (one worker per cluster up to the CPUs) and merged.
    PycolmapSplit,
    /// Tessera on pycolmap with COLMAP 4's hierarchical mapper, its leaves of
    /// `--split-size` photos: COLMAP's own clusters in one process.
    PycolmapHierarchical,
}

/// CPU seconds and the largest resident set of this process's reaped children so far.
pub(super) fn children_usage() -> (f64, u64) {
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

/// One Tessera run with `args`, in its own state folder.
async fn tessera_run(
    args: &crate::commands::reconstruction::Args,
    state: &Path,
    default: bool,
) -> anyhow::Result<EngineRun> {
    let backend = args.engine.resolve()?;
    let (self0, _) = usage(libc::RUSAGE_SELF);
    let (cpu0, _) = children_usage();
    let t0 = Instant::now();
    let report = crate::commands::reconstruction::reconstruct(state, args, false).await?;
    let wall_s = t0.elapsed().as_secs_f64();
    let (self1, _) = usage(libc::RUSAGE_SELF);
    let (cpu1, _) = children_usage();
    let stages: Vec<serde_json::Value> = report
        .stages
        .iter()
        .map(|s| serde_json::json!({ "stage": s["stage"], "wall_s": s["wall_s"], "outside_engine_s": s["outside_engine_s"], "peak_rss_bytes": s["peak_rss_bytes"], "attempts": s["attempts"] }))
        .collect();
    Ok(EngineRun {
        runner: "tessera".into(),
        backend: backend.name,
        version: backend.version.unwrap_or_default(),
        mapper: match args.split {
            tessera_jobs::reconstruct::recipe::SplitAsk::Given(s) => format!(
                "{} in clusters of {} (+{} shared)",
                format!("{:?}", args.mapper).to_lowercase(),
                s.cluster_size,
                s.overlap
            ),
            _ => format!("{:?}", args.mapper).to_lowercase(),
        },
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
        wall_vs_colmap4: None,
        match_ratio: None,
        stages,
        note: None,
        gps_residual_m: report.georeference["alignment_residual_m"].as_f64(),
        gps_median_m: report.georeference["gps_fit"]["median_m"].as_f64(),
        gps_scale_error: report.georeference["gps_fit"]["scale_error"].as_f64(),
        error: (report.status != "succeeded").then(|| format!("job {}", report.status)),
    })
}

pub async fn run(json: bool, b: ReconstructBench) -> anyhow::Result<ExitCode> {
    if b.scale.is_empty() {
        let r = compare(&b, &b.images).await?;
        emit(json, &r, || text(&r));
        return Ok(exit_code(&r));
    }
    // The same survey at growing sizes: the first N photos by name (a flight's first
    // N), each size compared in full.
    let all = crate::photos::list_images(&b.images)?;
    let scratch = Scratch::new("bench-reconstruct-scale")?;
    let mut sizes = Vec::new();
    for &n in &b.scale {
        let n = n.min(all.len());
        let folder = scratch.path().join(format!("first-{n}"));
        std::fs::create_dir_all(&folder)?;
        for f in &all[..n] {
            std::fs::copy(f, folder.join(f.file_name().context("file name")?))?;
        }
        sizes.push(compare(&b, &folder).await?);
    }
    let curve = ScaleReport { sizes };
    emit(json, &curve, || {
        let mut lines = Vec::new();
        for r in &curve.sizes {
            lines.push(text(r));
            lines.push(per_photo(r));
        }
        lines.join("\n\n")
    });
    Ok(
        if curve
            .sizes
            .iter()
            .all(|r| exit_code(r) == ExitCode::SUCCESS)
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

/// Each run's stages per photo: wall seconds, and the run's CPU seconds and peak memory.
fn per_photo(r: &ReconstructReport) -> String {
    let n = r.images.max(1) as f64;
    let mut lines = vec![format!("per photo at {} photos:", r.images)];
    for run in r.runs.iter().filter(|run| run.error.is_none()) {
        let stages: Vec<String> = run
            .stages
            .iter()
            .map(|s| {
                format!(
                    "{} {:.2} s",
                    s["stage"].as_str().unwrap_or("?"),
                    s["wall_s"].as_f64().unwrap_or(0.0) / n
                )
            })
            .collect();
        lines.push(format!(
            "  {} {} {}: wall {:.2} s, CPU {:.2} s, peak {:.1} MB; {}",
            run.runner,
            run.backend,
            run.mapper,
            run.wall_s / n,
            run.cpu_s / n,
            run.peak_rss_bytes as f64 / n / 1048576.0,
            stages.join(", ")
        ));
        let outside: Vec<String> = run
            .stages
            .iter()
            .filter_map(|s| {
                Some(format!(
                    "{} {:.2} s",
                    s["stage"].as_str()?,
                    s["outside_engine_s"].as_f64()?
                ))
            })
            .collect();
        if !outside.is_empty() {
            lines.push(format!(
                "    outside the engine (whole run): {}",
                outside.join(", ")
            ));
        }
    }
    lines.join("\n")
}

fn exit_code(r: &ReconstructReport) -> ExitCode {
    if r.runs.iter().all(|run| run.error.is_none()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The same photos at growing sizes (`--scale`).
#[derive(Serialize)]
struct ScaleReport {
    sizes: Vec<ReconstructReport>,
}

/// Every engine asked for over the photos in `images`, in one run.
async fn compare(b: &ReconstructBench, images: &Path) -> anyhow::Result<ReconstructReport> {
    use crate::commands::reconstruction::{Args, Ba, EngineArg, GeorefArg, Mapper, Pairs};
    let files = crate::photos::list_images(images)?;
    let scratch = Scratch::new("bench-reconstruct")?;
    if matches!(b.pairs, Pairs::Vocabtree) {
        anyhow::bail!("the bench runs exhaustive, sequential or spatial pairs");
    }
    let args = |engine: EngineArg, mapper: Mapper, name: &str| Args {
        images: images.to_path_buf(),
        out: scratch.path().join(name).join("out"),
        pairs: b.pairs,
        overlap: b.overlap,
        neighbors: tessera_jobs::reconstruct::recipe::SPATIAL_NEIGHBOURS,
        strip_overlap: 0,
        vocab_tree: None,
        num_images: tessera_jobs::reconstruct::pairing::VOCAB_TREE_IMAGES,
        engine,
        mapper,
        ba: Ba::Standard,
        // What a run with no options does: geotagged photos are placed by their GPS.
        georef: GeorefArg::Auto,
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
    let folder = crate::commands::reconstruction::Folder::read(&files)?;
    let default_engine = EngineArg::Auto.resolve()?.name;
    // The very spec Tessera runs, so the bare run uses the same COLMAP options.
    let prepared = crate::commands::reconstruction::prepare(
        &args(EngineArg::Colmap, Mapper::Incremental, "spec"),
        &folder,
        tessera_core::spec::BackendSpec {
            name: "colmap".into(),
            version: None,
        },
    )?;
    let spec = prepared.spec.clone();
    // Where SIFT starts is the engine's to honour (COLMAP 4 only): as the default engine
    // runs it.
    let sift_native_scale = crate::commands::reconstruction::prepare(
        &args(EngineArg::Auto, Mapper::Incremental, "spec-default"),
        &folder,
        tessera_core::spec::BackendSpec {
            name: default_engine.clone(),
            version: None,
        },
    )?
    .spec
    .sift_native_scale;
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
            wall_vs_colmap4: None,
            match_ratio: None,
            stages: Vec::new(),
            note: None,
            gps_residual_m: None,
            gps_median_m: None,
            gps_scale_error: None,
            error: Some(format!("{e:#}")),
        };
        let run = match which {
            BenchEngine::Bare => {
                super::baselines::bare_run(&spec, &files, &scratch.path().join("bare"))
                    .unwrap_or_else(|e| failed(e, "bare colmap", "colmap", "incremental"))
            }
            BenchEngine::BarePycolmap => {
                super::baselines::bare_pycolmap_run(&files, &scratch.path().join("bare-pycolmap"))
                    .unwrap_or_else(|e| failed(e, "bare pycolmap", "pycolmap", "incremental"))
            }
            BenchEngine::Colmap
            | BenchEngine::Pycolmap
            | BenchEngine::PycolmapGlobal
            | BenchEngine::PycolmapSplit
            | BenchEngine::PycolmapHierarchical => {
                let (engine, mapper, name) = match which {
                    BenchEngine::Colmap => (EngineArg::Colmap, Mapper::Incremental, "colmap"),
                    BenchEngine::Pycolmap => (EngineArg::Pycolmap, Mapper::Incremental, "pycolmap"),
                    BenchEngine::PycolmapSplit => {
                        (EngineArg::Pycolmap, Mapper::Incremental, "pycolmap-split")
                    }
                    BenchEngine::PycolmapHierarchical => (
                        EngineArg::Pycolmap,
                        Mapper::Hierarchical,
                        "pycolmap-hierarchical",
                    ),
                    _ => (EngineArg::Pycolmap, Mapper::Global, "pycolmap-global"),
                };
                let mut a = args(engine, mapper, name);
                if matches!(
                    which,
                    BenchEngine::PycolmapSplit | BenchEngine::PycolmapHierarchical
                ) {
                    a.split = tessera_jobs::reconstruct::recipe::SplitAsk::Given(
                        tessera_core::spec::SplitSpec::of_size(b.split_size),
                    );
                    a.workers = None;
                }
                // What `tessera reconstruct DIR` runs with no options: these photos are
                // too few for the automatic split.
                let default = mapper == Mapper::Incremental
                    && *which != BenchEngine::PycolmapSplit
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
    if let Some(base) = runs
        .iter()
        .find(|r| r.runner == "bare pycolmap" && r.error.is_none() && r.registered > 0)
        .cloned()
    {
        for r in runs.iter_mut().filter(|r| r.error.is_none()) {
            r.wall_vs_colmap4 = Some(r.wall_s / base.wall_s);
        }
    }
    Ok(ReconstructReport {
        images: files.len(),
        max_image_size: spec.max_image_size,
        max_features: spec.max_features,
        sift_native_scale,
        pairs,
        runs,
    })
}

/// The comparison as lines.
fn text(r: &ReconstructReport) -> String {
    let mut lines = vec![format!(
        "{} photos, pairs {}, {} px{}, {} features",
        r.images,
        r.pairs.strategy_name(),
        r.max_image_size,
        if r.sift_native_scale {
            " (SIFT from the photos' own pixels)"
        } else {
            ""
        },
        r.max_features
    )];
    for run in &r.runs {
        lines.push(match &run.error {
            Some(e) => format!("{} {} {}: failed: {e}", run.runner, run.backend, run.mapper),
            None => format!(
                "{} {} {} {}{}: {:.1} s (×{:.2}; matching ×{:.2}; ×{:.2} bare COLMAP 4), CPU {:.1} s (×{:.2}), peak {} MB, {} of {} registered, {} points, reprojection {:.3} px{}",
                run.runner,
                run.backend,
                run.version,
                run.mapper,
                if run.default { " [default]" } else { "" },
                run.wall_s,
                run.wall_ratio.unwrap_or(f64::NAN),
                run.match_ratio.unwrap_or(f64::NAN),
                run.wall_vs_colmap4.unwrap_or(f64::NAN),
                run.cpu_s,
                run.cpu_ratio.unwrap_or(f64::NAN),
                run.peak_rss_bytes >> 20,
                run.registered,
                r.images,
                run.points,
                run.mean_reprojection_error.unwrap_or(f64::NAN),
                run.gps_residual_m
                    .map(|m| format!(
                        ", GPS residual {m:.2} m (median {:.2} m, scale error {:.2} %)",
                        run.gps_median_m.unwrap_or(f64::NAN),
                        run.gps_scale_error.map_or(f64::NAN, |e| e * 100.0)
                    ))
                    .unwrap_or_default()
                    + &run.note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            ),
        });
    }
    lines.join("\n")
}
