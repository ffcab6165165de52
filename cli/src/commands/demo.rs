//! `tessera demo [DIR]`: upload a folder of photos into embedded mode, run the demo job
//! through the engine with in-process workers, show progress, write the manifest.

use crate::embedded;
use crate::output::emit;
use anyhow::Context;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_core::TenantId;
use tessera_core::job::JobStatus;
use tessera_jobs::demo::DemoSpec;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of photos.
    #[arg(default_value = "sample/images")]
    pub dir: PathBuf,
    /// Folder to write `manifest.json` into.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
    /// Only submit the job and print its id; `tessera worker` runs it.
    #[arg(long)]
    pub submit_only: bool,
    /// Tasks run at once in this process.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
}

/// Key an upload by its content, so the same photos make the same job.
fn upload_key(path: &Path, bytes: &[u8]) -> String {
    let digest = hex::encode(Sha256::digest(bytes));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("image");
    let key = format!("uploads/{}/{name}", &digest[..32]);
    if tessera_core::ports::object_store::validate_key(&key).is_ok() {
        key
    } else {
        format!("uploads/{}/image", &digest[..32])
    }
}

pub async fn run(state: &Path, json: bool, args: Args) -> anyhow::Result<ExitCode> {
    let images = crate::photos::list_images(&args.dir)?;
    let (_dir, engine) = embedded::engine(state, Some(Duration::from_secs(10))).await?;
    let started = Instant::now();
    let mut keys = Vec::with_capacity(images.len());
    for path in &images {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let key = upload_key(path, &bytes);
        if engine.ports().objects.head(&key).await?.is_none() {
            engine.ports().objects.put(&key, bytes.into()).await?;
        }
        keys.push(key);
    }
    let set_id = hex::encode(Sha256::digest(keys.join("\n").as_bytes()));
    let spec = DemoSpec {
        images: keys,
        manifest_key: format!("demo/{}/manifest.json", &set_id[..32]),
    };
    let plan = spec.plan(
        TenantId::local(),
        None,
        &format!("demo: {}", args.dir.display()),
    )?;
    let submitted = engine.submit(plan).await?;
    let job_id = submitted.job_id;
    if args.submit_only {
        emit(json, &submitted, || job_id.to_string());
        return Ok(ExitCode::SUCCESS);
    }
    if submitted.existing && !json {
        eprintln!("these photos were submitted before as job {job_id}; showing that job");
    }

    let job =
        super::reconstruction::drive(&engine, job_id, args.workers, submitted.existing, !json)
            .await?;
    let seen = engine.ports().events.last_seq(job_id).await?;

    let status = job.status();
    let mut summary = serde_json::json!({
        "job_id": job_id, "status": status, "existing": submitted.existing, "images": images.len(),
        "elapsed_s": started.elapsed().as_secs_f64(), "events": seen,
    });
    if status == JobStatus::Succeeded {
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("cannot create output folder {}", args.out.display()))?;
        let manifest_path = args.out.join("manifest.json");
        engine
            .ports()
            .objects
            .get_to_file(&spec.manifest_key, &manifest_path)
            .await?;
        let manifest: tessera_jobs::demo::Manifest =
            serde_json::from_slice(&std::fs::read(&manifest_path)?)?;
        summary["manifest"] = serde_json::json!(manifest_path);
        summary["total_bytes"] = manifest.total_bytes.into();
        summary["total_megapixels"] = manifest.total_megapixels.into();
        emit(json, &summary, || {
            format!(
                "job {job_id} succeeded: {} photos, {:.1} MB, {:.1} megapixels, {} events, {:.1} s\nmanifest: {}\nreplay the events: tessera events {job_id}",
                manifest.images.len(),
                manifest.total_bytes as f64 / 1e6,
                manifest.total_megapixels,
                seen,
                started.elapsed().as_secs_f64(),
                manifest_path.display()
            )
        });
        Ok(ExitCode::SUCCESS)
    } else {
        emit(json, &summary, || {
            format!(
                "job {job_id} {status}; see `tessera jobs show {job_id}` and `tessera events {job_id}`"
            )
        });
        Ok(ExitCode::FAILURE)
    }
}
