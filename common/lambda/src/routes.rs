//! Which queue, and so which Lambda function, each task kind goes to on AWS. The SAM
//! template (`infra/template.yaml`) declares one queue per name here; a test checks
//! the two agree.

use std::collections::BTreeMap;
use tessera_core::task::ResourceClass;
use tessera_engine::{Need, QueueRoutes, Registry};
use tessera_jobs::photos::kinds;

/// S3 object-created notifications for `uploads/` (consumed by the ingest function).
pub const UPLOADS: &str = "uploads";
/// Ingest tasks, photo cleanups, re-blur sweeps and webhook deliveries (no ONNX
/// Runtime needed; a function outside any VPC, so it reaches receivers on the internet).
pub const INGEST: &str = "ingest";
/// Publish-without-detection tasks (they detect after all when someone opted out
/// meanwhile, so the function has the face models).
pub const THUMBNAIL_DIMS: &str = "thumbnail-dims";
/// Detect, match, blur, publish.
pub const FACE_PROCESS: &str = "face-process";
/// Re-blur after subjects or regions changed.
pub const REPROCESS: &str = "reprocess";
/// Light reconstruction stages (and any kind without a route of its own).
pub const STAGE_RUNNER: &str = "stage-runner";
/// Heavy tasks (handed to Batch) and Batch job state changes.
pub const ORCHESTRATOR: &str = "orchestrator";

/// Every queue the functions consume; each has a dead-letter queue `<name>-dlq`.
pub const ALL: [&str; 7] = [
    UPLOADS,
    INGEST,
    THUMBNAIL_DIMS,
    FACE_PROCESS,
    REPROCESS,
    STAGE_RUNNER,
    ORCHESTRATOR,
];

/// The routes of the AWS deployment.
pub fn routes() -> QueueRoutes {
    QueueRoutes {
        by_kind: BTreeMap::from(
            [
                (kinds::INGEST, INGEST),
                (kinds::CLEANUP, INGEST),
                (kinds::REBLUR, INGEST),
                (tessera_core::notify::DELIVERY_TASK, INGEST),
                (tessera_core::notify::PUBLISH_TASK, INGEST),
                (kinds::THUMBNAIL_DIMS, THUMBNAIL_DIMS),
                (kinds::FACE_PROCESS, FACE_PROCESS),
                (kinds::REPROCESS, REPROCESS),
            ]
            .map(|(k, q)| (k.to_string(), q.to_string())),
        ),
        heavy: Some(ORCHESTRATOR.into()),
        fallback: Some(STAGE_RUNNER.into()),
    }
}

/// Where a task kind lands on AWS in each resource class, and what it needs there.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Placement {
    /// The task kind.
    pub kind: String,
    /// What the function (or Batch job) that runs it must provide.
    pub needs: &'static [Need],
    /// Resource class → queue.
    pub queues: BTreeMap<ResourceClass, String>,
}

/// Every kind of `registry` in every resource class, routed as the deployment routes it:
/// what the deploy rehearsal checks against each function's package.
pub fn placements(registry: &Registry) -> Vec<Placement> {
    let routes = routes();
    registry
        .kinds()
        .into_iter()
        .map(|kind| Placement {
            needs: registry.needs(&kind),
            queues: [
                ResourceClass::Small,
                ResourceClass::Medium,
                ResourceClass::Large,
                ResourceClass::Xlarge,
            ]
            .into_iter()
            .map(|class| {
                (
                    class,
                    routes
                        .queue_for_kind(&kind, class, STAGE_RUNNER)
                        .to_string(),
                )
            })
            .collect(),
            kind,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reconstruction stages need COLMAP and photo processing needs the face runtime;
    /// a kind that forgets to say so would be routed anywhere.
    #[test]
    fn engine_and_face_kinds_say_what_they_need() {
        let placements = placements(&tessera_jobs::registry());
        let needs = |k: &str| {
            placements
                .iter()
                .find(|p| p.kind == k)
                .unwrap_or_else(|| panic!("no kind {k}"))
                .needs
        };
        for k in [
            "sfm.extract",
            "sfm.map_cluster",
            "sfm.map",
            "sfm.bundle_adjust",
            "sfm.export",
        ] {
            assert_eq!(needs(k), &[Need::Colmap], "{k}");
        }
        for k in [kinds::FACE_PROCESS, kinds::REPROCESS, kinds::THUMBNAIL_DIMS] {
            assert_eq!(needs(k), &[Need::FaceRuntime], "{k}");
        }
        assert!(needs(kinds::INGEST).is_empty());
        let deliver = placements
            .iter()
            .find(|p| p.kind == tessera_core::notify::DELIVERY_TASK)
            .unwrap();
        assert!(deliver.needs.is_empty());
        assert_eq!(deliver.queues[&ResourceClass::Small], INGEST);
        let publish = placements
            .iter()
            .find(|p| p.kind == tessera_core::notify::PUBLISH_TASK)
            .unwrap();
        assert_eq!(publish.queues[&ResourceClass::Small], INGEST);
        let extract = placements.iter().find(|p| p.kind == "sfm.extract").unwrap();
        assert_eq!(extract.queues[&ResourceClass::Small], STAGE_RUNNER);
        assert_eq!(extract.queues[&ResourceClass::Large], ORCHESTRATOR);
    }
}
