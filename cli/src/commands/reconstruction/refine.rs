//! `tessera relocalize BASE_JOB NEW_PHOTOS --out OUT` and `tessera triangulate BASE_JOB
//! --out OUT`: refinements of a finished reconstruction.

use super::report::download_exports;
use super::{Folder, drive};
use crate::embedded;
use crate::output::emit;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tessera_core::TenantId;
use tessera_core::job::JobStatus;
use tessera_core::spec::{ExportFormat, RelocalizeSpec, TriangulateSpec};
use tessera_engine::{Engine, JobPlan};
use tessera_jobs::reconstruct::refine;

#[derive(clap::Args, Debug)]
pub struct RelocalizeArgs {
    /// A finished reconstruction job.
    pub base_job: String,
    /// Folder of new photos to register into its model.
    pub images: PathBuf,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Exports, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "ply,colmap-bin")]
    pub export: Vec<String>,
    /// SIFT features per image.
    #[arg(long, default_value_t = 4096)]
    pub max_features: u32,
    /// Longest image side used for features.
    #[arg(long, default_value_t = 1000)]
    pub max_image_size: u32,
}

#[derive(clap::Args, Debug)]
pub struct TriangulateArgs {
    /// A finished reconstruction job.
    pub base_job: String,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Exports, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "ply,colmap-bin")]
    pub export: Vec<String>,
}

fn formats(list: &[String]) -> anyhow::Result<Vec<ExportFormat>> {
    list.iter()
        .map(|e| {
            serde_json::from_value(serde_json::json!(e.trim())).map_err(|_| {
                anyhow::anyhow!(
                    "--export `{e}` is not one of ply, nvm, colmap-text, colmap-bin, points-bin"
                )
            })
        })
        .collect()
}

async fn finished_base(engine: &Engine, base: &str) -> anyhow::Result<()> {
    let id = crate::commands::parse_job(base)?;
    let job = engine.job(id).await?;
    if job.status() != JobStatus::Succeeded {
        bail!(
            "job {id} is {}, not a finished reconstruction; refine a job that succeeded",
            job.status()
        );
    }
    Ok(())
}

async fn run_plan(
    engine: &Engine,
    plan: JobPlan,
    out: &Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let submitted = engine.submit(plan).await?;
    let job = drive(engine, submitted.job_id, 1, submitted.existing, !json).await?;
    let tasks = engine.job_tasks(submitted.job_id).await?;
    let work = tasks
        .iter()
        .find(|t| t.name != "export")
        .and_then(|t| t.result.clone())
        .unwrap_or_default();
    let mut report =
        serde_json::json!({ "job_id": submitted.job_id, "status": job.status(), "result": work });
    if job.status() == JobStatus::Succeeded {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        let (files, metrics) = download_exports(engine, submitted.job_id, out).await?;
        report["outputs"] = serde_json::json!(files);
        report["metrics"] = metrics;
    } else {
        report["errors"] = serde_json::json!(
            tasks
                .iter()
                .filter_map(|t| t
                    .last_error
                    .as_ref()
                    .map(|e| format!("{}: {}", t.name, e.message)))
                .collect::<Vec<_>>()
        );
    }
    let ok = job.status() == JobStatus::Succeeded;
    emit(json, &report, || {
        serde_json::to_string_pretty(&report).unwrap_or_default()
    });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn relocalize(
    state: &Path,
    json: bool,
    args: RelocalizeArgs,
) -> anyhow::Result<ExitCode> {
    let files = crate::photos::list_images(&args.images)?;
    let (_dir, engine) = embedded::engine(state, Some(Duration::from_secs(30))).await?;
    finished_base(&engine, &args.base_job).await?;
    let folder = Folder::read(&files)?;
    folder.upload(&engine).await?;
    let set = folder.image_set();
    let spec = RelocalizeSpec {
        base_job: args.base_job.clone(),
        image_set: set,
        max_features: args.max_features,
        max_image_size: args.max_image_size,
        exports: formats(&args.export)?,
        priority: 0,
    };
    let plan = refine::plan_relocalize(
        &spec,
        TenantId::local(),
        None,
        &format!(
            "relocalize {} into {}",
            args.images.display(),
            args.base_job
        ),
    )?;
    run_plan(&engine, plan, &args.out, json).await
}

pub async fn triangulate(
    state: &Path,
    json: bool,
    args: TriangulateArgs,
) -> anyhow::Result<ExitCode> {
    let (_dir, engine) = embedded::engine(state, Some(Duration::from_secs(30))).await?;
    finished_base(&engine, &args.base_job).await?;
    let spec = TriangulateSpec {
        base_job: args.base_job.clone(),
        exports: formats(&args.export)?,
        priority: 0,
    };
    let plan = refine::plan_triangulate(
        &spec,
        TenantId::local(),
        None,
        &format!("triangulate {}", args.base_job),
    )?;
    run_plan(&engine, plan, &args.out, json).await
}
