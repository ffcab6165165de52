//! The reconstruction job: photos in the object store become a bundle-adjusted,
//! optionally georeferenced sparse model and its exports.
//!
//! ```text
//! ingest → extract → match → verify → map → bundle_adjust → [georeference] → export
//! ```
//!
//! Each stage is an engine task; each writes a checkpoint (files, then a manifest
//! last) under `recon/<job>/<stage>/` in the object store, and the next stage starts
//! from that checkpoint, verified by checksum. Mapping seals snapshots as it grows and a
//! restarted mapping continues from the latest one.

pub mod cache;
pub mod checkpoint;
pub mod control;
pub mod geo;
pub mod georef_choice;
pub mod images;
mod label;
pub mod memory;
mod model_zip;
mod models;
pub mod operations;
pub mod pairing;
pub mod recipe;
pub mod refine;
pub mod resolution;
pub mod spec_dag;
pub mod stages;

pub use label::default_label;

use serde::{Deserialize, Serialize};
use tessera_core::spec::{Georef, ReconstructionSpec, SpecError};
use tessera_core::task::TaskState;
use tessera_core::{ProjectId, TenantId};
use tessera_engine::{Engine, EngineError, JobPlan, Registry, TaskPlan};

/// The job kind.
pub const KIND: &str = "reconstruct";

/// Add a line about a choice made at submission to the job's events (the pairs, the
/// feature resolution). Best effort: a store error costs the line, never the job.
pub async fn announce(engine: &Engine, job: tessera_core::JobId, line: String) {
    if let Err(e) = engine
        .ports()
        .events
        .append(
            job,
            None,
            tessera_core::event::EventKind::LogLine { line },
            None,
        )
        .await
    {
        tracing::warn!(job_id = %job, error = %e, "a choice made at submission could not be added to the job's events");
    }
}

/// The stages in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Stage {
    Ingest,
    Extract,
    Match,
    Verify,
    Map,
    BundleAdjust,
    Georeference,
    Export,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 8] = [
        Stage::Ingest,
        Stage::Extract,
        Stage::Match,
        Stage::Verify,
        Stage::Map,
        Stage::BundleAdjust,
        Stage::Georeference,
        Stage::Export,
    ];

    /// Task name and checkpoint folder.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Ingest => "ingest",
            Stage::Extract => "extract",
            Stage::Match => "match",
            Stage::Verify => "verify",
            Stage::Map => "map",
            Stage::BundleAdjust => "bundle_adjust",
            Stage::Georeference => "georeference",
            Stage::Export => "export",
        }
    }

    /// Task kind.
    pub fn kind(self) -> String {
        format!("sfm.{}", self.name())
    }

    /// The stages a spec runs, in order.
    pub fn planned(spec: &ReconstructionSpec) -> Vec<Stage> {
        let mut s = vec![
            Stage::Ingest,
            Stage::Extract,
            Stage::Match,
            Stage::Verify,
            Stage::Map,
            Stage::BundleAdjust,
        ];
        if spec.georef != Georef::None {
            s.push(Stage::Georeference);
        }
        s.push(Stage::Export);
        s
    }
}

/// Plan a reconstruction: one task per stage, each after the previous one, sized by
/// the memory model for `images` photos of `megapixels` each.
pub fn plan(
    spec: &ReconstructionSpec,
    tenant: TenantId,
    project: Option<ProjectId>,
    label: &str,
    images: usize,
    megapixels: f64,
) -> Result<JobPlan, SpecError> {
    spec.validate()?;
    let stages = Stage::planned(spec);
    let mut tasks = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        let mut t = TaskPlan::new(
            stage.name(),
            stage.kind(),
            serde_json::json!({ "stage": stage }),
        );
        if i > 0 {
            t = t.after([stages[i - 1].name()]);
        }
        let estimate = memory::estimate(*stage, images, megapixels, spec.max_image_size)
            + memory::engine_overhead(&spec.backend.name, *stage);
        t.memory_estimate = Some(estimate);
        t.resource_class = memory::class_for_stage(
            estimate,
            memory::cpu_seconds(*stage, spec, images, megapixels),
        );
        tasks.push(t);
    }
    Ok(JobPlan {
        tenant,
        project,
        kind: KIND.into(),
        label: label.into(),
        spec: serde_json::to_value(spec).expect("serializable"),
        priority: spec.priority,
        tasks,
    })
}

/// Before resuming a job: succeeded stages whose checkpoint is missing or damaged, and
/// every stage after them, must run again. Returns the names put back in line.
pub async fn requeue_damaged(
    engine: &Engine,
    job: tessera_core::JobId,
) -> Result<Vec<String>, EngineError> {
    let tasks = engine.job_tasks(job).await?;
    let mut order: Vec<_> = tasks
        .iter()
        .filter(|t| t.kind.starts_with("sfm."))
        .collect();
    order.sort_by_key(|t| stage_index(&t.name));
    let mut rerun = Vec::new();
    let mut damaged = false;
    for t in order {
        if !damaged && t.state == TaskState::Succeeded {
            let objects = engine.ports().objects.as_ref();
            let ok = match checkpoint::manifest(objects, job, &t.name).await {
                Ok(Some(cp)) => checkpoint::validates(objects, job, &cp)
                    .await
                    .unwrap_or(false),
                _ => false,
            };
            damaged = !ok;
        }
        if damaged && t.state.is_terminal() {
            rerun.push(t.id);
        }
    }
    let names: Vec<String> = tasks
        .iter()
        .filter(|t| rerun.contains(&t.id))
        .map(|t| t.name.clone())
        .collect();
    if !rerun.is_empty() {
        engine.rerun(job, &rerun).await?;
    }
    Ok(names)
}

/// Position of a stage in the pipeline (unknown names last).
fn stage_index(name: &str) -> usize {
    Stage::ALL
        .iter()
        .position(|s| s.name() == name)
        .unwrap_or(usize::MAX)
}

/// Register the stage handlers.
pub fn register(r: &mut Registry) {
    for stage in [
        Stage::Ingest,
        Stage::Extract,
        Stage::Match,
        Stage::Verify,
        Stage::Map,
        Stage::BundleAdjust,
        Stage::Georeference,
        Stage::Export,
    ] {
        r.register(&stage.kind(), stages::StageHandler::new(stage));
    }
    refine::register(r);
}
