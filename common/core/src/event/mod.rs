//! Progress events: typed, numbered per job without gaps, stored before they are visible.
//!
//! Stored as Tessera's own records ([`ProgressEvent`]); every way out (SSE, WebSocket,
//! `tessera --json events`) sends them as sfmapi's `ProgressEvent` v1 ([`sfmapi`]).

pub mod sfmapi;

use crate::clock::Millis;
use crate::ids::{JobId, TaskId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Declares [`Phase`] and [`Phase::ALL`] from one list, so no phase is missing from `ALL`.
macro_rules! phases {
    ($($variant:ident),* $(,)?) => {
        /// The phases a job reports, shared by every engine backend.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[allow(missing_docs)]
        pub enum Phase {
            $($variant,)*
        }

        impl Phase {
            /// Every phase, in declaration order.
            pub const ALL: &'static [Phase] = &[$(Phase::$variant,)*];
        }
    };
}

phases!(
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
);

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
        /// What the snapshot holds (absent from events stored before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<SnapshotSummary>,
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

impl EventKind {
    /// A measured figure, or nothing when it is not a finite number: JSON has no NaN or
    /// infinity, so such a value would be stored as `null`, which neither reads back as a
    /// number nor satisfies sfmapi's `value: float` (an engine's log can print `nan`).
    pub fn metric(name: &str, value: f64, unit: Option<&str>) -> Option<EventKind> {
        value.is_finite().then(|| EventKind::Metric {
            name: name.into(),
            value,
            unit: unit.map(Into::into),
        })
    }
}

/// What a sealed snapshot of a sparse model holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    /// Photos registered in it.
    pub registered_images: u64,
    /// 3D points.
    pub points: u64,
    /// Cameras.
    pub cameras: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_that_is_not_a_finite_number_is_not_an_event() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(EventKind::metric("alignment_error", bad, None), None);
        }
        let e = EventKind::metric("alignment_error", 0.25, Some("m")).unwrap();
        let stored = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<EventKind>(&stored).unwrap(), e);
    }
}
