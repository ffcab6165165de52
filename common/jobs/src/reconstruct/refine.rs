//! Working on a finished reconstruction: *relocalize* registers new photos into its
//! model (COLMAP's image registrator, then bundle adjustment); *triangulate*
//! re-triangulates its points with the camera poses held fixed. Both start from the
//! base job's checkpoints (verified by checksum) and end with the same exports.

use super::checkpoint::{self, Checkpoint};
use super::images::{self, PhotoFacts};
use super::memory;
use super::stages::{fresh_dir, io, run_backend, write_exports};
use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessera_core::event::{EventKind, Phase};
use tessera_core::spec::{ExportFormat, RelocalizeSpec, SpecError, TriangulateSpec};
use tessera_core::{JobId, ProjectId, TenantId};
use tessera_engine::{
    JobPlan, Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan,
};
use tessera_sfm::{metrics, model_bin};

/// Job kind of relocalization.
pub const RELOCALIZE: &str = "relocalize";
/// Job kind of re-triangulation.
pub const TRIANGULATE: &str = "triangulate";

fn plan(
    kind: &str,
    first: &str,
    spec: Value,
    priority: i32,
    tenant: TenantId,
    project: Option<ProjectId>,
    label: &str,
) -> JobPlan {
    let mut work = TaskPlan::new(first, format!("sfm.{first}"), json!({}));
    // The base job's engine is read when the task runs: COLMAP 4's Python (the default,
    // and the larger) is counted. The new photos are not known yet either; a memory kill
    // moves the task to the next class with its whole budget.
    let estimate = memory::estimate(super::Stage::Map, 50, 1.0, 1000, false)
        + memory::engine_overhead("pycolmap", super::Stage::Map);
    work.memory_estimate = Some(estimate);
    work.resource_class = memory::class_for(estimate);
    let export =
        TaskPlan::new("export", "sfm.refined_export", json!({ "from": first })).after([first]);
    JobPlan {
        tenant,
        project,
        kind: kind.into(),
        label: label.into(),
        spec,
        priority,
        tasks: vec![work, export],
    }
}

/// Plan a relocalization.
pub fn plan_relocalize(
    spec: &RelocalizeSpec,
    tenant: TenantId,
    project: Option<ProjectId>,
    label: &str,
) -> Result<JobPlan, SpecError> {
    spec.validate()?;
    Ok(plan(
        RELOCALIZE,
        "relocalize",
        serde_json::to_value(spec).expect("serializable"),
        spec.priority,
        tenant,
        project,
        label,
    ))
}

/// Plan a re-triangulation.
pub fn plan_triangulate(
    spec: &TriangulateSpec,
    tenant: TenantId,
    project: Option<ProjectId>,
    label: &str,
) -> Result<JobPlan, SpecError> {
    spec.validate()?;
    Ok(plan(
        TRIANGULATE,
        "triangulate",
        serde_json::to_value(spec).expect("serializable"),
        spec.priority,
        tenant,
        project,
        label,
    ))
}

/// The base job's checkpoints a refinement starts from.
struct Base {
    job: JobId,
    photos: Vec<PhotoFacts>,
    matched: Checkpoint,
    model: Checkpoint,
}

async fn base(ctx: &TaskContext, base_job: &str) -> Result<Base, TaskError> {
    let job: JobId = base_job
        .parse()
        .map_err(|e| TaskError::permanent(format!("{e}")))?;
    let objects = ctx.ports().objects.as_ref();
    let need = |stage: &'static str| async move {
        checkpoint::manifest(objects, job, stage).await?.ok_or_else(|| {
            TaskError::permanent(format!("job {job} has no `{stage}` checkpoint: it is not a finished reconstruction (see `tessera jobs show {job}`)"))
        })
    };
    let ingest = need("ingest").await?;
    let photos: Vec<PhotoFacts> = serde_json::from_value(ingest.result["images"].clone())
        .map_err(|e| TaskError::permanent(format!("base ingest checkpoint: {e}")))?;
    Ok(Base {
        job,
        photos,
        matched: need("match").await?,
        model: need("export").await?,
    })
}

/// Download the base photos (and `extra`) into `dir`, each verified by checksum.
async fn photos_into(
    ctx: &TaskContext,
    dir: &Path,
    photos: &[PhotoFacts],
) -> Result<(), TaskError> {
    std::fs::create_dir_all(dir).map_err(io("creating the image folder"))?;
    for p in photos {
        let path = dir.join(&p.name);
        if !(path.is_file()
            && checkpoint::sha256_file(&path)
                .map(|s| s == p.sha256)
                .unwrap_or(false))
        {
            ctx.ports().objects.get_to_file(&p.key, &path).await?;
        }
    }
    Ok(())
}

/// Seal `work/model` as the checkpoint of `stage`.
async fn publish_model(
    ctx: &TaskContext,
    stage: &str,
    work: &Path,
    result: &Value,
) -> Result<(), TaskError> {
    let files = [
        "model/cameras.bin",
        "model/images.bin",
        "model/points3D.bin",
    ];
    checkpoint::publish(
        ctx.ports().objects.as_ref(),
        ctx.task().job_id,
        stage,
        work,
        &files,
        result.clone(),
    )
    .await?;
    Ok(())
}

/// The spec the base reconstruction was made with.
async fn base_spec(
    ctx: &TaskContext,
    job: JobId,
) -> Result<tessera_core::spec::ReconstructionSpec, TaskError> {
    let item = ctx
        .ports()
        .store
        .get(&tessera_core::records::job_key(job))
        .await?
        .ok_or_else(|| TaskError::permanent(format!("job {job} does not exist")))?;
    let base = tessera_core::records::job_from(&item)?;
    Ok(tessera_core::spec::parse(base.spec)?)
}

async fn base_model(ctx: &TaskContext, base: &Base, dir: &Path) -> Result<PathBuf, TaskError> {
    for f in ["cameras.bin", "images.bin", "points3D.bin"] {
        checkpoint::materialize(
            ctx.ports().objects.as_ref(),
            base.job,
            &base.model,
            &format!("sparse/0/{f}"),
            dir,
        )
        .await?;
    }
    Ok(dir.join("sparse/0"))
}

/// What both refinements start from: the base job's checkpoints, a fresh work folder,
/// and the base photos materialised (verified) in the scratch folder.
struct Workspace {
    base: Base,
    work: std::path::PathBuf,
    images: std::path::PathBuf,
}

async fn workspace(ctx: &TaskContext, base_job: &str, what: &str) -> Result<Workspace, TaskError> {
    let base = base(ctx, base_job).await?;
    let scratch = ctx.scratch_dir().map_err(io("scratch folder"))?;
    let work = scratch.join(what);
    fresh_dir(&work)?;
    let images = scratch.join("images");
    photos_into(ctx, &images, &base.photos).await?;
    Ok(Workspace { base, work, images })
}

struct Relocalize;

#[async_trait]
impl TaskHandler for Relocalize {
    fn needs(&self) -> &'static [tessera_engine::Need] {
        &[tessera_engine::Need::Colmap]
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let spec: RelocalizeSpec = tessera_core::spec::parse(ctx.job().spec.clone())?;
        let Workspace { base, work, images } = workspace(ctx, &spec.base_job, "relocalize").await?;
        let started = Instant::now();

        // The new photos, checked like any upload; a name already in the base is refused.
        let known: BTreeSet<&str> = base.photos.iter().map(|p| p.name.as_str()).collect();
        let listing = super::image_set::list(
            ctx.ports().store.as_ref(),
            ctx.ports().objects.as_ref(),
            &ctx.job().tenant,
            &spec.image_set,
            None,
        )
        .await?;
        let mut new = Vec::new();
        for meta in listing {
            let name = meta.name.clone();
            if known.contains(name.as_str()) {
                return Err(TaskError::permanent(format!(
                    "photo `{name}` is already in the base reconstruction; rename the new photo"
                )));
            }
            let bytes = ctx.ports().objects.get(&meta.key).await?;
            match images::check(&name, &bytes) {
                Ok((width, height)) => {
                    std::fs::write(images.join(&name), &bytes)
                        .map_err(io(format!("writing {name}")))?;
                    let (focal_mm, gps) = images::exif_facts(&bytes);
                    new.push(PhotoFacts {
                        name,
                        key: meta.key,
                        sha256: hex::encode(Sha256::digest(&bytes)),
                        width,
                        height,
                        focal_mm,
                        gps,
                        focal_plane: images::focal_plane(&bytes),
                    });
                }
                Err(why) => {
                    ctx.emit(EventKind::Warning {
                        message: format!("skipping {why}"),
                    })
                    .await?
                }
            }
        }
        if new.is_empty() {
            return Err(TaskError::permanent(format!(
                "`{}` holds no usable new photos",
                spec.image_set
            )));
        }
        let db = checkpoint::materialize(
            ctx.ports().objects.as_ref(),
            base.job,
            &base.matched,
            "database.db",
            &work,
        )
        .await?;
        let model = base_model(ctx, &base, &work.join("base")).await?;
        let list = work.join("new_images.txt");
        std::fs::write(
            &list,
            new.iter()
                .map(|p| format!("{}\n", p.name))
                .collect::<String>(),
        )
        .map_err(io("writing the image list"))?;
        let same_size = base.photos.first().is_some_and(|b| {
            new.iter()
                .all(|n| (n.width, n.height) == (b.width, b.height))
        });
        let sides: Vec<u32> = new
            .iter()
            .map(|n| super::resolution::long_side(n.width, n.height))
            .collect();
        let base_spec = extraction_spec(base_spec(ctx, base.job).await?, &spec, &sides);
        let backend = super::stages::backend_for(&base_spec.backend)?;
        let existing_camera = same_size.then_some(1);
        let steps = [
            (
                backend.extract(
                    &base_spec,
                    &db,
                    &images,
                    // The new photos join the model's cameras (`existing_camera`) or get
                    // their own; never one camera shared among just themselves.
                    if base_spec.per_image_intrinsics {
                        tessera_sfm::backend::CameraSharing::PerImage
                    } else {
                        tessera_sfm::backend::CameraSharing::Auto
                    },
                    Some(&list),
                    existing_camera,
                ),
                Phase::FeatureExtraction,
            ),
            (
                backend.match_pairs(&tessera_core::spec::PairStrategy::Exhaustive, &db, None),
                Phase::Matching,
            ),
        ];
        for (invocations, phase) in steps {
            for inv in invocations.map_err(TaskError::from_classified)? {
                ctx.checkpoint().await?;
                run_backend(ctx, backend, &work, inv, phase, Some(new.len() as u64)).await?;
            }
            if phase == Phase::FeatureExtraction {
                // New photos of another size get a camera of their own, from EXIF; a
                // correction that cannot be made leaves COLMAP's prior.
                if let Err(e) = super::focal_prior::correct_in(&db, &new) {
                    tracing::warn!(error = %e, "the new photos' focal prior was left as COLMAP read it");
                }
            }
        }
        let registered = work.join("registered");
        fresh_dir(&registered)?;
        let adjusted = work.join("model");
        fresh_dir(&adjusted)?;
        let steps = [
            (
                backend.register_images(&db, &model, &registered),
                Phase::Relocalize,
            ),
            (
                backend.bundle_adjust(
                    tessera_core::spec::BaMode::Standard,
                    &registered,
                    &registered,
                    &adjusted,
                ),
                Phase::BundleAdjust,
            ),
        ];
        for (invocations, phase) in steps {
            for inv in invocations.map_err(TaskError::from_classified)? {
                ctx.checkpoint().await?;
                run_backend(ctx, backend, &work, inv, phase, None).await?;
            }
        }

        let rec = model_bin::read(&adjusted).map_err(TaskError::from_classified)?;
        let names: BTreeSet<&str> = rec.images.values().map(|i| i.name.as_str()).collect();
        let registered_new: Vec<&str> = new
            .iter()
            .map(|p| p.name.as_str())
            .filter(|n| names.contains(n))
            .collect();
        if registered_new.is_empty() {
            return Err(TaskError::permanent(format!(
                "none of the {} new photos could be registered: they do not overlap the base model",
                new.len()
            )));
        }
        if registered_new.len() < new.len() {
            ctx.emit(EventKind::Warning {
                message: format!(
                    "registered {} of {} new photos",
                    registered_new.len(),
                    new.len()
                ),
            })
            .await?;
        }
        let m = metrics::compute(&rec);
        ctx.metric("registered_new_images", registered_new.len() as f64, None)
            .await?;
        let result = json!({ "registered_new": registered_new, "new_photos": new.len(), "model": m, "wall_s": started.elapsed().as_secs_f64() });
        publish_model(ctx, "relocalize", &work, &result).await?;
        Ok(TaskOutput::result(result))
    }
}

struct Triangulate;

#[async_trait]
impl TaskHandler for Triangulate {
    fn needs(&self) -> &'static [tessera_engine::Need] {
        &[tessera_engine::Need::Colmap]
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let spec: TriangulateSpec = tessera_core::spec::parse(ctx.job().spec.clone())?;
        let Workspace { base, work, images } =
            workspace(ctx, &spec.base_job, "triangulate").await?;
        let started = Instant::now();
        let db = checkpoint::materialize(
            ctx.ports().objects.as_ref(),
            base.job,
            &base.matched,
            "database.db",
            &work,
        )
        .await?;
        let model = base_model(ctx, &base, &work.join("base")).await?;
        let before = model_bin::read(&model).map_err(TaskError::from_classified)?;
        let out = work.join("model");
        fresh_dir(&out)?;
        let backend = super::stages::backend_for(&base_spec(ctx, base.job).await?.backend)?;
        for inv in backend
            .triangulate(&db, &images, &model, &out)
            .map_err(TaskError::from_classified)?
        {
            run_backend(ctx, backend, &work, inv, Phase::Triangulate, None).await?;
        }
        let rec = model_bin::read(&out).map_err(TaskError::from_classified)?;
        if rec.points.is_empty() {
            return Err(TaskError::permanent("re-triangulation produced no points"));
        }
        let m = metrics::compute(&rec);
        ctx.metric("points", m.points as f64, None).await?;
        let result = json!({ "points_before": before.points.len(), "model": m, "wall_s": started.elapsed().as_secs_f64() });
        publish_model(ctx, "triangulate", &work, &result).await?;
        Ok(TaskOutput::result(result))
    }
}

struct RefinedExport;

#[async_trait]
impl TaskHandler for RefinedExport {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let from = ctx.task().payload["from"]
            .as_str()
            .unwrap_or("relocalize")
            .to_string();
        let exports: Vec<ExportFormat> =
            serde_json::from_value(ctx.job().spec["exports"].clone()).unwrap_or_default();
        let job = ctx.task().job_id;
        let cp = checkpoint::manifest(ctx.ports().objects.as_ref(), job, &from)
            .await?
            .ok_or_else(|| TaskError::transient(format!("the `{from}` checkpoint is missing")))?;
        let dir = ctx
            .scratch_dir()
            .map_err(io("scratch folder"))?
            .join("export");
        fresh_dir(&dir)?;
        for f in ["cameras.bin", "images.bin", "points3D.bin"] {
            checkpoint::materialize(
                ctx.ports().objects.as_ref(),
                job,
                &cp,
                &format!("model/{f}"),
                &dir.join("input"),
            )
            .await?;
        }
        let started = ctx.phase_started(Phase::Export).await?;
        let rec = model_bin::read(&dir.join("input/model")).map_err(TaskError::from_classified)?;
        // A refinement's survey formats are refused at validation: its model is written
        // in the frame it has.
        let own_frame =
            tessera_core::crs::EarthPlacement::new(tessera_core::crs::ModelFrame::Local, None)
                .map_err(|e| TaskError::permanent(e.to_string()))?;
        let mut files = write_exports(&rec, &dir, &exports, &own_frame)?;
        files.extend(super::model_zip::write(&dir, &files)?);
        ctx.phase_completed(Phase::Export, started).await?;
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let result = json!({ "files": files, "model": metrics::compute(&rec), "from": from });
        checkpoint::publish(
            ctx.ports().objects.as_ref(),
            job,
            "export",
            &dir,
            &refs,
            result.clone(),
        )
        .await?;
        Ok(TaskOutput::result(result))
    }
}

/// Register the refinement handlers.
pub fn register(r: &mut Registry) {
    r.register("sfm.relocalize", Relocalize);
    r.register("sfm.triangulate", Triangulate);
    r.register("sfm.refined_export", RefinedExport);
}

/// The base run's spec as the new photos' extraction uses it: their features at the size
/// this relocalisation asks for, and SIFT's start chosen for them by the recipe's rule
/// (a base seen at its own pixels at 2000 px does not make 1000 px photos so).
fn extraction_spec(
    mut base: tessera_core::spec::ReconstructionSpec,
    asked: &RelocalizeSpec,
    new_long_sides: &[u32],
) -> tessera_core::spec::ReconstructionSpec {
    base.max_features = asked.max_features;
    base.max_image_size = asked.max_image_size;
    base.sift_native_scale = base.backend.sift_native_scale()
        && super::resolution::native_scale(asked.max_image_size, new_long_sides);
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both refinements run the engine's processes: the estimate counts its Python, so
    /// the child's limit (twice the estimate) is not spent on the interpreter.
    #[test]
    fn refinements_are_sized_with_the_engines_python() {
        let python = memory::engine_overhead("pycolmap", super::super::Stage::Map);
        let bare = memory::estimate(super::super::Stage::Map, 50, 1.0, 1000, false);
        let p = plan(
            RELOCALIZE,
            "relocalize",
            json!({}),
            0,
            TenantId::local(),
            None,
            "x",
        );
        assert_eq!(p.tasks[0].memory_estimate, Some(bare + python));
    }

    #[test]
    fn new_photos_get_sifts_start_by_their_own_size() {
        let base: tessera_core::spec::ReconstructionSpec = serde_json::from_value(json!({
            "project": "01JA0000000000000000000000", "image_set": "datasets/x/images",
            "backend": {"name": "pycolmap"}, "camera_model": "SIMPLE_RADIAL",
            "max_features": 8192, "max_image_size": 2000, "pairs": {"strategy": "exhaustive"},
            "mapper": "incremental", "ba": "standard", "georef": {"mode": "none"},
            "exports": ["points-bin"], "sift_native_scale": true
        }))
        .unwrap();
        let asked = |size: u32| RelocalizeSpec {
            base_job: "01JA0000000000000000000001".into(),
            image_set: "uploads/new".into(),
            max_features: 4096,
            max_image_size: size,
            exports: vec![],
            priority: 0,
        };
        let small = extraction_spec(base.clone(), &asked(1000), &[4000, 4000]);
        assert!(!small.sift_native_scale, "1000 px is doubled");
        assert_eq!((small.max_image_size, small.max_features), (1000, 4096));
        let large = extraction_spec(base.clone(), &asked(3200), &[4000]);
        assert!(large.sift_native_scale);
        let mut on_cli = base;
        on_cli.backend.name = "colmap".into();
        on_cli.sift_native_scale = false;
        assert!(!extraction_spec(on_cli, &asked(3200), &[4000]).sift_native_scale);
    }
}
