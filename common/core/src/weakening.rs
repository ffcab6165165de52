//! Which privacy changes take protection away from the people in a project's photos.
//!
//! Making a project *more* protective is anyone's right; making it less protective is
//! an admin's, and always on record. A change weakens privacy when, after it, a face
//! could be shown that was blurred before, or a published file could carry more about
//! the person who took it:
//! - a match threshold raised (fewer faces match an opted-out subject), or set where
//!   there was none (no threshold blurs every face);
//! - an opted-out subject removed;
//! - the face box grown less before blurring;
//! - an EXIF field kept that was dropped;
//! - a manual blur region removed or shrunk (an old region not inside a new one);
//! - originals kept longer (a retention lengthened, or cleared to keep them for ever):
//!   an original is the unblurred photo, and the longer it is kept the longer it can be
//!   read, re-added or leaked.
//!
//! The rule lives here once; the HTTP API, the CLI and the handlers only say who acts.

use crate::audit::Actor;
use crate::domain::Project;
use crate::geometry::FracRect;
use crate::photo::KeepMetadata;

/// The settings of a project that decide what its published files show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrivacySettings {
    /// Cosine threshold; `None` fails closed (every face blurred).
    pub threshold: Option<f32>,
    /// Face box growth before blurring.
    pub expand: f32,
    /// EXIF fields published files keep.
    pub keep_metadata: KeepMetadata,
}

impl PrivacySettings {
    /// A project's current settings.
    pub fn of(p: &Project) -> Self {
        PrivacySettings {
            threshold: p.match_threshold,
            expand: p.blur_expand,
            keep_metadata: p.keep_metadata,
        }
    }
}

/// What going from `old` to `new` takes away, one phrase each (empty: nothing).
pub fn settings_weakened(old: &PrivacySettings, new: &PrivacySettings) -> Vec<String> {
    let mut out = Vec::new();
    match (old.threshold, new.threshold) {
        (None, Some(t)) => out.push(format!(
            "match_threshold set to {t} where none was (no threshold blurs every face)"
        )),
        (Some(a), Some(b)) if b > a => {
            out.push(format!("match_threshold raised from {a} to {b}"));
        }
        _ => {}
    }
    if new.expand < old.expand {
        out.push(format!(
            "blur_expand lowered from {} to {}",
            old.expand, new.expand
        ));
    }
    let (o, n) = (old.keep_metadata, new.keep_metadata);
    for (field, was, now) in [
        ("capture_time", o.capture_time, n.capture_time),
        ("camera", o.camera, n.camera),
        ("location", o.location, n.location),
    ] {
        if now && !was {
            out.push(format!("keep_metadata.{field} turned on"));
        }
    }
    out
}

/// What changing how many days originals are kept (`None`: for ever) from `old` to
/// `new` takes away: nothing unless they are now kept longer.
pub fn retention_weakened(old: Option<u32>, new: Option<u32>) -> Vec<String> {
    match (old, new) {
        (Some(a), None) => vec![format!(
            "upload_retention_days cleared: originals kept for ever where they were deleted after {a} days"
        )],
        (Some(a), Some(b)) if b > a => vec![format!(
            "upload_retention_days raised from {a} to {b}: originals kept longer"
        )],
        _ => Vec::new(),
    }
}

/// The manual blur regions of `old` that `new` no longer covers (each old region must
/// lie inside one new region, within a hair of rounding).
pub fn regions_uncovered(old: &[FracRect], new: &[FracRect]) -> usize {
    const EPS: f32 = 1e-4;
    let inside = |a: &FracRect, b: &FracRect| {
        a.x >= b.x - EPS
            && a.y >= b.y - EPS
            && a.x + a.w <= b.x + b.w + EPS
            && a.y + a.h <= b.y + b.h + EPS
    };
    old.iter()
        .filter(|o| !new.iter().any(|n| inside(o, n)))
        .count()
}

/// A weakening asked for by someone who may not make it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} needs an admin key: it would show faces or details that are hidden now ({}); ask an admin of tenant {tenant} to make this change",
    .what, .why.join("; ")
)]
pub struct NotAllowed {
    /// The change asked for.
    pub what: String,
    /// What it takes away.
    pub why: Vec<String>,
    /// The tenant.
    pub tenant: String,
}

/// Allow `what` (which takes away `why`) only for an admin; nothing taken away is
/// allowed for anyone.
pub fn authorize(actor: &Actor, what: &str, why: Vec<String>) -> Result<(), NotAllowed> {
    if why.is_empty() || actor.admin {
        return Ok(());
    }
    Err(NotAllowed {
        what: what.to_string(),
        why,
        tenant: actor.tenant.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(threshold: Option<f32>, expand: f32, location: bool) -> PrivacySettings {
        PrivacySettings {
            threshold,
            expand,
            keep_metadata: KeepMetadata {
                location,
                ..KeepMetadata::default()
            },
        }
    }

    #[test]
    fn only_keeping_originals_longer_weakens_retention() {
        assert!(retention_weakened(Some(30), Some(7)).is_empty());
        assert!(retention_weakened(Some(30), Some(30)).is_empty());
        assert!(retention_weakened(None, Some(7)).is_empty());
        assert!(retention_weakened(None, None).is_empty());
        assert_eq!(retention_weakened(Some(7), Some(30)).len(), 1);
        assert_eq!(retention_weakened(Some(7), None).len(), 1);
    }

    #[test]
    fn only_changes_that_show_more_weaken() {
        let base = s(Some(0.36), 0.35, false);
        assert!(settings_weakened(&base, &base).is_empty());
        assert!(settings_weakened(&base, &s(Some(0.30), 0.40, false)).is_empty());
        assert!(settings_weakened(&base, &s(None, 0.35, false)).is_empty());
        assert_eq!(
            settings_weakened(&base, &s(Some(1.0), 0.35, false)).len(),
            1
        );
        assert_eq!(settings_weakened(&s(None, 0.35, false), &base).len(), 1);
        assert_eq!(
            settings_weakened(&base, &s(Some(0.36), 0.30, false)).len(),
            1
        );
        assert_eq!(
            settings_weakened(&base, &s(Some(0.36), 0.35, true)).len(),
            1
        );
        assert_eq!(settings_weakened(&base, &s(Some(0.5), 0.30, true)).len(), 3);
    }

    #[test]
    fn a_region_removed_or_shrunk_is_uncovered() {
        let r = |x, y, w, h| FracRect { x, y, w, h };
        let old = [r(0.1, 0.1, 0.2, 0.2), r(0.5, 0.5, 0.1, 0.1)];
        assert_eq!(regions_uncovered(&old, &old), 0);
        assert_eq!(regions_uncovered(&old, &[r(0.0, 0.0, 1.0, 1.0)]), 0);
        assert_eq!(regions_uncovered(&old, &old[..1]), 1);
        assert_eq!(regions_uncovered(&old, &[r(0.1, 0.1, 0.1, 0.2), old[1]]), 1);
        assert_eq!(regions_uncovered(&[], &old), 0);
    }

    #[test]
    fn weakening_is_for_admins_and_strengthening_for_everyone() {
        let tenant = crate::TenantId::local();
        let mut actor = Actor {
            who: "api_key:k".into(),
            tenant,
            admin: false,
        };
        assert!(authorize(&actor, "x", Vec::new()).is_ok());
        let e = authorize(&actor, "PUT privacy", vec!["threshold raised".into()]).unwrap_err();
        assert!(e.to_string().contains("admin key"), "{e}");
        actor.admin = true;
        assert!(authorize(&actor, "x", vec!["threshold raised".into()]).is_ok());
    }
}
