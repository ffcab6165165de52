//! Events on the wire, as sfmapi's `ProgressEvent` v1.
//!
//! sfmapi's union is closed in two ways: eight `kind`s, each with its required fields, and
//! a closed list of phases. An SDK must surface an unknown `kind` through a catch-all, but
//! it refuses a known kind with an unknown phase or a missing field. So:
//!
//! - an event of a kind the spec has carries that kind's fields (`key` for a metric,
//!   `snapshot_seq` and `summary` for a snapshot, `level` and `message` for a log line,
//!   `error_class` and `message` for an error);
//! - a phase the spec's list lacks (Tessera's ingest, georeferencing, the photo pipeline's
//!   phases) goes out under an extension kind, [`EXTENSION_PREFIX`] + the kind
//!   (`x-tessera.phase_started`), never as an unknown value of the closed `phase` field.
//!
//! Tessera's own fields (`type`, `at`, `name`, `line`, `elapsed_ms`, …) stay beside them:
//! the spec's models ignore fields they do not declare, and Tessera's console and CLI read
//! them. Invariant: `kind` is either one of the spec's eight with every field it requires,
//! or starts with [`EXTENSION_PREFIX`].

use super::{EventKind, Phase, ProgressEvent};
use serde_json::{Value, json};

/// The version of sfmapi's event schema these follow.
pub const SCHEMA_VERSION: u64 = 1;

/// The start of every kind sfmapi v1 does not have.
pub const EXTENSION_PREFIX: &str = "x-tessera.";

/// The level a log line goes out with: Tessera's log lines are an engine's progress output
/// and its own notes on what it chose, never warnings (those are `warning` events).
const LOG_LEVEL: &str = "INFO";

/// Whether sfmapi v1's closed phase list names this phase. Exhaustive on purpose: a new
/// phase does not compile until someone decides which side it is on.
pub fn in_spec(phase: Phase) -> bool {
    match phase {
        Phase::FeatureExtraction
        | Phase::Matching
        | Phase::GeometricVerification
        | Phase::IncrementalInit
        | Phase::IncrementalRegister
        | Phase::IncrementalBa
        | Phase::GlobalRotationAvg
        | Phase::GlobalPositioning
        | Phase::GlobalBa
        | Phase::HierarchicalCluster
        | Phase::HierarchicalMerge
        | Phase::BundleAdjust
        | Phase::Triangulate
        | Phase::Relocalize
        | Phase::PoseGraphOptimize
        | Phase::Export => true,
        Phase::Ingest
        | Phase::Georeference
        | Phase::FaceDetection
        | Phase::Blur
        | Phase::Publish
        | Phase::Checksum
        | Phase::Summarize
        | Phase::BackendAction => false,
    }
}

/// The `kind` an event goes out under.
pub fn kind(e: &EventKind) -> String {
    let own = match e {
        EventKind::PhaseStarted { .. } => "phase_started",
        EventKind::PhaseProgress { .. } => "phase_progress",
        EventKind::PhaseCompleted { .. } => "phase_completed",
        EventKind::Metric { .. } => "metric",
        EventKind::SnapshotAvailable { .. } => "snapshot_available",
        EventKind::LogLine { .. } => "log_line",
        EventKind::Warning { .. } => "warning",
        EventKind::Error { .. } => "error",
    };
    match e {
        EventKind::PhaseStarted { phase }
        | EventKind::PhaseProgress { phase, .. }
        | EventKind::PhaseCompleted { phase, .. }
            if !in_spec(*phase) =>
        {
            format!("{EXTENSION_PREFIX}{own}")
        }
        _ => own.to_string(),
    }
}

/// A stored event as it goes out: sfmapi v1's envelope (`schema_version`, `ts`, `job_id`,
/// `task_id`, `seq`, `kind`) and the kind's fields, with Tessera's own fields kept.
pub fn event(e: &ProgressEvent) -> Value {
    let mut v = serde_json::to_value(e).expect("events serialize");
    match &e.kind {
        EventKind::Metric { name, .. } => v["key"] = name.as_str().into(),
        EventKind::SnapshotAvailable {
            key,
            snapshot,
            summary,
        } => {
            v["snapshot_seq"] = (*snapshot).into();
            let mut s = json!({ "key": key });
            if let Some(summary) = summary {
                s["registered_images"] = summary.registered_images.into();
                s["points"] = summary.points.into();
                s["cameras"] = summary.cameras.into();
            }
            v["summary"] = s;
        }
        EventKind::LogLine { line } => {
            v["level"] = LOG_LEVEL.into();
            v["message"] = line.as_str().into();
        }
        EventKind::Error { class, .. } => v["error_class"] = class.to_string().into(),
        EventKind::PhaseStarted { .. }
        | EventKind::PhaseProgress { .. }
        | EventKind::PhaseCompleted { .. }
        | EventKind::Warning { .. } => {}
    }
    v["kind"] = kind(&e.kind).into();
    v["schema_version"] = SCHEMA_VERSION.into();
    v["ts"] = e.at.to_rfc3339().into();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_is_listed_once() {
        let names: std::collections::BTreeSet<String> =
            Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names.len(), Phase::ALL.len());
        assert!(names.iter().all(|n| !n.is_empty()), "{names:?}");
    }

    #[test]
    fn a_phase_outside_the_spec_goes_out_under_an_extension_kind() {
        assert_eq!(
            kind(&EventKind::PhaseStarted {
                phase: Phase::Ingest
            }),
            "x-tessera.phase_started"
        );
        assert_eq!(
            kind(&EventKind::PhaseCompleted {
                phase: Phase::Matching,
                elapsed_ms: 1
            }),
            "phase_completed"
        );
    }
}
