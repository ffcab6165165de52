//! Which queue, and so which Lambda function, each task kind goes to on AWS. The SAM
//! template (`infra/template.yaml`) declares one queue per name here; a test checks
//! the two agree.

use std::collections::BTreeMap;
use tessera_engine::QueueRoutes;
use tessera_jobs::photos::kinds;

/// S3 object-created notifications for `uploads/` (consumed by the ingest function).
pub const UPLOADS: &str = "uploads";
/// Ingest tasks, photo cleanups and re-blur sweeps (no ONNX Runtime needed).
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
