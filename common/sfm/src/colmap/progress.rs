//! Turning COLMAP's output lines into progress. Only lines COLMAP 3.8 prints are
//! recognised; anything else is kept as a log line by the caller.

use tessera_core::event::Phase;

pub use crate::backend::LineEvent;

fn bracket(line: &str, prefix: &str) -> Option<(u64, u64)> {
    let rest = line.trim_start().strip_prefix(prefix)?;
    let inner = rest.split(']').next()?;
    let first = inner.split(',').next()?;
    let (a, b) = first.split_once('/')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// Parse one line; `total_images` fills in totals COLMAP does not print.
pub fn parse(line: &str, total_images: Option<u64>) -> Option<LineEvent> {
    let t = line.trim();
    if let Some((c, n)) = bracket(t, "Processed file [") {
        return Some(LineEvent::Progress {
            phase: Phase::FeatureExtraction,
            current: c,
            total: Some(n),
        });
    }
    if let Some((c, n)) = bracket(t, "Matching image [") {
        return Some(LineEvent::Progress {
            phase: Phase::Matching,
            current: c,
            total: Some(n),
        });
    }
    if let Some((c, n)) = bracket(t, "Matching block [") {
        return Some(LineEvent::Progress {
            phase: Phase::Matching,
            current: c,
            total: Some(n),
        });
    }
    if t.starts_with("Initializing with image pair") {
        return Some(LineEvent::Started(Phase::IncrementalInit));
    }
    if let Some(rest) = t.strip_prefix("Registering image #") {
        let count = rest
            .split('(')
            .nth(1)?
            .trim_end_matches(')')
            .trim()
            .parse()
            .ok()?;
        return Some(LineEvent::Progress {
            phase: Phase::IncrementalRegister,
            current: count,
            total: total_images,
        });
    }
    // Every mapper and the bundle-adjustment stage print these: the phase is bundle
    // adjustment, not the incremental mapper's (a global run's timeline said "incremental").
    if t.starts_with("Global bundle adjustment") || t.starts_with("Bundle adjustment report") {
        return Some(LineEvent::Started(Phase::BundleAdjust));
    }
    if let Some(rest) = t.strip_prefix("=> Retriangulated observations:") {
        return Some(LineEvent::Figure(
            "retriangulated_observations",
            rest.trim().parse().ok()?,
        ));
    }
    if let Some(rest) = t.strip_prefix("=> Alignment error:") {
        return Some(LineEvent::Figure(
            "alignment_error_m",
            rest.split_whitespace().next()?.parse().ok()?,
        ));
    }
    if t.contains("Could not register")
        || t.starts_with("WARNING")
        || t.contains("No good initial image pair found")
    {
        return Some(LineEvent::Warning(t.to_string()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colmap_3_8_lines() {
        assert_eq!(
            parse("Processed file [3/12]", None),
            Some(LineEvent::Progress {
                phase: Phase::FeatureExtraction,
                current: 3,
                total: Some(12)
            })
        );
        assert_eq!(
            parse("Matching image [5/12] in 1.886s", None),
            Some(LineEvent::Progress {
                phase: Phase::Matching,
                current: 5,
                total: Some(12)
            })
        );
        assert_eq!(
            parse("Matching block [2/3, 1/3] in 4.1s", None),
            Some(LineEvent::Progress {
                phase: Phase::Matching,
                current: 2,
                total: Some(3)
            })
        );
        assert_eq!(
            parse("Registering image #7 (6)", Some(12)),
            Some(LineEvent::Progress {
                phase: Phase::IncrementalRegister,
                current: 6,
                total: Some(12)
            })
        );
        assert_eq!(
            parse("  => Retriangulated observations: 12", None),
            Some(LineEvent::Figure("retriangulated_observations", 12.0))
        );
        assert_eq!(
            parse("Initializing with image pair #4 and #6", None),
            Some(LineEvent::Started(Phase::IncrementalInit))
        );
        assert_eq!(parse("  Name:            IMG_9380.jpg", None), None);
        assert_eq!(parse("Processed file [x/12]", None), None);
    }
}
