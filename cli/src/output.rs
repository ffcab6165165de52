//! Printing for people or for scripts.

use serde::Serialize;
use tessera_core::event::{EventKind, ProgressEvent};

/// Print `value` as one JSON line, or `human` as text.
pub fn emit<T: Serialize>(json: bool, value: &T, human: impl FnOnce() -> String) {
    if json {
        println!("{}", serde_json::to_string(value).expect("serializable"));
    } else {
        println!("{}", human());
    }
}

/// One line per event for people.
pub fn event_line(e: &ProgressEvent) -> String {
    let what = match &e.kind {
        EventKind::PhaseStarted { phase } => format!("{phase} started"),
        EventKind::PhaseProgress {
            phase,
            current,
            total,
            rate,
        } => {
            let total = total.map_or(String::new(), |t| format!("/{t}"));
            let rate = rate.map_or(String::new(), |r| format!(" ({r:.1}/s)"));
            format!("{phase} {current}{total}{rate}")
        }
        EventKind::PhaseCompleted { phase, elapsed_ms } => {
            format!("{phase} completed in {:.2} s", *elapsed_ms as f64 / 1000.0)
        }
        EventKind::Metric { name, value, unit } => format!(
            "metric {name} = {value}{}",
            unit.as_ref().map_or(String::new(), |u| format!(" {u}"))
        ),
        EventKind::SnapshotAvailable { key, snapshot, .. } => {
            format!("snapshot {snapshot} at {key}")
        }
        EventKind::LogLine { line } => line.clone(),
        EventKind::Warning { message } => format!("warning: {message}"),
        EventKind::Error { class, message } => format!("error ({class}): {message}"),
    };
    let task = e.task_id.map_or(String::new(), |t| format!(" [{t}]"));
    format!("{:>6}  {}{task}  {what}", e.seq, e.at.to_rfc3339())
}
