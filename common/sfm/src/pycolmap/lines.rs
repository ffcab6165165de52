//! What the stage runner prints, read as events: its JSON lines (`{"tessera": …}`) and
//! COLMAP 4's own progress lines; anything else is left to the stage's log tail.

use crate::backend::LineEvent;
use serde::Deserialize;
use tessera_core::event::Phase;

#[derive(Deserialize)]
struct Line {
    tessera: String,
    phase: Option<Phase>,
    current: Option<u64>,
    total: Option<u64>,
    name: Option<String>,
    value: Option<f64>,
    message: Option<String>,
}

/// The figures the runner reports, by their names in Tessera's metrics.
const FIGURES: &[&str] = &[
    "models",
    "registered_images",
    "points",
    "mean_reprojection_error",
    "mean_reprojection_error_before",
    "photos_extracted_again",
];

/// Read one line of the runner's output: its JSON lines, and COLMAP 4's own progress
/// lines (glog-prefixed, read as COLMAP 3.8's are); anything else is left to the caller's
/// tail.
pub fn parse_line(line: &str, total_images: Option<u64>) -> Option<LineEvent> {
    let line = line.trim();
    if !line.starts_with('{') {
        return colmap_line(line, total_images);
    }
    let l: Line = serde_json::from_str(line).ok()?;
    match l.tessera.as_str() {
        "progress" => Some(LineEvent::Progress {
            phase: l.phase?,
            current: l.current?,
            total: l.total.or(total_images),
        }),
        "started" => Some(LineEvent::Started(l.phase?)),
        "figure" => {
            let name = l.name?;
            let name = FIGURES.iter().find(|f| **f == name)?;
            Some(LineEvent::Figure(name, l.value?))
        }
        "warning" | "error" => Some(LineEvent::Warning(l.message?)),
        _ => None,
    }
}

/// COLMAP 4's log line without its glog prefix (`I20261201 14:03:53.47 1396 file.cc:270] `),
/// read with COLMAP 3.8's rules plus COLMAP 4's `Processing block|image [i/n]` for
/// matching.
fn colmap_line(line: &str, total_images: Option<u64>) -> Option<LineEvent> {
    let text = match line.split_once("] ") {
        Some((prefix, rest)) if prefix.contains(".cc:") => rest,
        _ => line,
    };
    for prefix in ["Processing block [", "Processing image ["] {
        if let Some(rest) = text.trim_start().strip_prefix(prefix) {
            let (a, b) = rest.split([',', ']']).next()?.split_once('/')?;
            return Some(LineEvent::Progress {
                phase: Phase::Matching,
                current: a.trim().parse().ok()?,
                total: Some(b.trim().parse().ok()?),
            });
        }
    }
    crate::colmap::progress::parse(text, total_images)
}
