//! The reconstruction job: photos in the object store become a bundle-adjusted,
//! optionally georeferenced sparse model and its exports.
//!
//! ```text
//! ingest → extract → match → verify → map → bundle_adjust → [georeference] → export
//! ```
//!
//! A split run (`spec.split`) maps its photos in overlapping clusters, each a task of its
//! own that runs beside the others, and its `map` task merges them ([`split`]):
//!
//! ```text
//! verify → map_cluster_0 … map_cluster_{k-1} → map (merge) → bundle_adjust → …
//! ```
//!
//! Each stage is an engine task; each writes a checkpoint (files, then a manifest
//! last) under `recon/<job>/<stage>/` in the object store, and the next stage starts
//! from that checkpoint, verified by checksum. Mapping seals snapshots as it grows and a
//! restarted mapping continues from the latest one.

pub mod cache;
pub mod checkpoint;
pub mod control;
pub mod flight_strips;
pub mod focal_prior;
pub mod geo;
pub mod georef_choice;
pub mod image_set;
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
pub mod split;
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
    /// One cluster of a split run (its tasks are `map_cluster_<i>`).
    MapCluster,
    Map,
    BundleAdjust,
    Georeference,
    Export,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 9] = [
        Stage::Ingest,
        Stage::Extract,
        Stage::Match,
        Stage::Verify,
        Stage::MapCluster,
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
            Stage::MapCluster => "map_cluster",
            Stage::Map => "map",
            Stage::BundleAdjust => "bundle_adjust",
            Stage::Georeference => "georeference",
            Stage::Export => "export",
        }
    }

    /// The stage a task of a reconstruction runs, by the task's name: the stage's own
    /// name, or `map_cluster_<i>` for one cluster of a split run.
    pub fn of_task(name: &str) -> Option<Stage> {
        if let Some(i) = name.strip_prefix("map_cluster_")
            && !i.is_empty()
            && i.bytes().all(|b| b.is_ascii_digit())
        {
            return Some(Stage::MapCluster);
        }
        Stage::ALL
            .into_iter()
            .find(|s| *s != Stage::MapCluster && s.name() == name)
    }

    /// The task (and checkpoint) name of cluster `i` of a split run.
    pub fn cluster_task(i: usize) -> String {
        format!("map_cluster_{i}")
    }

    /// Task kind.
    pub fn kind(self) -> String {
        format!("sfm.{}", self.name())
    }

    /// The stages a spec runs, in order (a split run's clusters are planned by [`plan`]
    /// between verify and map; they are never cached on their own).
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
/// the memory model for `images` photos of `megapixels` each. A split run gets one task
/// per cluster between verify and map, each sized for its cluster; the number of
/// clusters is fixed here, from `images`, and each task finds its own photos at run time.
pub fn plan(
    spec: &ReconstructionSpec,
    tenant: TenantId,
    project: Option<ProjectId>,
    label: &str,
    images: usize,
    megapixels: f64,
) -> Result<JobPlan, SpecError> {
    spec.validate()?;
    if let Some(split) = spec.split {
        split.check_count(images)?;
    }
    let stages = Stage::planned(spec);
    // Clusters as tasks for the incremental mapper; the hierarchical mapper makes its
    // own inside its one task.
    let clusters = spec
        .split
        .filter(|_| spec.mapper == tessera_core::spec::MapperKind::Incremental)
        .map_or(1, |s| s.clusters_for(images));
    let sized = |mut t: TaskPlan, stage: Stage, photos: usize| {
        let estimate = memory::estimate(
            stage,
            photos,
            megapixels,
            spec.max_image_size,
            spec.sift_native_scale,
        ) + memory::engine_overhead(&spec.backend.name, stage);
        t.memory_estimate = Some(estimate);
        t.resource_class = memory::class_for_stage(
            estimate,
            memory::cpu_seconds(stage, spec, photos, megapixels),
        );
        t
    };
    let mut tasks = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        let mut payload = serde_json::json!({ "stage": stage });
        let mut after = Vec::new();
        if i > 0 {
            after.push(stages[i - 1].name().to_string());
        }
        if *stage == Stage::Map && clusters > 1 {
            let split = spec.split.expect("clusters come from a split");
            let photos = (split.cluster_size + split.overlap) as usize;
            for c in 0..clusters {
                let t = TaskPlan::new(
                    Stage::cluster_task(c),
                    Stage::MapCluster.kind(),
                    serde_json::json!({ "stage": Stage::MapCluster, "cluster": c, "clusters": clusters }),
                )
                .after(after.clone());
                tasks.push(sized(t, Stage::Map, photos.min(images)));
            }
            after = (0..clusters).map(Stage::cluster_task).collect();
            payload["clusters"] = serde_json::json!(clusters);
        }
        let t = TaskPlan::new(stage.name(), stage.kind(), payload).after(after);
        tasks.push(sized(t, *stage, images));
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

/// Position of a task's stage in the pipeline (unknown names last).
fn stage_index(name: &str) -> usize {
    Stage::of_task(name)
        .and_then(|stage| Stage::ALL.iter().position(|s| *s == stage))
        .unwrap_or(usize::MAX)
}

/// Register the stage handlers.
pub fn register(r: &mut Registry) {
    for stage in [
        Stage::Ingest,
        Stage::Extract,
        Stage::Match,
        Stage::Verify,
        Stage::MapCluster,
        Stage::Map,
        Stage::BundleAdjust,
        Stage::Georeference,
        Stage::Export,
    ] {
        r.register(&stage.kind(), stages::StageHandler::new(stage));
    }
    refine::register(r);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::spec::SplitSpec;

    fn survey_spec(split: Option<SplitSpec>) -> ReconstructionSpec {
        let mut spec: ReconstructionSpec = serde_json::from_value(serde_json::json!({
            "project": "01JA0000000000000000000000", "image_set": "images/survey",
            "backend": {"name": "pycolmap", "version": null}, "camera_model": "SIMPLE_RADIAL",
            "max_features": 8192, "max_image_size": 3200,
            "pairs": {"strategy": "spatial", "max_neighbors": 20, "max_distance_m": 1000.0},
            "mapper": "incremental", "ba": "standard",
            "georef": {"mode": "gps", "target_epsg": null}, "exports": ["points-bin"],
        }))
        .unwrap();
        spec.split = split;
        spec
    }

    #[test]
    fn a_split_survey_plans_one_task_per_cluster_between_verify_and_map() {
        let split = SplitSpec {
            cluster_size: 150,
            overlap: 50,
        };
        let split_plan = plan(
            &survey_spec(Some(split)),
            TenantId::local(),
            None,
            "survey",
            2000,
            24.0,
        )
        .unwrap();
        let clusters: Vec<&TaskPlan> = split_plan
            .tasks
            .iter()
            .filter(|t| t.kind == Stage::MapCluster.kind())
            .collect();
        assert_eq!(clusters.len(), 14, "2,000 photos in clusters of 150");
        for (i, t) in clusters.iter().enumerate() {
            assert_eq!(t.name, Stage::cluster_task(i));
            assert_eq!(Stage::of_task(&t.name), Some(Stage::MapCluster));
            assert_eq!(t.after, ["verify"]);
            assert_eq!(t.payload["cluster"], i);
            assert_eq!(t.payload["clusters"], 14);
        }
        let map = split_plan.tasks.iter().find(|t| t.name == "map").unwrap();
        assert_eq!(map.after.len(), 14, "the merge waits for every cluster");
        assert_eq!(map.payload["clusters"], 14);
        let bundle = split_plan
            .tasks
            .iter()
            .find(|t| t.name == "bundle_adjust")
            .unwrap();
        assert_eq!(bundle.after, ["map"]);
        // A cluster is sized for its 200 photos, not the survey's 2,000: a container
        // class of its own, smaller than one mapper run over everything would need.
        let whole = plan(
            &survey_spec(None),
            TenantId::local(),
            None,
            "survey",
            2000,
            24.0,
        )
        .unwrap();
        let whole_map = whole.tasks.iter().find(|t| t.name == "map").unwrap();
        assert!(clusters[0].memory_estimate < whole_map.memory_estimate);
        assert!(
            clusters[0].resource_class.is_heavy(),
            "{:?}",
            clusters[0].resource_class
        );
        assert!(
            !whole
                .tasks
                .iter()
                .any(|t| t.kind == Stage::MapCluster.kind())
        );
        // Clusters of five over 2,000 photos would be 400 tasks: refused, naming why.
        let tiny = SplitSpec {
            cluster_size: 5,
            overlap: 3,
        };
        let refused = plan(
            &survey_spec(Some(tiny)),
            TenantId::local(),
            None,
            "survey",
            2000,
            24.0,
        )
        .unwrap_err();
        assert_eq!(refused.errors[0].field, "split.cluster_size");
        assert!(
            refused.errors[0].message.contains("at least 8"),
            "{refused}"
        );
        // Photos that fit one cluster are mapped in one run.
        let small = plan(
            &survey_spec(Some(split)),
            TenantId::local(),
            None,
            "survey",
            150,
            24.0,
        )
        .unwrap();
        assert!(
            !small
                .tasks
                .iter()
                .any(|t| t.kind == Stage::MapCluster.kind())
        );
    }
}
