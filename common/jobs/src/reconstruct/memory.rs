//! The memory model: peak RSS of a stage ≈ a + b · (images × megapixels), megapixels
//! capped by `max_image_size`, with coefficients kept per engine version. The estimate
//! sizes the task's resource class and is what the memory gate admits; the hard limit
//! on the child is twice it.
//!
//! Measured with COLMAP 3.8 on this 2-core CPU machine (peak RSS from the child's
//! rusage, `tessera bench reconstruct … --json`, field `tessera_stages`):
//!
//! | set | images × MP | extract | match | map | bundle adjust |
//! | --- | --- | --- | --- | --- | --- |
//! | sample (12 × 800 px) | 5.8 | 322 MB | 40 MB | 51 MB | 44 MB |
//! | sceaux (11 × 1000 px) | 8.3 | 526 MB | 48 MB | 82 MB | 54 MB |
//!
//! Extraction runs one image per thread, so its peak grows with image size more than
//! with count; the coefficients below lie above every measurement (so estimates are
//! conservative) rather than through them.

use super::Stage;
use tessera_core::task::ResourceClass;

/// Engine version the coefficients were measured with.
pub const MEASURED_WITH: &str = "colmap-3.8-cpu";

const MB: f64 = 1024.0 * 1024.0;

/// (a in bytes, b in bytes per image·megapixel) for each stage.
pub fn coefficients(stage: Stage) -> (f64, f64) {
    match stage {
        Stage::Ingest => (40.0 * MB, 0.5 * MB),
        Stage::Extract => (120.0 * MB, 52.0 * MB),
        Stage::Match => (40.0 * MB, 1.5 * MB),
        Stage::Verify => (30.0 * MB, 0.0),
        Stage::Map => (40.0 * MB, 6.0 * MB),
        Stage::BundleAdjust => (30.0 * MB, 3.0 * MB),
        Stage::Georeference => (30.0 * MB, 3.0 * MB),
        Stage::Export => (60.0 * MB, 6.0 * MB),
    }
}

/// Peak memory estimate in bytes. Extraction works on images capped at
/// `max_image_size` on the long side, so their megapixels are capped too.
pub fn estimate(stage: Stage, images: usize, megapixels: f64, max_image_size: u32) -> u64 {
    let cap = (max_image_size as f64).powi(2) * 0.75 / 1e6;
    let mp = megapixels.min(cap).max(0.01);
    let (a, b) = coefficients(stage);
    (a + b * images as f64 * mp) as u64
}

/// The smallest resource class whose budget holds the estimate.
pub fn class_for(bytes: u64) -> ResourceClass {
    let mut c = ResourceClass::Small;
    while c.memory_bytes() < bytes {
        match c.next() {
            Some(n) => c = n,
            None => break,
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_cover_what_was_measured() {
        // (stage, images, megapixels, max_image_size, measured bytes)
        let measured = [
            (Stage::Extract, 12, 0.48, 800, 322e6),
            (Stage::Extract, 11, 6.0, 1000, 526e6),
            (Stage::Match, 11, 6.0, 1000, 48e6),
            (Stage::Map, 11, 6.0, 1000, 82e6),
            (Stage::BundleAdjust, 11, 6.0, 1000, 54e6),
        ];
        for (stage, n, mp, size, bytes) in measured {
            let e = estimate(stage, n, mp, size) as f64;
            assert!(
                e >= bytes * 0.95 && e <= bytes * 3.0,
                "{stage:?}: estimate {e} for measured {bytes}"
            );
        }
        assert_eq!(class_for(100 << 20), ResourceClass::Small);
        assert_eq!(class_for(1 << 30), ResourceClass::Medium);
        assert_eq!(class_for(200 << 30), ResourceClass::Xlarge);
    }
}
