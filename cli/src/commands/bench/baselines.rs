//! The bare baselines of `tessera bench reconstruct`: what a user runs instead of
//! Tessera. COLMAP's command line with Tessera's options (the baseline of every ratio),
//! and COLMAP 4 through pycolmap with its own defaults.

use super::reconstruct::{EngineRun, children_usage};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
pub(super) fn bare_run(
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
        wall_vs_colmap4: None,
        match_ratio: None,
        stages,
        note,
        gps_residual_m: None,
        gps_median_m: None,
        gps_scale_error: None,
        error: None,
    })
}

/// The bare COLMAP 4 baseline: pycolmap's own three calls with its defaults, in the
/// Python Tessera's pycolmap engine uses.
pub(super) fn bare_pycolmap_run(files: &[PathBuf], dir: &Path) -> anyhow::Result<EngineRun> {
    let python = std::env::var("TESSERA_PYCOLMAP_PYTHON").unwrap_or_else(|_| "python3".into());
    let images = dir.join("images");
    std::fs::create_dir_all(&images)?;
    for f in files {
        std::fs::copy(f, images.join(f.file_name().context("file name")?))?;
    }
    let script = dir.join("bare_pycolmap.py");
    std::fs::write(&script, include_str!("bare_pycolmap.py"))?;
    let (sparse, db) = (dir.join("sparse"), dir.join("database.db"));
    std::fs::create_dir_all(&sparse)?;
    let (cpu0, _) = children_usage();
    let t0 = Instant::now();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args([&db, &images, &sparse])
        .output()
        .with_context(|| format!("cannot run {python}"))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let (cpu1, peak) = children_usage();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!(
            "bare pycolmap failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("")
        );
    }
    let said: serde_json::Value = serde_json::from_slice(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .as_bytes(),
    )
    .context("bare pycolmap printed no result")?;
    Ok(EngineRun {
        runner: "bare pycolmap".into(),
        backend: "pycolmap".into(),
        version: said["version"].as_str().unwrap_or_default().into(),
        mapper: "incremental".into(),
        default: false,
        wall_s,
        cpu_s: cpu1 - cpu0,
        peak_rss_bytes: peak,
        registered: said["registered"].as_u64().unwrap_or(0),
        points: said["points"].as_u64().unwrap_or(0),
        mean_reprojection_error: said["mean_reprojection_error"].as_f64(),
        wall_ratio: None,
        cpu_ratio: None,
        wall_vs_colmap4: None,
        match_ratio: None,
        stages: said["stages"].as_array().cloned().unwrap_or_default(),
        note: Some("pycolmap's defaults: every pair, its own features and image size".into()),
        gps_residual_m: None,
        gps_median_m: None,
        gps_scale_error: None,
        error: None,
    })
}
