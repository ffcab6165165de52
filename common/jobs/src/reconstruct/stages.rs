//! The stage handlers. Each one: skip if its checkpoint validates; otherwise start from
//! the previous stage's checkpoint, run COLMAP with progress events, check what COLMAP
//! wrote (never trusting its exit code alone), and seal its own checkpoint.

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

/// The engine backend a spec names, detected once per process. A version in the spec
/// must match the installed engine's, so a job never resumes on another engine's output.
pub fn backend_for(spec: &BackendSpec) -> Result<&'static dyn EngineBackend, TaskError> {
    static COLMAP: OnceLock<Result<ColmapBackend, String>> = OnceLock::new();
    static PYCOLMAP: OnceLock<Result<PycolmapBackend, String>> = OnceLock::new();
    let b: &'static dyn EngineBackend = match spec.name.as_str() {
        "colmap" => COLMAP
            .get_or_init(|| ColmapBackend::detect().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| TaskError::permanent(e.clone()))?,
        "pycolmap" => PYCOLMAP
            .get_or_init(|| PycolmapBackend::detect().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| TaskError::permanent(e.clone()))?,
        other => {
            return Err(TaskError::permanent(format!(
                "unknown engine backend `{other}`; Tessera knows `pycolmap` (COLMAP 4) and `colmap` (the command line)"
            )));
        }
    };
    if let Some(v) = &spec.version
        && !(b.info().version == *v || b.info().version.starts_with(&format!("{v}.")))
    {
        return Err(TaskError::permanent(format!(
            "the job asks for {} {v}, and this worker has {} {}",
            spec.name,
            spec.name,
            b.info().version
        )));
    }
    Ok(b)
}

/// The backend a job gets when it names none, with its version resolved now, at
/// submission, so the fingerprint names the engine that will run (a changed engine never
/// reuses another engine's cached stages): pycolmap (COLMAP 4) where it is installed,
/// for its faster matching and its global mapper; else the COLMAP command line.
/// `TESSERA_ENGINE=colmap|pycolmap` chooses instead.
pub fn default_backend() -> Result<BackendSpec, TaskError> {
    let choose = resolve;
    match std::env::var("TESSERA_ENGINE").ok().as_deref() {
        Some(name) if !name.is_empty() && name != "auto" => choose(name),
        _ => choose("pycolmap").or_else(|py| {
            choose("colmap").map_err(|c| {
                TaskError::permanent(format!(
                    "no reconstruction engine is installed: {} / {}",
                    py.message, c.message
                ))
            })
        }),
    }
}

/// The backend `name` with the installed version pinned, as a job submitted now names it.
pub fn resolve(name: &str) -> Result<BackendSpec, TaskError> {
    backend_for(&BackendSpec {
        name: name.into(),
        version: None,
    })
    .map(|b| BackendSpec {
        name: name.into(),
        version: Some(b.info().version.clone()),
    })
}

/// The default backend of this machine (see [`default_backend`]).
pub fn backend() -> Result<&'static dyn EngineBackend, TaskError> {
    backend_for(&default_backend()?)
}

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
        };
        let name = self.stage.name();
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
        let mut result = match self.stage {
            Stage::Ingest => run.ingest().await?,
            Stage::Extract => run.extract().await?,
            Stage::Match => run.match_pairs().await?,
            Stage::Verify => run.verify().await?,
            Stage::Map => run.map().await?,
            Stage::BundleAdjust => run.bundle_adjust().await?,
            Stage::Georeference => run.georeference().await?,
            Stage::Export => run.export().await?,
        };
        result["stage"] = json!(name);
        result["skipped"] = json!(false);
        result["cache_key"] = json!(cache_key);
        result["wall_s"] = json!(started.elapsed().as_secs_f64());
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
        })
    }
}

impl Run<'_> {
    async fn upstream(&self, stage: Stage) -> Result<Checkpoint, TaskError> {
        checkpoint::manifest(self.ctx.ports().objects.as_ref(), self.job, stage.name()).await?.ok_or_else(|| {
            TaskError::transient(format!("the checkpoint of stage `{}` is missing; `tessera reconstruct … --resume` runs it again", stage.name()))
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
        std::fs::create_dir_all(&dir).map_err(io("creating the image folder"))?;
        let wanted: BTreeSet<&str> = photos.iter().map(|p| p.name.as_str()).collect();
        for entry in std::fs::read_dir(&dir).map_err(io("listing images"))? {
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
        Ok((dir, photos))
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
            reports.push(run_backend(self.ctx, backend, &self.scratch, inv, phase, total).await?);
        }
        Ok(reports)
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
        checkpoint::publish(
            self.ctx.ports().objects.as_ref(),
            self.job,
            stage.name(),
            dir,
            files,
            result.clone(),
        )
        .await?;
        Ok(result)
    }

    async fn ingest(&self) -> Result<Value, TaskError> {
        let objects = self.ctx.ports().objects.clone();
        let prefix = format!("{}/", self.spec.image_set.trim_end_matches('/'));
        let dir = self.scratch.join("images");
        fresh_dir(&dir)?;
        let mut keys = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, next) = objects.list(&prefix, after.as_deref(), 1000).await?;
            keys.extend(page.into_iter().map(|m| m.key));
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let total = keys.len() as u64;
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        let ingest_started = self.ctx.phase_started(Phase::Ingest).await?;
        for (i, key) in keys.iter().enumerate() {
            let name = key.rsplit('/').next().unwrap_or(key).to_string();
            let bytes = objects.get(key).await?;
            match images::check(&name, &bytes) {
                Ok((width, height)) => {
                    let (focal_mm, gps) = images::exif_facts(&bytes);
                    let upright = if self.spec.respect_exif_orientation {
                        let n = name.clone();
                        let b = bytes.clone();
                        tokio::task::spawn_blocking(move || images::upright(&n, &b))
                            .await
                            .map_err(|e| TaskError::transient(format!("worker thread: {e}")))?
                            .map_err(TaskError::from_classified)?
                    } else {
                        None
                    };
                    // A turned photo is stored upright beside the stage's checkpoint, so
                    // later stages (and retries) fetch the turned bytes.
                    let (bytes, key, width, height) = match upright {
                        Some(u) => {
                            let k = format!(
                                "{}/upright/{name}",
                                checkpoint::prefix(self.job, Stage::Ingest.name())
                            );
                            objects.put(&k, u.jpeg.clone().into()).await?;
                            (bytes::Bytes::from(u.jpeg), k, u.width, u.height)
                        }
                        None => (bytes, key.clone(), width, height),
                    };
                    std::fs::write(dir.join(&name), &bytes)
                        .map_err(io(format!("writing {name}")))?;
                    accepted.push(PhotoFacts {
                        name,
                        key,
                        sha256: hex::encode(Sha256::digest(&bytes)),
                        width,
                        height,
                        focal_mm,
                        gps,
                    });
                }
                Err(why) => {
                    self.ctx
                        .emit(EventKind::Warning {
                            message: format!("skipping {why}"),
                        })
                        .await?;
                    rejected.push(json!({ "name": name, "why": why.to_string() }));
                }
            }
            self.ctx
                .progress(Phase::Ingest, i as u64 + 1, Some(total), None)
                .await?;
        }
        self.ctx
            .phase_completed(Phase::Ingest, ingest_started)
            .await?;
        if accepted.len() < 2 {
            let why: Vec<String> = rejected
                .iter()
                .filter_map(|r| r["why"].as_str().map(str::to_owned))
                .collect();
            return Err(TaskError::permanent(format!(
                "a reconstruction needs at least 2 photos; `{}` holds {} usable of {} files{}",
                self.spec.image_set,
                accepted.len(),
                total,
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join("; "))
                }
            )));
        }
        let with_gps = accepted.iter().filter(|p| p.gps.is_some()).count();
        if matches!(self.spec.pairs, PairStrategy::Spatial { .. }) && with_gps < 2 {
            return Err(TaskError::permanent(format!(
                "spatial pairs need EXIF GPS, and only {with_gps} of {} photos have it; use `--pairs sequential` or `exhaustive`",
                accepted.len()
            )));
        }
        // Asked for, georeferencing needs GPS; chosen, the georeference stage says so.
        if matches!(self.spec.georef, Georef::Gps { .. })
            && !self.spec.georef_if_possible
            && with_gps < 3
        {
            return Err(TaskError::permanent(format!(
                "georeferencing from GPS needs at least 3 photos with EXIF GPS, and {with_gps} of {} have it; leave out `--georef gps`",
                accepted.len()
            )));
        }
        let megapixels = accepted
            .iter()
            .map(|p| (p.width * p.height) as f64 / 1e6)
            .sum::<f64>()
            / accepted.len() as f64;
        self.ctx
            .metric("images_accepted", accepted.len() as f64, None)
            .await?;
        let result = json!({ "images": accepted, "rejected": rejected, "mean_megapixels": megapixels, "with_gps": with_gps });
        self.publish(Stage::Ingest, &dir, &[], result).await
    }

    async fn extract(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        backend
            .info()
            .check_spec(&self.spec)
            .map_err(TaskError::from_classified)?;
        let (images, photos) = self.ensure_images().await?;
        let dir = self.scratch.join("extract");
        fresh_dir(&dir)?;
        let db = dir.join("database.db");
        let sizes: BTreeSet<(u64, u64)> = photos.iter().map(|p| (p.width, p.height)).collect();
        let cameras = tessera_sfm::backend::CameraSharing::of(&self.spec, sizes.len());
        if cameras == tessera_sfm::backend::CameraSharing::Auto {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "the photos come in {} sizes, so each photo gets its own intrinsics instead of one shared camera",
                        sizes.len()
                    ),
                })
                .await?;
        }
        let invocations = backend.extract(&self.spec, &db, &images, cameras, None, None);
        let report = self
            .exec(
                invocations,
                Phase::FeatureExtraction,
                Some(photos.len() as u64),
            )
            .await?
            .remove(0);
        let stats = backend
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if (stats.images as usize) < photos.len() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "COLMAP read only {} of the {} photos",
                        stats.images,
                        photos.len()
                    ),
                })
                .await?;
        }
        if stats.images == 0 {
            return Err(TaskError::permanent(format!(
                "COLMAP read none of the {} photos (it exited {:?}); are they decodable images?",
                photos.len(),
                report.exit_code
            )));
        }
        if stats.images_with_keypoints < 2 {
            return Err(TaskError::permanent(format!(
                "COLMAP found features in only {} of {} photos; they may be blank or too small",
                stats.images_with_keypoints, stats.images
            )));
        }
        if !stats.images_without_keypoints.is_empty() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "no features in: {}",
                        stats.images_without_keypoints.join(", ")
                    ),
                })
                .await?;
        }
        self.ctx
            .metric("keypoints", stats.keypoints as f64, None)
            .await?;
        let result = json!({ "database": stats, "process": Self::report_json(&report), "colmap_version": backend.info().version });
        self.publish(Stage::Extract, &dir, &["database.db"], result)
            .await
    }

    async fn match_pairs(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let (_images, photos) = self.ensure_images().await?;
        let extract = self.upstream(Stage::Extract).await?;
        let dir = self.scratch.join("match");
        fresh_dir(&dir)?;
        let db = self.database_from(&extract, &dir).await?;
        let tree = match &self.spec.pairs {
            PairStrategy::VocabTree { tree, .. } => {
                let local = dir.join("vocab_tree.bin");
                if Path::new(tree).is_file() {
                    std::fs::copy(tree, &local)
                        .map_err(io(format!("copying vocabulary tree {tree}")))?;
                } else {
                    self.ctx.ports().objects.get_to_file(tree, &local).await?;
                }
                Some(local)
            }
            _ => None,
        };
        let invocations = backend.match_pairs(&self.spec.pairs, &db, tree.as_deref());
        let report = self
            .exec(invocations, Phase::Matching, Some(photos.len() as u64))
            .await?
            .remove(0);
        let stats = backend
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if stats.matched_pairs == 0 {
            return Err(TaskError::permanent(
                "no pair of photos matched: they do not overlap, or the pair strategy chose no pairs (try `--pairs exhaustive`)",
            ));
        }
        self.ctx
            .metric("matched_pairs", stats.matched_pairs as f64, None)
            .await?;
        let result = json!({ "database": stats, "process": Self::report_json(&report) });
        self.publish(Stage::Match, &dir, &["database.db"], result)
            .await
    }

    async fn verify(&self) -> Result<Value, TaskError> {
        let matched = self.upstream(Stage::Match).await?;
        let dir = self.scratch.join("verify");
        fresh_dir(&dir)?;
        let started = self.ctx.phase_started(Phase::GeometricVerification).await?;
        let db = self.database_from(&matched, &dir).await?;
        let stats = backend_for(&self.spec.backend)?
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if stats.verified_pairs == 0 {
            return Err(TaskError::permanent(format!(
                "none of the {} matched pairs passed geometric verification: the photos do not overlap enough",
                stats.matched_pairs
            )));
        }
        self.ctx
            .metric("verified_pairs", stats.verified_pairs as f64, None)
            .await?;
        self.ctx
            .metric("inlier_matches", stats.inlier_matches as f64, None)
            .await?;
        self.ctx
            .phase_completed(Phase::GeometricVerification, started)
            .await?;
        let result = json!({ "verified_pairs": stats.verified_pairs, "matched_pairs": stats.matched_pairs, "inlier_matches": stats.inlier_matches });
        self.publish(Stage::Verify, &dir, &[], result).await
    }

    async fn map(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let (images, photos) = self.ensure_images().await?;
        let matched = self.upstream(Stage::Match).await?;
        let dir = self.scratch.join("map");
        std::fs::create_dir_all(&dir).map_err(io("creating map folder"))?;
        let db = self.database_from(&matched, &dir).await?;
        let sparse = dir.join("sparse");
        fresh_dir(&sparse)?;
        let live = dir.join("snapshots_live");
        fresh_dir(&live)?;
        let resume_from = self.latest_snapshot(&dir).await?;
        if let Some((seq, _)) = &resume_from {
            self.ctx
                .emit(EventKind::LogLine {
                    line: format!("map: continuing from sealed snapshot {seq}"),
                })
                .await?;
        }
        let every = (photos.len() as u32 / 4).clamp(2, 50);
        let resume_path = resume_from.as_ref().map(|(_, p)| p.as_path());
        let invocations = backend.map(
            self.spec.mapper,
            &db,
            &images,
            &sparse,
            &live,
            every,
            resume_path,
        );
        let sealer = self.seal_snapshots(&live, &dir, resume_from.as_ref().map_or(0, |(s, _)| *s));
        let (report, sealed) = {
            let stop = tokio_util::sync::CancellationToken::new();
            let run = async {
                let r = self
                    .exec(
                        invocations,
                        map_phase(self.spec.mapper),
                        Some(photos.len() as u64),
                    )
                    .await
                    .map(|mut r| r.remove(0));
                stop.cancel();
                r
            };
            tokio::join!(run, sealer(stop.clone()))
        };
        let report = match report {
            Ok(r) => Some(r),
            // COLMAP's mapper exits 1 when it builds no model; let the relaxed pass try,
            // and if nothing is built, say so plainly below.
            Err(e)
                if e.class == tessera_core::ErrorClass::Permanent
                    && read_models(&sparse)?.is_empty() =>
            {
                self.ctx
                    .emit(EventKind::Warning { message: e.message })
                    .await?;
                None
            }
            Err(e) => return Err(e),
        };
        let mut models = read_models(&sparse)?;
        let mut relaxed_tried = false;
        if self.spec.mapper == tessera_core::spec::MapperKind::Incremental
            && models
                .first()
                .is_none_or(|(_, m)| m.registered_images < photos.len())
        {
            // COLMAP's default initialisation splits some scenes; one more pass with
            // relaxed thresholds often registers them whole. The better model wins.
            relaxed_tried = true;
            let registered = models.first().map_or(0, |(_, m)| m.registered_images);
            self.ctx
                .emit(EventKind::Warning {
                    message: format!("the mapper registered {registered} of {} photos; trying again with relaxed initialisation", photos.len()),
                })
                .await?;
            let relaxed = dir.join("sparse_relaxed");
            fresh_dir(&relaxed)?;
            let relaxed_run = self
                .exec(
                    backend.map_relaxed(&db, &images, &relaxed),
                    Phase::IncrementalRegister,
                    Some(photos.len() as u64),
                )
                .await;
            match relaxed_run {
                Ok(_) => models.extend(read_models(&relaxed)?),
                // COLMAP's mapper exits 1 when it builds no model at all; the first
                // result stands.
                Err(e) if e.class == tessera_core::ErrorClass::Permanent => {
                    self.ctx
                        .emit(EventKind::Warning {
                            message: format!(
                                "the relaxed pass built nothing better: {}",
                                e.message
                            ),
                        })
                        .await?;
                }
                Err(e) => return Err(e),
            }
        }
        sort_models(&mut models);
        let Some((best, best_metrics)) = models.first().cloned() else {
            return Err(TaskError::permanent(format!(
                "the mapper registered none of the {} photos: no initial pair with enough overlap was found",
                photos.len()
            )));
        };
        // The sub-models are the models of the run that built the largest (a relaxed
        // pass re-maps the same photos: its models are alternatives, not parts).
        let mut submodels: Vec<(PathBuf, metrics::ModelMetrics)> = models
            .iter()
            .filter(|(p, _)| p.parent() == best.parent())
            .cloned()
            .collect();
        let (mut primary, mut primary_metrics) = (best, best_metrics);
        let mut merged = None;
        if submodels.len() > 1 && primary_metrics.registered_images < photos.len() {
            // Try joining the other sub-models' photos to the largest: the registrator
            // places them against its points with its poses held. Kept only when it
            // registers more.
            let joined = dir.join("merged");
            fresh_dir(&joined)?;
            let run = self
                .exec(
                    backend.register_images(&db, &primary, &joined),
                    Phase::IncrementalRegister,
                    Some(photos.len() as u64),
                )
                .await;
            // The registrator writes the joined model into the folder itself. Joining is
            // optional: any failure but a cancel leaves the largest model primary.
            let outcome = match run {
                Ok(_) => model_bin::read(&joined)
                    .ok()
                    .map(|r| (joined.clone(), metrics::compute(&r))),
                Err(e) if e.class == tessera_core::ErrorClass::Cancelled => return Err(e),
                Err(e) => {
                    self.ctx
                        .emit(EventKind::Warning {
                            message: format!("joining the sub-models failed: {}", e.message),
                        })
                        .await?;
                    None
                }
            };
            let gained = outcome
                .as_ref()
                .is_some_and(|(_, m)| joined_is_better(&primary_metrics, m));
            self.ctx
                .emit(EventKind::LogLine {
                    line: format!(
                        "map: joining the {} sub-models {}",
                        submodels.len(),
                        match &outcome {
                            Some((_, m)) if gained => format!(
                                "registered {} photos instead of {}: the joined model is primary",
                                m.registered_images, primary_metrics.registered_images
                            ),
                            Some((_, m)) => format!(
                                "gave {} photos, {} points, {:.2} px: the largest stays primary",
                                m.registered_images, m.points, m.mean_reprojection_error
                            ),
                            None => "built nothing: the largest stays primary".into(),
                        }
                    ),
                })
                .await?;
            if gained && let Some((p, m)) = outcome {
                merged = Some(json!({
                    "from": submodels.len(),
                    "registered_before": primary_metrics.registered_images,
                    "registered_after": m.registered_images,
                }));
                // A sub-model whose photos the joined model now holds is part of it.
                let held = model_names(&p)?;
                let mut kept = vec![(p.clone(), m.clone())];
                for (path, metrics) in submodels.into_iter().skip(1) {
                    if !model_names(&path)?.is_subset(&held) {
                        kept.push((path, metrics));
                    }
                }
                submodels = kept;
                (primary, primary_metrics) = (p, m);
            }
        }
        // Named, so a person can see which photo did not fit (a portrait in a drone set)
        // instead of a count that could be any of them.
        let left_out = left_out(&photos, &model_names(&primary)?);
        if primary_metrics.registered_images < photos.len() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "partial result: the largest model registers {} of {} photos ({} sub-models kept, {} models tried in all); not in it: {}",
                        primary_metrics.registered_images,
                        photos.len(),
                        submodels.len(),
                        models.len(),
                        names_in_brief(&left_out, 20)
                    ),
                })
                .await?;
        }
        let model_dir = dir.join("model");
        fresh_dir(&model_dir)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            std::fs::copy(primary.join(f), model_dir.join(f))
                .map_err(io(format!("copying {f}")))?;
        }
        // Sub-model 0 is the primary (in `model/`); the others are kept beside it.
        let mut files: Vec<String> = ["cameras.bin", "images.bin", "points3D.bin"]
            .iter()
            .map(|f| format!("model/{f}"))
            .collect();
        for (idx, (path, _)) in submodels.iter().enumerate().skip(1) {
            let to = dir.join(format!("submodels/{idx}"));
            fresh_dir(&to)?;
            for f in ["cameras.bin", "images.bin", "points3D.bin"] {
                std::fs::copy(path.join(f), to.join(f)).map_err(io(format!("copying {f}")))?;
                files.push(format!("submodels/{idx}/{f}"));
            }
        }
        self.ctx
            .metric(
                "registered_images",
                primary_metrics.registered_images as f64,
                None,
            )
            .await?;
        self.ctx
            .metric("points", primary_metrics.points as f64, None)
            .await?;
        self.ctx
            .metric("submodels", submodels.len() as f64, None)
            .await?;
        let result = json!({
            "model": primary_metrics,
            "submodels": submodels
                .iter()
                .enumerate()
                .map(|(idx, (_, m))| json!({ "idx": idx, "model": m }))
                .collect::<Vec<_>>(),
            "merged": merged,
            "models": models.iter().map(|(_, m)| m).collect::<Vec<_>>(),
            "total_images": photos.len(),
            "left_out": left_out,
            "snapshots_sealed": sealed,
            "relaxed_retry": relaxed_tried,
            "resumed_from_snapshot": resume_from.map(|(s, _)| s),
            "process": report.as_ref().map(Self::report_json),
        });
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        self.publish(Stage::Map, &dir, &refs, result).await
    }

    /// The latest sealed snapshot in the object store, materialised locally.
    async fn latest_snapshot(&self, dir: &Path) -> Result<Option<(u64, PathBuf)>, TaskError> {
        let objects = self.ctx.ports().objects.clone();
        let prefix = checkpoint::snapshots_prefix(self.job);
        let latest = checkpoint::sealed_snapshots(objects.as_ref(), self.job)
            .await?
            .last()
            .copied();
        let Some(seq) = latest else { return Ok(None) };
        let local = dir.join("resume").join(seq.to_string());
        fresh_dir(&local)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            objects
                .get_to_file(&format!("{prefix}{seq}/{f}"), &local.join(f))
                .await?;
        }
        match model_bin::read(&local) {
            Ok(_) => Ok(Some((seq, local))),
            Err(e) => {
                self.ctx
                    .emit(EventKind::Warning {
                        message: format!(
                            "sealed snapshot {seq} does not parse ({e}); mapping starts over"
                        ),
                    })
                    .await?;
                Ok(None)
            }
        }
    }

    /// Watch COLMAP's snapshot folder; seal each complete snapshot (temp folder →
    /// `.complete` marker → atomic rename), upload it (marker last) and announce it.
    fn seal_snapshots<'a>(
        &'a self,
        live: &'a Path,
        dir: &'a Path,
        first_seq: u64,
    ) -> impl FnOnce(
        tokio_util::sync::CancellationToken,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send + 'a>>
    + 'a {
        move |stop| {
            Box::pin(async move {
                let mut seen = BTreeSet::new();
                let mut seq = first_seq;
                let mut sealed = 0;
                let sealed_root = dir.join("snapshots");
                let _ = std::fs::create_dir_all(&sealed_root);
                loop {
                    let stopping = stop.is_cancelled();
                    let mut names: Vec<_> = std::fs::read_dir(live)
                        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
                        .unwrap_or_default();
                    names.sort();
                    for snap in names {
                        if seen.contains(&snap) {
                            continue;
                        }
                        // Only its counts are kept: the model is dropped before the awaits.
                        let summary = match model_bin::read(&snap) {
                            Ok(model) => SnapshotSummary {
                                registered_images: model.images.len() as u64,
                                points: model.points.len() as u64,
                                cameras: model.cameras.len() as u64,
                            },
                            Err(_) => continue,
                        };
                        seen.insert(snap.clone());
                        // A number no other attempt will ever use, or none: this
                        // attempt lost its lease and must not write snapshots.
                        match self.allocate_snapshot(seq).await {
                            Ok(n) => seq = n,
                            Err(e) => {
                                tracing::warn!(job = %self.job, error = %e.message, "snapshot not sealed");
                                continue;
                            }
                        }
                        if self
                            .seal_one(&snap, &sealed_root, seq, summary)
                            .await
                            .is_ok()
                        {
                            sealed += 1;
                            crate::photos::fault::crash_point(
                                crate::photos::fault::AFTER_SNAPSHOT_SEALED,
                            );
                        }
                    }
                    if stopping {
                        return sealed;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            })
        }
    }

    /// The next snapshot number, under this task's fence.
    async fn allocate_snapshot(&self, after: u64) -> Result<u64, TaskError> {
        checkpoint::allocate_snapshot(self.ctx.ports().store.as_ref(), self.job, after, |w| {
            self.ctx.commit(w)
        })
        .await
    }

    async fn seal_one(
        &self,
        snap: &Path,
        sealed_root: &Path,
        seq: u64,
        summary: SnapshotSummary,
    ) -> Result<(), TaskError> {
        let tmp = sealed_root.join(format!(".tmp_{seq}"));
        fresh_dir(&tmp)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            std::fs::copy(snap.join(f), tmp.join(f))
                .map_err(io(format!("copying snapshot {f}")))?;
        }
        std::fs::write(tmp.join(".complete"), b"").map_err(io("writing the snapshot marker"))?;
        let final_dir = sealed_root.join(seq.to_string());
        let _ = std::fs::remove_dir_all(&final_dir);
        std::fs::rename(&tmp, &final_dir).map_err(io("sealing the snapshot"))?;
        let prefix = format!(
            "{}/snapshots/{seq}",
            checkpoint::prefix(self.job, Stage::Map.name())
        );
        let objects = self.ctx.ports().objects.clone();
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            objects
                .put_file(&format!("{prefix}/{f}"), &final_dir.join(f))
                .await?;
        }
        // The marker last, and only once: a sealed snapshot is never sealed again.
        match objects
            .put_if_absent(&format!("{prefix}/.complete"), bytes::Bytes::new())
            .await
        {
            Ok(_) | Err(tessera_core::ports::ObjectStoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        self.ctx
            .emit(EventKind::SnapshotAvailable {
                key: prefix,
                snapshot: seq,
                summary: Some(summary),
            })
            .await?;
        Ok(())
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

    async fn bundle_adjust(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("bundle_adjust");
        fresh_dir(&dir)?;
        let input = self.model_from(Stage::Map, &dir).await?;
        let (mid, out) = (dir.join("pass1"), dir.join("adjusted"));
        fresh_dir(&mid)?;
        fresh_dir(&out)?;
        let backend = backend_for(&self.spec.backend)?;
        let reports: Vec<Value> = self
            .exec(
                backend.bundle_adjust(self.spec.ba, &input, &mid, &out),
                Phase::BundleAdjust,
                None,
            )
            .await?
            .iter()
            .map(Self::report_json)
            .collect();
        let mode = if self.spec.ba == BaMode::TwoStage {
            "two_stage"
        } else {
            "standard"
        };
        self.seal_model(
            Stage::BundleAdjust,
            &dir,
            &out,
            json!({ "mode": mode, "passes": reports }),
        )
        .await
    }

    async fn georeference(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("georeference");
        fresh_dir(&dir)?;
        let input = self.model_from(Stage::BundleAdjust, &dir).await?;
        let matched = self.upstream(Stage::Match).await?;
        let db = self.database_from(&matched, &dir).await?;
        let out = dir.join("aligned");
        fresh_dir(&out)?;
        let ecef = matches!(
            self.spec.georef,
            Georef::Gps {
                target_epsg: Some(4978)
            }
        );
        let backend = backend_for(&self.spec.backend)?;
        let run = self
            .exec(
                backend.georegister_gps(&input, &out, &db, ecef),
                Phase::Georeference,
                None,
            )
            .await;
        let unplaced =
            |why: String| format!("COLMAP could not align the model to the photos' GPS ({why})");
        let placed = match run {
            Ok(mut r) if out.join("cameras.bin").is_file() => Ok(r.remove(0)),
            Ok(_) => Err(unplaced(
                "too few registered photos with GPS, or GPS too noisy".into(),
            )),
            // A run that cannot be placed, not one that may go better on a retry.
            Err(e) if e.class == tessera_core::ErrorClass::Permanent => Err(unplaced(e.message)),
            Err(e) => return Err(e),
        };
        let report = match placed {
            Ok(report) => report,
            Err(why) if self.spec.georef_if_possible => {
                // Chosen because the photos carry GPS, not asked for: the model stays
                // in its own frame and the run goes on.
                self.ctx
                    .emit(EventKind::Warning {
                        message: format!("{why}; the model stays in its own frame"),
                    })
                    .await?;
                let result = json!({ "frame": "none", "placed": false, "why": why });
                return self
                    .seal_model(Stage::Georeference, &dir, &input, result)
                    .await;
            }
            Err(why) => return Err(TaskError::permanent(why)),
        };
        let before = model_bin::read(&input).map_err(TaskError::from_classified)?;
        let after = model_bin::read(&out).map_err(TaskError::from_classified)?;
        let residual = super::geo::gps_residual(&after, &self.photos_gps().await?, ecef);
        if let Some(r) = residual {
            self.ctx
                .metric("alignment_residual_m", r, Some("m"))
                .await?;
        }
        let frame = if ecef { "ecef" } else { "enu" };
        let result = json!({ "frame": frame, "alignment_residual_m": residual, "registered_before": before.images.len(), "process": Self::report_json(&report) });
        self.seal_model(Stage::Georeference, &dir, &out, result)
            .await
    }

    /// The mapper's other sub-models (1, 2, …; 0 is the primary in `sparse/0`), as COLMAP
    /// binary models in `sparse/<idx>/`, exactly as the map stage sealed them.
    async fn export_submodels(&self, dir: &Path) -> Result<Vec<String>, TaskError> {
        let cp = self.upstream(Stage::Map).await?;
        let mut files = Vec::new();
        let count = cp.result["submodels"].as_array().map_or(0, Vec::len);
        for idx in 1..count {
            let to = dir.join(format!("sparse/{idx}"));
            fresh_dir(&to)?;
            for f in ["cameras.bin", "images.bin", "points3D.bin"] {
                let name = format!("submodels/{idx}/{f}");
                checkpoint::materialize(
                    self.ctx.ports().objects.as_ref(),
                    self.job,
                    &cp,
                    &name,
                    dir,
                )
                .await?;
                std::fs::rename(dir.join(&name), to.join(f))
                    .map_err(io(format!("moving sub-model {idx}'s {f}")))?;
                files.push(format!("sparse/{idx}/{f}"));
            }
        }
        Ok(files)
    }

    async fn photos_gps(&self) -> Result<Vec<(String, images::Gps)>, TaskError> {
        let photos = Self::photos(&self.upstream(Stage::Ingest).await?)?;
        Ok(photos
            .into_iter()
            .filter_map(|p| Some((p.name, p.gps?)))
            .collect())
    }

    async fn export(&self) -> Result<Value, TaskError> {
        let dir = self.scratch.join("export");
        fresh_dir(&dir)?;
        let from = if self.spec.georef != Georef::None {
            Stage::Georeference
        } else {
            Stage::BundleAdjust
        };
        let input = self.model_from(from, &dir).await?;
        let started = self.ctx.phase_started(Phase::Export).await?;
        let rec = model_bin::read(&input).map_err(TaskError::from_classified)?;
        let mut files = write_exports(&rec, &dir, &self.spec.exports)?;
        files.extend(self.export_submodels(&dir).await?);
        files.extend(super::model_zip::write(&dir, &files)?);
        let m = metrics::compute(&rec);
        self.ctx.phase_completed(Phase::Export, started).await?;
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let result = json!({ "files": files, "model": m, "from": from.name(), "memory_model": memory::MEASURED_WITH });
        self.publish(Stage::Export, &dir, &refs, result).await
    }
}

/// Run COLMAP in `cwd` as part of the task, turning its lines into progress events and
/// classifying how it ended (COLMAP's exit code is only one of the signals).
pub async fn run_backend(
    ctx: &TaskContext,
    backend: &dyn EngineBackend,
    cwd: &Path,
    invocation: Invocation,
    phase: Phase,
    total: Option<u64>,
) -> Result<ProcessReport, TaskError> {
    let command = invocation.name().to_string();
    let mut spec = ProcessSpec::new(invocation.program, invocation.args);
    spec.cwd = Some(cwd.to_path_buf());
    // The memory model's estimate is for admission; the hard limit leaves it twice the
    // room, and without an estimate the class's whole budget.
    let task = ctx.task();
    spec.rss_limit = Some(task.memory_estimate.map_or_else(
        || task.resource_class.memory_bytes(),
        |e| e.saturating_mul(2),
    ));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let sink = move |_s: Stream, line: &str| {
        let _ = tx.send(line.to_string());
    };
    let done = tokio::sync::Notify::new();
    let run = async {
        let r = ctx.run_process(spec, &sink).await;
        done.notify_one();
        r
    };
    let drain = async {
        let mut tail: VecDeque<String> = VecDeque::new();
        // The engine's own sub-phases (registration, bundle adjustment, …), each with
        // when it was first seen: completed together when the command succeeds, so every
        // phase a client saw start also ends.
        let mut seen: Vec<(Phase, Instant)> = Vec::new();
        let mut last_progress = Instant::now() - Duration::from_secs(1);
        let mut handle =
            async |line: String, tail: &mut VecDeque<String>, seen: &mut Vec<(Phase, Instant)>| {
                let event = backend.parse_line(&line, total);
                if let Some(
                    tessera_sfm::backend::LineEvent::Progress { phase: p, .. }
                    | tessera_sfm::backend::LineEvent::Started(p),
                ) = &event
                    && *p != phase
                    && !seen.iter().any(|(s, _)| s == p)
                {
                    seen.push((*p, Instant::now()));
                }
                match event {
                    Some(tessera_sfm::backend::LineEvent::Progress {
                        phase,
                        current,
                        total,
                    }) => {
                        let last = total == Some(current);
                        if last || last_progress.elapsed() >= Duration::from_millis(250) {
                            last_progress = Instant::now();
                            let _ = ctx.progress(phase, current, total, None).await;
                        }
                    }
                    Some(tessera_sfm::backend::LineEvent::Started(p)) => {
                        let _ = ctx.emit(EventKind::PhaseStarted { phase: p }).await;
                    }
                    Some(tessera_sfm::backend::LineEvent::Figure(name, v)) => {
                        let _ = ctx.metric(name, v, None).await;
                    }
                    Some(tessera_sfm::backend::LineEvent::Warning(w)) => {
                        let _ = ctx.emit(EventKind::Warning { message: w }).await;
                    }
                    None => {}
                }
                tail.push_back(line);
                if tail.len() > 12 {
                    tail.pop_front();
                }
            };
        loop {
            tokio::select! {
                l = rx.recv() => match l {
                    Some(l) => handle(l, &mut tail, &mut seen).await,
                    None => break,
                },
                _ = done.notified() => {
                    while let Ok(l) = rx.try_recv() {
                        handle(l, &mut tail, &mut seen).await;
                    }
                    break;
                }
            }
        }
        (tail, seen)
    };
    let started = ctx.phase_started(phase).await?;
    let (report, (tail, seen)) = tokio::join!(run, drain);
    let report = report?;
    let stage = ctx.task().name.clone();
    ctx.metric(
        &format!("{stage}.{command}_peak_rss_bytes"),
        report.peak_rss_bytes as f64,
        Some("bytes"),
    )
    .await?;
    ctx.metric(
        &format!("{stage}.{command}_cpu_s"),
        report.cpu.as_secs_f64(),
        Some("s"),
    )
    .await?;
    let tail: Vec<String> = tail.into_iter().collect();
    let said = tail.join(" | ");
    match (report.killed_for, report.exit_code, report.signal) {
        (Some(KillReason::Cancelled), ..) => {
            return Err(TaskError::cancelled(format!(
                "COLMAP {command} was stopped by cancel"
            )));
        }
        (Some(KillReason::RssLimit), ..) => {
            return Err(TaskError::resource(format!(
                "COLMAP {command} exceeded the memory limit of its resource class ({:?}); retrying one class up",
                ctx.task().resource_class
            )));
        }
        (Some(KillReason::Timeout), ..) => {
            return Err(TaskError::resource(format!(
                "COLMAP {command} ran past its time limit"
            )));
        }
        (None, _, Some(9)) => {
            return Err(TaskError::resource(format!(
                "COLMAP {command} was killed by SIGKILL (the kernel's out-of-memory killer?)"
            )));
        }
        (None, Some(134), _) | (None, _, Some(6)) => {
            return Err(TaskError::permanent(format!(
                "COLMAP {command} aborted (exit 134) — usually empty or unusable input; it said: {said}"
            )));
        }
        (None, Some(0), _) => {}
        (None, code, sig) => {
            return Err(TaskError::permanent(format!(
                "COLMAP {command} failed (exit {code:?}, signal {sig:?}); it said: {said}"
            )));
        }
    }
    for (p, at) in seen {
        ctx.phase_completed(p, at).await?;
    }
    ctx.phase_completed(phase, started).await?;
    Ok(report)
}

/// The phase a mapper's run reports as: a global mapper's timeline must not say
/// "incremental".
fn map_phase(mapper: tessera_core::spec::MapperKind) -> Phase {
    use tessera_core::spec::MapperKind as M;
    match mapper {
        M::Incremental => Phase::IncrementalRegister,
        M::Global => Phase::GlobalPositioning,
        M::Hierarchical => Phase::HierarchicalCluster,
    }
}

/// Write `rec` into `dir` as `sparse/0` (COLMAP binary, always) and each requested
/// format; returns the files written, relative to `dir`.
pub fn write_exports(
    rec: &tessera_sfm::Reconstruction,
    dir: &Path,
    formats: &[tessera_core::spec::ExportFormat],
) -> Result<Vec<String>, TaskError> {
    let mut files: Vec<String> = Vec::new();
    model_bin::write(rec, &dir.join("sparse/0")).map_err(TaskError::from_classified)?;
    files.extend(
        [
            "sparse/0/cameras.bin",
            "sparse/0/images.bin",
            "sparse/0/points3D.bin",
        ]
        .map(String::from),
    );
    use tessera_core::spec::ExportFormat as F;
    for format in formats {
        match format {
            F::ColmapBin => {}
            F::ColmapText => {
                model_text::write(rec, &dir.join("sparse_text/0"))
                    .map_err(TaskError::from_classified)?;
                files.extend(
                    [
                        "sparse_text/0/cameras.txt",
                        "sparse_text/0/images.txt",
                        "sparse_text/0/points3D.txt",
                    ]
                    .map(String::from),
                );
            }
            F::Ply => {
                tessera_sfm::export::write_ply(rec, &dir.join("model.ply"))
                    .map_err(TaskError::from_classified)?;
                files.push("model.ply".into());
            }
            F::Nvm => {
                tessera_sfm::export::write_nvm(rec, &dir.join("model.nvm"))
                    .map_err(TaskError::from_classified)?;
                files.push("model.nvm".into());
            }
            F::PointsBin => {
                tessera_sfm::export::write_points_bin(rec, &dir.join("points.bin"))
                    .map_err(TaskError::from_classified)?;
                files.push("points.bin".into());
            }
        }
    }
    Ok(files)
}
