//! What `tessera reconstruct` leaves in `--out`: the exports, copied from the export
//! checkpoint and verified, and `report.json` (the run's stages, photos, model and the
//! choices made for it).

use super::Args;
use anyhow::Context;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;
use tessera_core::job::JobStatus;
use tessera_engine::Engine;
use tessera_jobs::reconstruct::{Stage, checkpoint, georef_choice, pairing, resolution};

/// What a finished run reports (`report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub job_id: String,
    pub status: String,
    pub fingerprint: String,
    /// The engine backend that ran (`pycolmap` or `colmap`).
    pub engine: String,
    /// Its version (COLMAP's, or pycolmap's).
    pub colmap_version: String,
    pub images: usize,
    pub rejected: serde_json::Value,
    pub registered_images: u64,
    pub points: u64,
    /// Every model the mapper built, largest (the primary, `sparse/0`) first; the others
    /// are exported as `sparse/1`, `sparse/2`, …
    pub submodels: serde_json::Value,
    /// When the other sub-models' photos were joined to the largest: how many it gained.
    pub merged: serde_json::Value,
    /// When photos were in no model: how many the mapping stage's last look placed.
    pub last_look: serde_json::Value,
    pub metrics: serde_json::Value,
    pub stages: Vec<serde_json::Value>,
    /// Wall time of the stages that ran (skipped ones left out).
    pub stages_wall_s: f64,
    pub elapsed_s: f64,
    pub outputs: Vec<String>,
    /// The pair strategy `--pairs auto` chose, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairs_auto: Option<pairing::Choice>,
    /// Where the model was placed: the frame (`enu`, `ecef`, or `none` when a chosen
    /// georeferencing could not place it, with why) and the GPS residual in metres.
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub georeference: serde_json::Value,
    /// Whether `--georef auto` placed the model by GPS, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub georef_auto: Option<georef_choice::GeorefChoice>,
    /// What was chosen for `--max-image-size` / `--max-features` not given, and why.
    pub resolution_auto: Option<resolution::Resolution>,
    /// Whether `--split auto` mapped the photos in clusters, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_auto: Option<tessera_jobs::reconstruct::split::SplitChoice>,
    /// A split run's clusters: each one's photos, what it registered, whether it was
    /// joined (and how well) or kept apart (and why).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub split: serde_json::Value,
}

/// Copy a finished job's export checkpoint into `out`, verified by checksum; returns the
/// files and the exported model's metrics.
pub async fn download_exports(
    engine: &Engine,
    job_id: tessera_core::JobId,
    out: &Path,
) -> anyhow::Result<(Vec<String>, serde_json::Value)> {
    let objects = engine.ports().objects.as_ref();
    let cp = checkpoint::manifest(objects, job_id, Stage::Export.name())
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?
        .context("the export checkpoint is missing; run again with --resume")?;
    let mut files = Vec::new();
    for f in &cp.files {
        checkpoint::materialize(objects, job_id, &cp, &f.name, out)
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        files.push(f.name.clone());
    }
    Ok((files, cp.result["model"].clone()))
}

/// Build the run's report from its tasks, download its exports into `--out` when it
/// succeeded, and write `report.json` there.
pub async fn build_report(
    engine: &Engine,
    job_id: tessera_core::JobId,
    job: &tessera_core::job::Job,
    backend: &tessera_sfm::backend::BackendInfo,
    started: Instant,
    args: &Args,
) -> anyhow::Result<Report> {
    let tasks = engine.job_tasks(job_id).await?;
    let mut stage_rows = Vec::new();
    let mut wall = 0.0;
    // In pipeline order, a split run's clusters by number between verify and map.
    let mut staged: Vec<(usize, u64, &tessera_core::task::Task)> = tasks
        .iter()
        .filter_map(|t| {
            let stage = Stage::of_task(&t.name)?;
            let at = Stage::ALL.iter().position(|s| *s == stage)?;
            let cluster = t.payload["cluster"].as_u64().unwrap_or(0);
            Some((at, cluster, t))
        })
        .collect();
    staged.sort_by_key(|(at, cluster, _)| (*at, *cluster));
    for (_, _, t) in staged {
        let name = t.name.as_str();
        let r = t.result.clone().unwrap_or_default();
        let skipped = r["skipped"].as_bool().unwrap_or(false);
        if !skipped {
            wall += r["wall_s"].as_f64().unwrap_or(0.0);
        }
        let peak = [
            &r["process"],
            &r["passes"][0],
            &r["passes"][1],
            &r["vocab_tree"]["process"],
            &r["strips"]["process"],
        ]
        .iter()
        .filter_map(|p| p["peak_rss_bytes"].as_u64())
        .max();
        let mut row = serde_json::json!({
            "stage": name, "state": t.state, "attempts": t.attempts, "skipped": skipped,
            "wall_s": r["wall_s"], "engine_s": r["engine_s"], "outside_engine_s": r["outside_engine_s"],
            "ran_ms": r["ran_ms"], "peak_rss_bytes": peak, "resource_class": t.resource_class,
            "last_error": t.last_error.as_ref().map(|e| serde_json::json!({"class": e.class, "message": e.message})),
        });
        // What the match stage trained, where it trained a tree for retrieval pairs.
        if !r["vocab_tree"].is_null() {
            row["vocab_tree"] = r["vocab_tree"].clone();
        }
        // The flight strips the match stage found, where spatial pairs followed them,
        // and what the matching came to.
        if !r["strips"].is_null() {
            row["strips"] = r["strips"].clone();
        }
        if !r["database"].is_null() {
            row["database"] = r["database"].clone();
        }
        stage_rows.push(row);
    }
    let mut report = Report {
        job_id: job_id.to_string(),
        status: job.status().to_string(),
        fingerprint: job.fingerprint.clone(),
        engine: backend.name.clone(),
        colmap_version: backend.version.clone(),
        images: 0,
        rejected: serde_json::Value::Null,
        registered_images: 0,
        points: 0,
        submodels: serde_json::Value::Null,
        merged: serde_json::Value::Null,
        last_look: serde_json::Value::Null,
        metrics: serde_json::Value::Null,
        stages: stage_rows,
        stages_wall_s: wall,
        elapsed_s: started.elapsed().as_secs_f64(),
        outputs: Vec::new(),
        pairs_auto: None,
        georeference: serde_json::Value::Null,
        georef_auto: None,
        resolution_auto: None,
        split_auto: None,
        split: serde_json::Value::Null,
    };
    if let Some(t) = tasks.iter().find(|t| t.name == Stage::Map.name())
        && let Some(r) = &t.result
    {
        report.split = r["split"].clone();
    }
    if let Some(t) = tasks.iter().find(|t| t.name == Stage::Georeference.name())
        && let Some(r) = &t.result
    {
        report.georeference = serde_json::json!({
            "frame": r["frame"], "alignment_residual_m": r["alignment_residual_m"],
            "gps_fit": r["gps_fit"], "placed": r["frame"] != "none", "why": r["why"],
            "by": r["by"], "control_crs": r["control_crs"], "control": r["control"],
        });
        // Null members (GPS georeferencing has no control points) are left out.
        if let Some(o) = report.georeference.as_object_mut() {
            o.retain(|k, v| !v.is_null() || matches!(k.as_str(), "alignment_residual_m" | "why"));
        }
    }
    if let Some(t) = tasks.iter().find(|t| t.name == Stage::Ingest.name())
        && let Some(r) = &t.result
    {
        report.images = r["images"].as_array().map_or(0, Vec::len);
        report.rejected = r["rejected"].clone();
    }
    if let Some(t) = tasks.iter().find(|t| t.name == Stage::Map.name())
        && let Some(r) = &t.result
    {
        report.submodels = r["submodels"].clone();
        report.merged = r["merged"].clone();
        report.last_look = r["last_look"].clone();
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output folder {}", args.out.display()))?;
    if job.status() == JobStatus::Succeeded {
        let (outputs, metrics) = download_exports(engine, job_id, &args.out).await?;
        report.outputs = outputs;
        report.metrics = metrics;
        report.registered_images = report.metrics["registered_images"].as_u64().unwrap_or(0);
        report.points = report.metrics["points"].as_u64().unwrap_or(0);
    }
    let text = serde_json::to_vec_pretty(&report)?;
    std::fs::write(args.out.join("report.json"), text)
        .with_context(|| format!("cannot write {}", args.out.join("report.json").display()))?;
    Ok(report)
}
