//! How finely features are extracted, chosen from the photos: the longest image side
//! SIFT sees and how many features it keeps. One rule for the CLI, the API recipes and
//! the bench (`--max-image-size` / `--max-features`, or a FeaturesSpec, override it).
//!
//! Why this rule: extraction costs ≈ 2 CPU-s per image·megapixel and matching grows
//! with the features kept, so detail is affordable where photos are few and must be
//! rationed where they are many. Small sets get up to 2000 px and 8192 features (on
//! `sceaux_castle`, 11 photos, this finds more points than 1000 px / 4096 at the same
//! registration); sets of a few hundred get 1600 px; larger ones 1200 px and 4096
//! features, which keeps a 1000-photo set's extraction near an hour on 2 cores. The side
//! is never above the photos' own (the image is never enlarged): the median long side
//! caps it.
//!
//! SIFT itself doubles the image before its first octave unless told otherwise
//! ([`native_scale`]). From [`NATIVE_FROM`] px on the long side it starts at the photo's
//! own pixels instead. Measured on `odm_caliterra_30` (30 photos, 1600 px, pycolmap
//! 4.2.1, 2 cores, every pair): extraction 21.0 s → 6.2 s, all 30 registered, 9,797
//! points instead of 19,274, mean reprojection error 0.589 px instead of 0.525;
//! on `sceaux_castle` (11 at 2832 px) 11 of 11. Below it the doubled copy is what makes
//! small photos work: the 800 px sample at its own pixels keeps 1,255 points at 0.95 px
//! against 4,850 at 0.23 px, and its model comes apart (camera centres 49 % of the
//! scene off a reference: the same photos at 1600 px, doubled, every pair).
//!
//! Tried and left out (December 2026, pycolmap 4.2.1, 2 cores): small photos at their
//! own pixels with SIFT's weaker extrema kept on every photo (peak threshold 0.004).
//! The sample then took ×0.70 of bare COLMAP 4's time (4.4 s against 6.3 s), all 12
//! registered, centres 0.17 % off the reference where the doubled copy's were 0.23 %;
//! but it broke at 0.005 (47 % off), and `opensfm_lund` (29 hand-held photos at 1024
//! px) registered 2, 4 and 5 of 29 at 0.004, 0.003 and 0.002 where the doubled copy
//! registers 29. Fewer features on the doubled copy failed Lund too (1,536: 3 of 29;
//! 2,048: 29 of 29 but its GPS residual 11.7 m against 4.3 m). Nothing in the photos'
//! size tells the two sets apart, so both stay doubled.

use serde::Serialize;

/// Long side SIFT sees (pixels) from which it starts at the photo's own pixels.
pub const NATIVE_FROM: u32 = 1600;

/// Up to this many photos get the finest settings.
pub const FINE_UP_TO: usize = 60;
/// Up to this many get the middle ones.
pub const MEDIUM_UP_TO: usize = 300;

/// What was chosen, and why (shown in the report and the job's events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// Longest side SIFT sees, in pixels.
    pub max_image_size: u32,
    /// Features kept per image.
    pub max_features: u32,
    /// SIFT starts at the photo's own pixels ([`native_scale`]).
    pub native_scale: bool,
    /// In words.
    pub why: String,
}

impl Resolution {
    /// One line for the job's events.
    pub fn line(&self) -> String {
        format!(
            "features: {} px{}, {} per image ({})",
            self.max_image_size,
            if self.native_scale {
                " from the photos' own pixels"
            } else {
                ""
            },
            self.max_features,
            self.why
        )
    }

    /// Add the choice to the job's events (best effort).
    pub async fn announce(&self, engine: &tessera_engine::Engine, job: tessera_core::JobId) {
        super::announce(engine, job, self.line()).await;
    }
}

/// A photo's long side in pixels, whatever its orientation: what the rules here read.
pub fn long_side(width: u64, height: u64) -> u32 {
    width.max(height).min(u64::from(u32::MAX)) as u32
}

/// Whether SIFT starts at the photos' own pixels when it sees at most `max_image_size`
/// px of photos whose long sides are `long_sides`: the side it sees is the smaller of
/// the two (the median photo's), and from [`NATIVE_FROM`] px it has detail enough
/// without doubling. The one rule for chosen and given sizes alike.
pub fn native_scale(max_image_size: u32, long_sides: &[u32]) -> bool {
    let seen = median(long_sides).map_or(max_image_size, |m| m.min(max_image_size));
    seen >= NATIVE_FROM
}

fn median(long_sides: &[u32]) -> Option<u32> {
    let mut sorted = long_sides.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// The resolution for photos whose long sides (pixels, any orientation) are `long_sides`;
/// unknown sizes are left out.
pub fn choose(long_sides: &[u32]) -> Resolution {
    let n = long_sides.len();
    let (cap, features, band) = if n <= FINE_UP_TO {
        (2000, 8192, format!("{n} photos (at most {FINE_UP_TO})"))
    } else if n <= MEDIUM_UP_TO {
        (1600, 8192, format!("{n} photos (at most {MEDIUM_UP_TO})"))
    } else {
        (1200, 4096, format!("{n} photos (over {MEDIUM_UP_TO})"))
    };
    let median = median(long_sides);
    let size = median.map_or(cap, |m| m.min(cap)).clamp(320, 16384);
    // Fewer pixels hold fewer distinct features: keep about one per 250 pixels of area.
    let by_area = (u64::from(size) * u64::from(size) * 3 / 4 / 250) as u32;
    let max_features = features.min(by_area.max(1024)).div_ceil(256) * 256;
    let why = match median {
        Some(m) if m < cap => format!("{band}: their own size, {m} px on the long side"),
        _ => format!("{band}: capped at {cap} px"),
    };
    Resolution {
        max_image_size: size,
        max_features,
        native_scale: native_scale(size, long_sides),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_photos_get_detail_and_many_are_rationed() {
        let phone = |n: usize| vec![4032u32; n];
        let small = choose(&phone(30));
        assert_eq!((small.max_image_size, small.max_features), (2000, 8192));
        assert!(small.native_scale && small.line().contains("own pixels"));
        assert!(small.why.contains("30 photos"), "{small:?}");
        let medium = choose(&phone(200));
        assert_eq!((medium.max_image_size, medium.max_features), (1600, 7680));
        let large = choose(&phone(1000));
        assert_eq!((large.max_image_size, large.max_features), (1200, 4096));
        assert!(!large.native_scale);
    }

    #[test]
    fn native_scale_from_what_sift_sees() {
        // A drone survey's 1600 px photos: their own pixels.
        assert!(native_scale(2000, &[1600; 30]));
        // The same photos with a smaller size asked for: doubled.
        assert!(!native_scale(1000, &[1600; 30]));
        // Small photos, whatever size is allowed.
        assert!(!native_scale(3200, &[800, 800, 1024]));
        // The median photo decides, not the largest.
        assert!(!native_scale(3200, &[4000, 1024, 1024]));
        // Unknown sizes: the size asked for.
        assert!(native_scale(1600, &[]));
    }

    #[test]
    fn never_above_the_photos_own_size() {
        let r = choose(&[800, 800, 800, 640, 1024]);
        assert_eq!(r.max_image_size, 800);
        assert!(r.max_features <= 8192 && r.max_features >= 1024);
        assert_eq!(r.max_features % 256, 0);
        assert!(r.why.contains("800 px"), "{r:?}");
        assert!(r.line().starts_with("features: 800 px, "), "{}", r.line());
        assert!(!r.native_scale, "small photos are doubled");
        // Unknown sizes: the band's cap.
        assert_eq!(choose(&[]).max_image_size, 2000);
        // Tiny photos still get a valid spec.
        assert_eq!(choose(&[100, 120]).max_image_size, 320);
    }
}
