//! Progress events: typed, numbered per job without gaps, stored before they are visible.

use crate::clock::Millis;
use crate::ids::{JobId, TaskId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The phases a job reports, shared by every engine backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Phase {
    Ingest,
    FeatureExtraction,
    Matching,
    GeometricVerification,
    IncrementalInit,
    IncrementalRegister,
    IncrementalBa,
    GlobalRotationAvg,
    GlobalPositioning,
    GlobalBa,
    HierarchicalCluster,
    HierarchicalMerge,
    BundleAdjust,
    Triangulate,
    Relocalize,
    PoseGraphOptimize,
    Georeference,
    Export,
    FaceDetection,
    Blur,
    Publish,
    Checksum,
    Summarize,
    BackendAction,
}

impl Phase {
    /// The wire name (`feature_extraction`, …).
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// What happened. Serialized with a `type` tag so clients can switch on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A phase began.
    PhaseStarted {
        /// Which phase.
        phase: Phase,
    },
    /// A phase advanced.
    PhaseProgress {
        /// Which phase.
        phase: Phase,
        /// Units done so far.
        current: u64,
        /// Units in all, when known.
        total: Option<u64>,
        /// Units per second, when known.
        rate: Option<f64>,
    },
    /// A phase ended.
    PhaseCompleted {
        /// Which phase.
        phase: Phase,
        /// How long it took.
        elapsed_ms: u64,
    },
    /// A measured figure.
    Metric {
        /// Name (`registered_images`, `peak_rss_bytes`, …).
        name: String,
        /// Value.
        value: f64,
        /// Unit, when it has one.
        unit: Option<String>,
    },
    /// A sealed snapshot can be read.
    SnapshotAvailable {
        /// Where it is stored.
        key: String,
        /// Its sequence within the job.
        snapshot: u64,
    },
    /// A line of log output worth keeping.
    LogLine {
        /// The line.
        line: String,
    },
    /// Something went wrong but the job goes on (a retry, a skipped input).
    Warning {
        /// What happened and what is done about it.
        message: String,
    },
    /// Something failed.
    Error {
        /// The error class.
        class: crate::error::ErrorClass,
        /// What failed and what to do.
        message: String,
    },
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    /// The job.
    pub job_id: JobId,
    /// Unique and gap-free per job, from 1.
    pub seq: u64,
    /// The task that emitted it, if any.
    pub task_id: Option<TaskId>,
    /// When it was stored.
    pub at: Millis,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}
