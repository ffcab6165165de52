//! Every kind and phase Tessera can emit, as it goes out, against sfmapi's `ProgressEvent`
//! v1 (the vendored schema); and the check itself refuses the shapes the spec refuses.

use serde_json::{Value, json};
use tessera_conformance::sfmapi_event::{EXTENSION_PREFIX, phases, violations};
use tessera_core::ErrorClass;
use tessera_core::event::{EventKind, Phase, ProgressEvent, SnapshotSummary, sfmapi};
use tessera_core::ids::{JobId, TaskId};

fn stored(seq: u64, kind: EventKind) -> ProgressEvent {
    ProgressEvent {
        job_id: JobId::new(),
        seq,
        task_id: seq.is_multiple_of(2).then(TaskId::new),
        at: tessera_core::Millis(1_764_000_000_123),
        kind,
    }
}

/// One of each kind, with every phase for the three phase kinds, and a metric of each
/// finite extreme.
fn every_kind_and_phase() -> Vec<EventKind> {
    let mut all = Vec::new();
    for &phase in Phase::ALL {
        all.push(EventKind::PhaseStarted { phase });
        all.push(EventKind::PhaseProgress {
            phase,
            current: 3,
            total: Some(9),
            rate: Some(1.5),
        });
        all.push(EventKind::PhaseProgress {
            phase,
            current: 0,
            total: None,
            rate: None,
        });
        all.push(EventKind::PhaseCompleted {
            phase,
            elapsed_ms: 1200,
        });
    }
    all.extend([
        EventKind::Metric {
            name: "registered_images".into(),
            value: 47.0,
            unit: None,
        },
        EventKind::Metric {
            name: "map.peak_rss_bytes".into(),
            value: 1.5e9,
            unit: Some("bytes".into()),
        },
        EventKind::metric("largest", f64::MAX, None).unwrap(),
        EventKind::metric("smallest", -f64::MAX, None).unwrap(),
        EventKind::SnapshotAvailable {
            key: "jobs/x/map/snapshots/3".into(),
            snapshot: 3,
            summary: Some(SnapshotSummary {
                registered_images: 12,
                points: 3400,
                cameras: 1,
            }),
        },
        // As stored before summaries were recorded.
        EventKind::SnapshotAvailable {
            key: "jobs/x/map/snapshots/1".into(),
            snapshot: 1,
            summary: None,
        },
        EventKind::LogLine {
            line: "features: 800 px, 2048 per image".into(),
        },
        EventKind::Warning {
            message: "photo 3 skipped".into(),
        },
    ]);
    for class in [
        ErrorClass::Transient,
        ErrorClass::Resource,
        ErrorClass::Permanent,
        ErrorClass::Poison,
        ErrorClass::Cancelled,
    ] {
        all.push(EventKind::Error {
            class,
            message: "the stage failed".into(),
        });
    }
    all
}

#[test]
fn every_event_tessera_can_emit_validates_against_sfmapi_v1() {
    let spec_phases = phases();
    for (i, kind) in every_kind_and_phase().into_iter().enumerate() {
        let e = stored(i as u64 + 1, kind.clone());
        let wire = sfmapi::event(&e);
        let wrong = violations(&wire);
        assert!(wrong.is_empty(), "{kind:?} goes out as {wire}: {wrong:?}");
        // Read back through a JSON round trip, as a client gets it.
        let read: Value = serde_json::from_str(&wire.to_string()).unwrap();
        assert_eq!(read["seq"], i as u64 + 1);
        let kind_name = wire["kind"].as_str().unwrap();
        match &kind {
            EventKind::PhaseStarted { phase }
            | EventKind::PhaseProgress { phase, .. }
            | EventKind::PhaseCompleted { phase, .. } => {
                // A phase the spec lists goes out under the spec's kind; any other under
                // an extension kind, never as an unknown value of the closed field.
                assert_eq!(
                    !kind_name.starts_with(EXTENSION_PREFIX),
                    spec_phases.contains(&phase.as_str()),
                    "{phase}: {wire}"
                );
                assert_eq!(
                    sfmapi::in_spec(*phase),
                    spec_phases.contains(&phase.as_str())
                );
            }
            _ => assert!(!kind_name.starts_with(EXTENSION_PREFIX), "{wire}"),
        }
        // Tessera's own fields stay for its console and CLI.
        assert!(wire["type"].is_string() && wire["at"].is_u64(), "{wire}");
    }
}

#[test]
fn the_snapshot_summary_says_what_the_snapshot_holds() {
    let e = stored(
        4,
        EventKind::SnapshotAvailable {
            key: "k".into(),
            snapshot: 7,
            summary: Some(SnapshotSummary {
                registered_images: 12,
                points: 3400,
                cameras: 2,
            }),
        },
    );
    let wire = sfmapi::event(&e);
    assert_eq!(wire["snapshot_seq"], 7);
    assert_eq!(
        wire["summary"],
        json!({ "key": "k", "registered_images": 12, "points": 3400, "cameras": 2 })
    );
    // A stored event from before the summary was recorded still reads.
    let old: ProgressEvent = serde_json::from_value(json!({
        "job_id": JobId::new(), "seq": 1, "task_id": null, "at": 1,
        "type": "snapshot_available", "key": "k", "snapshot": 2,
    }))
    .unwrap();
    assert!(violations(&sfmapi::event(&old)).is_empty());
}

/// The shapes Tessera sent before it followed the spec: each is refused, naming the
/// field, so the check above is one that can fail.
#[test]
fn the_check_refuses_what_the_spec_refuses() {
    let envelope = |kind: &str, fields: Value| {
        let mut v = json!({
            "schema_version": 1, "ts": "2026-12-04T10:00:00.123Z",
            "job_id": "01JA0000000000000000000000", "task_id": null, "seq": 5, "kind": kind,
        });
        for (k, f) in fields.as_object().unwrap() {
            v[k] = f.clone();
        }
        v
    };
    let refused = [
        (
            envelope("metric", json!({ "name": "n", "value": 1.0 })),
            "`key`",
        ),
        (
            envelope("snapshot_available", json!({ "key": "k", "snapshot": 2 })),
            "`snapshot_seq`",
        ),
        (envelope("log_line", json!({ "line": "x" })), "`level`"),
        (
            envelope("log_line", json!({ "level": "info", "message": "x" })),
            "`level`",
        ),
        (
            envelope("error", json!({ "class": "permanent", "message": "x" })),
            "`error_class`",
        ),
        (
            envelope("phase_started", json!({ "phase": "ingest" })),
            "`phase`",
        ),
        (
            envelope(
                "phase_progress",
                json!({ "phase": "matching", "current": "3" }),
            ),
            "`current`",
        ),
        (envelope("stage_moved", json!({})), "stage_moved"),
        (
            {
                let mut v = envelope("warning", json!({ "message": "m" }));
                v["ts"] = "yesterday".into();
                v
            },
            "`ts`",
        ),
        (
            {
                let mut v = envelope("x-tessera.phase_started", json!({ "phase": "ingest" }));
                v.as_object_mut().unwrap().remove("seq");
                v
            },
            "`seq`",
        ),
        (
            {
                let mut v = envelope("warning", json!({ "message": "m" }));
                v["schema_version"] = 2.into();
                v
            },
            "schema_version",
        ),
    ];
    for (event, names) in refused {
        let wrong = violations(&event);
        assert!(
            wrong.iter().any(|w| w.contains(names)),
            "{event} should be refused for {names}: {wrong:?}"
        );
    }
    assert!(
        violations(&envelope(
            "x-tessera.phase_started",
            json!({ "phase": "ingest" })
        ))
        .is_empty()
    );
}
