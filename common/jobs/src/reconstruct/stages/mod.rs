//! The stage handlers. Each one: skip if its checkpoint validates; otherwise start from
//! the previous stage's checkpoint, run COLMAP with progress events, check what COLMAP
//! wrote (never trusting its exit code alone), and seal its own checkpoint.
//!
//! Each stage is its own file; what they share (the run's upstream checkpoints, its
//! images, publishing and sealing) is here, the engine's selection and runner in
//! [`engine`], the mapper's snapshots in `snapshots`.

mod bundle_adjust;
pub mod engine;
mod export;
mod extract;
mod georeference;
mod ingest;
mod last_look;
mod map;
mod map_cluster;
mod match_pairs;
mod merge_clusters;
mod merge_placement;
mod snapshots;
mod verify;

pub use engine::{backend, backend_for, default_backend, resolve, run_backend};
pub use export::write_exports;

use super::checkpoint::{self, Checkpoint};
use super::images::{self, PhotoFacts};
use super::models::{
    joined_is_better, left_out, model_names, names_in_brief, read_models, sort_models,
};
use super::{Stage, memory};
use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tessera_core::event::{EventKind, Phase, SnapshotSummary};
use tessera_core::ports::compute::{KillReason, ProcessReport, ProcessSpec, Stream};
use tessera_core::spec::{BaMode, BackendSpec, Georef, PairStrategy, ReconstructionSpec};
use tessera_engine::{Need, TaskContext, TaskError, TaskHandler, TaskOutput};
use tessera_sfm::backend::{EngineBackend, Invocation};
use tessera_sfm::colmap::ColmapBackend;
use tessera_sfm::pycolmap::PycolmapBackend;
use tessera_sfm::{metrics, model_bin, model_text};

/// Runs one stage.
pub struct StageHandler {
    stage: Stage,
}

impl StageHandler {
    /// The handler of `stage`.
    pub fn new(stage: Stage) -> Self {
        StageHandler { stage }
    }
}

/// The three files of a COLMAP binary model.
pub(crate) const MODEL_FILES: [&str; 3] = ["cameras.bin", "images.bin", "points3D.bin"];

pub(crate) fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> TaskError {
    move |e| TaskError::transient(format!("{what}: {e}"))
}

pub(crate) fn fresh_dir(path: &Path) -> Result<(), TaskError> {
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(io(format!("clearing {}", path.display())))?;
    }
    std::fs::create_dir_all(path).map_err(io(format!("creating {}", path.display())))
}

struct Run<'a> {
    ctx: &'a TaskContext,
    spec: ReconstructionSpec,
    scratch: PathBuf,
    job: tessera_core::JobId,
    /// Wall time of the engine's processes so far, in microseconds: the rest of the
    /// stage's time is Tessera's own (process start excepted), which the bench reports.
    engine_us: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl TaskHandler for StageHandler {
    /// Every stage keys its cache on the installed COLMAP's version.
    fn needs(&self) -> &'static [Need] {
        &[Need::Colmap]
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let spec: ReconstructionSpec = tessera_core::spec::parse(ctx.job().spec.clone())?;
        let run = Run {
            ctx,
            spec,
            scratch: ctx
                .scratch_dir()
                .map_err(io("creating the scratch folder"))?,
            job: ctx.task().job_id,
            engine_us: std::sync::atomic::AtomicU64::new(0),
        };
        // The task's own name: a stage's, or a split run's `map_cluster_<i>`.
        let name = ctx.task().name.as_str();
        if let Some(cp) = checkpoint::manifest(ctx.ports().objects.as_ref(), run.job, name).await?
            && checkpoint::validates(ctx.ports().objects.as_ref(), run.job, &cp).await?
        {
            ctx.emit(EventKind::LogLine {
                line: format!("{name}: its checkpoint validates; skipping the stage"),
            })
            .await?;
            let mut result = cp.result;
            result["skipped"] = json!(true);
            return Ok(TaskOutput::result(result));
        }
        ctx.checkpoint().await?;
        let objects = ctx.ports().objects.as_ref();
        let cache_key = super::cache::key(
            objects,
            run.job,
            &run.spec,
            self.stage,
            // The job's own engine: its name and version are in the spec, and the
            // installed one must match them.
            &backend_for(&run.spec.backend)?.info().version,
        )
        .await?;
        if let Some(key) = &cache_key
            && let Some(origin) = super::cache::elsewhere(
                super::cache::lookup(ctx.ports().store.as_ref(), &ctx.job().tenant, key).await?,
                run.job,
            )
            && let Some(cp) = super::cache::adopt(objects, origin, run.job, self.stage).await?
        {
            ctx.emit(EventKind::LogLine {
                line: format!("{name}: cache hit; adopted the checkpoint of job {origin}"),
            })
            .await?;
            let mut result = cp.result;
            result["cache_hit"] = json!(origin);
            result["cache_key"] = json!(key);
            return Ok(TaskOutput::result(result));
        }
        let started = Instant::now();
        let started_ms = tessera_core::Millis::now().0;
        let mut result = match self.stage {
            Stage::Ingest => run.ingest().await?,
            Stage::Extract => run.extract().await?,
            Stage::Match => run.match_pairs().await?,
            Stage::Verify => run.verify().await?,
            Stage::MapCluster => run.map_cluster().await?,
            Stage::Map => run.map().await?,
            Stage::BundleAdjust => run.bundle_adjust().await?,
            Stage::Georeference => run.georeference().await?,
            Stage::Export => run.export().await?,
        };
        result["stage"] = json!(name);
        result["skipped"] = json!(false);
        result["cache_key"] = json!(cache_key);
        let wall = started.elapsed().as_secs_f64();
        let engine = run.engine_us.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6;
        result["wall_s"] = json!(wall);
        // Time outside the engine's processes: reading and sealing checkpoints, copies,
        // checks of what the engine wrote.
        result["engine_s"] = json!(engine);
        result["outside_engine_s"] = json!((wall - engine).max(0.0));
        // When it ran by the wall clock: what shows a split run's clusters side by side.
        result["ran_ms"] = json!([started_ms, tessera_core::Millis::now().0]);
        ctx.metric(
            &format!("{name}_wall_s"),
            started.elapsed().as_secs_f64(),
            Some("s"),
        )
        .await?;
        Ok(TaskOutput {
            result,
            writes: cache_key
                .map(|k| super::cache::record(&ctx.job().tenant, &k, run.job, self.stage))
                .into_iter()
                .collect(),
            moved_on: Vec::new(),
            taken_over: None,
        })
    }
}

impl Run<'_> {
    async fn upstream(&self, stage: Stage) -> Result<Checkpoint, TaskError> {
        self.upstream_task(stage.name()).await
    }

    /// The checkpoint of the task named `name` (a stage, or one cluster of a split run).
    async fn upstream_task(&self, name: &str) -> Result<Checkpoint, TaskError> {
        checkpoint::manifest(self.ctx.ports().objects.as_ref(), self.job, name).await?.ok_or_else(|| {
            TaskError::transient(format!("the checkpoint of stage `{name}` is missing; `tessera reconstruct … --resume` runs it again"))
        })
    }

    fn photos(cp: &Checkpoint) -> Result<Vec<PhotoFacts>, TaskError> {
        serde_json::from_value(cp.result["images"].clone())
            .map_err(|e| TaskError::permanent(format!("ingest checkpoint is unreadable: {e}")))
    }

    /// The feature database of an upstream checkpoint, verified, as `dir/database.db`.
    async fn database_from(&self, cp: &Checkpoint, dir: &Path) -> Result<PathBuf, TaskError> {
        checkpoint::materialize(
            self.ctx.ports().objects.as_ref(),
            self.job,
            cp,
            "database.db",
            dir,
        )
        .await
    }

    /// Make `scratch/images` hold exactly the accepted photos, verified by checksum.
    async fn ensure_images(&self) -> Result<(PathBuf, Vec<PhotoFacts>), TaskError> {
        let photos = Self::photos(&self.upstream(Stage::Ingest).await?)?;
        let dir = self.scratch.join("images");
        self.ensure_images_in(&dir, &photos, None).await?;
        Ok((dir, photos))
    }

    /// Make `dir` hold exactly `photos` (those named in `only`, where given), verified by
    /// checksum. A folder is one task's at a time: this deletes what it does not want,
    /// a concurrent download's partial file included, so tasks that run side by side (a
    /// split run's clusters) each keep their own.
    async fn ensure_images_in(
        &self,
        dir: &Path,
        photos: &[PhotoFacts],
        only: Option<&BTreeSet<String>>,
    ) -> Result<(), TaskError> {
        std::fs::create_dir_all(dir).map_err(io("creating the image folder"))?;
        let photos: Vec<&PhotoFacts> = photos
            .iter()
            .filter(|p| only.is_none_or(|o| o.contains(&p.name)))
            .collect();
        let wanted: BTreeSet<&str> = photos.iter().map(|p| p.name.as_str()).collect();
        for entry in std::fs::read_dir(dir).map_err(io("listing images"))? {
            let entry = entry.map_err(io("listing images"))?;
            if !wanted.contains(entry.file_name().to_string_lossy().as_ref()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        for p in &photos {
            let path = dir.join(&p.name);
            if !(path.is_file()
                && checkpoint::sha256_file(&path)
                    .map(|s| s == p.sha256)
                    .unwrap_or(false))
            {
                self.ctx.ports().objects.get_to_file(&p.key, &path).await?;
            }
        }
        Ok(())
    }

    /// Run the backend's invocations in order, each with progress events; the reports.
    async fn exec(
        &self,
        invocations: Result<Vec<Invocation>, tessera_sfm::backend::Unsupported>,
        phase: Phase,
        total: Option<u64>,
    ) -> Result<Vec<ProcessReport>, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let mut reports = Vec::new();
        for inv in invocations.map_err(TaskError::from_classified)? {
            self.ctx.checkpoint().await?;
            let report = run_backend(self.ctx, backend, &self.scratch, inv, phase, total).await?;
            self.engine_us.fetch_add(
                report.wall.as_micros() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            reports.push(report);
        }
        Ok(reports)
    }

    /// An optional registration (joining sub-models, the last look, placing photos
    /// again): the registrator's invocations run and the model it wrote to `out` read.
    /// Any failure but a cancel is a warning that says `what` failed, and `None`: the
    /// model it started from stands.
    async fn register_optionally(
        &self,
        invocations: Result<Vec<Invocation>, tessera_sfm::backend::Unsupported>,
        out: &Path,
        total: usize,
        what: &str,
    ) -> Result<Option<tessera_sfm::model::Reconstruction>, TaskError> {
        let failed = match self
            .exec(invocations, Phase::IncrementalRegister, Some(total as u64))
            .await
        {
            Ok(_) => match model_bin::read(out) {
                Ok(r) => return Ok(Some(r)),
                Err(e) => format!("{what}: the model it wrote could not be read: {e}"),
            },
            Err(e) if e.class == tessera_core::ErrorClass::Cancelled => return Err(e),
            Err(e) => format!("{what} failed: {}", e.message),
        };
        self.ctx
            .emit(EventKind::Warning { message: failed })
            .await?;
        Ok(None)
    }

    /// The map stage's figures, one run or merged clusters alike.
    async fn map_metrics(
        &self,
        model: &metrics::ModelMetrics,
        submodels: usize,
    ) -> Result<(), TaskError> {
        let ctx = self.ctx;
        ctx.metric("registered_images", model.registered_images as f64, None)
            .await?;
        ctx.metric("points", model.points as f64, None).await?;
        ctx.metric("submodels", submodels as f64, None).await
    }

    fn report_json(r: &ProcessReport) -> Value {
        json!({ "exit_code": r.exit_code, "wall_s": r.wall.as_secs_f64(), "peak_rss_bytes": r.peak_rss_bytes, "cpu_s": r.cpu.as_secs_f64() })
    }

    async fn publish(
        &self,
        stage: Stage,
        dir: &Path,
        files: &[&str],
        result: Value,
    ) -> Result<Value, TaskError> {
        self.publish_task(stage.name(), dir, files, result).await
    }

    /// Seal the checkpoint of the task named `name`.
    async fn publish_task(
        &self,
        name: &str,
        dir: &Path,
        files: &[&str],
        result: Value,
    ) -> Result<Value, TaskError> {
        checkpoint::publish(
            self.ctx.ports().objects.as_ref(),
            self.job,
            name,
            dir,
            files,
            result.clone(),
        )
        .await?;
        Ok(result)
    }

    async fn model_from(&self, stage: Stage, dir: &Path) -> Result<PathBuf, TaskError> {
        let cp = self.upstream(stage).await?;
        let model = dir.join("input");
        fresh_dir(&model)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            checkpoint::materialize(
                self.ctx.ports().objects.as_ref(),
                self.job,
                &cp,
                &format!("model/{f}"),
                &model,
            )
            .await?;
        }
        Ok(model.join("model"))
    }

    async fn seal_model(
        &self,
        stage: Stage,
        dir: &Path,
        produced: &Path,
        mut result: Value,
    ) -> Result<Value, TaskError> {
        let rec = model_bin::read(produced).map_err(TaskError::from_classified)?;
        let m = metrics::compute(&rec);
        self.ctx
            .metric(
                "mean_reprojection_error_px",
                m.mean_reprojection_error,
                Some("px"),
            )
            .await?;
        let model_dir = dir.join("model");
        fresh_dir(&model_dir)?;
        model_bin::write(&rec, &model_dir).map_err(TaskError::from_classified)?;
        result["model"] = serde_json::to_value(&m).expect("serializable");
        self.publish(
            stage,
            dir,
            &[
                "model/cameras.bin",
                "model/images.bin",
                "model/points3D.bin",
            ],
            result,
        )
        .await
    }
}
