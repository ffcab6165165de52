//! The memory model: peak RSS of a stage ≈ a + b · (images × megapixels), with the
//! coefficients measured on COLMAP 3.8 (CPU, 2 cores) and kept with that version. The
//! estimate sizes the task's resource class and is what the memory gate admits.

use super::Stage;
use tessera_core::task::ResourceClass;

/// Engine version the coefficients were measured with.
pub const MEASURED_WITH: &str = "colmap-3.8-cpu";

const MB: f64 = 1024.0 * 1024.0;

/// (a in bytes, b in bytes per image·megapixel) for each stage.
pub fn coefficients(stage: Stage) -> (f64, f64) {
    match stage {
        Stage::Ingest => (40.0 * MB, 0.5 * MB),
        Stage::Extract => (250.0 * MB, 12.0 * MB),
        Stage::Match => (250.0 * MB, 4.0 * MB),
        Stage::Verify => (30.0 * MB, 0.0),
        Stage::Map => (120.0 * MB, 10.0 * MB),
        Stage::BundleAdjust => (100.0 * MB, 8.0 * MB),
        Stage::Georeference => (100.0 * MB, 8.0 * MB),
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
