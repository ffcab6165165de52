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
//!
//! **The time model** sizes the class too: a stage whose CPU time would not fit a light
//! class's budget ([`ResourceClass::cpu_seconds`], the Lambda's 15 minutes) starts in a
//! container class. Measured with the release build, 4096 features, on the sceaux set at
//! 1600 px (11 × 1.92 MP, exhaustive, 2 cores; `tessera bench reconstruct … --json`):
//! extract 19.4 s wall (≈ 3.5 CPU-s per image, 1.8 per image·MP), match 55 pairs in
//! 17.5 s (≈ 0.64 CPU-s per pair), map 8.8 s, bundle adjustment 0.8 s. Mapping and
//! bundle adjustment grow faster than the image count; their terms are extrapolations,
//! kept above the measurements.

use super::Stage;
use tessera_core::spec::{PairStrategy, ReconstructionSpec};
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
        Stage::Map | Stage::MapCluster => (40.0 * MB, 6.0 * MB),
        Stage::BundleAdjust => (30.0 * MB, 3.0 * MB),
        Stage::Georeference => (30.0 * MB, 3.0 * MB),
        Stage::Export => (60.0 * MB, 6.0 * MB),
    }
}

/// What an engine's process holds before it does any work, beyond the COLMAP command
/// line's: pycolmap's stages run in a Python with numpy and pycolmap loaded, ~100 MB
/// more (measured on the sample set: match 131 MB, map 125 MB, bundle adjustment 109 MB
/// against COLMAP 3.8's 40–51 MB). Stages that run no engine process pay nothing.
pub fn engine_overhead(backend: &str, stage: Stage) -> u64 {
    let runs_engine = matches!(
        stage,
        Stage::Extract
            | Stage::Match
            | Stage::Map
            | Stage::MapCluster
            | Stage::BundleAdjust
            | Stage::Georeference
    );
    if backend == "pycolmap" && runs_engine {
        (110.0 * MB) as u64
    } else {
        0
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

/// Image pairs a strategy matches among `images` photos (an upper bound for spatial and
/// retrieval, which may find fewer neighbours).
pub fn pairs(strategy: &PairStrategy, images: usize) -> f64 {
    let n = images as f64;
    match strategy {
        PairStrategy::Exhaustive => n * (n - 1.0).max(0.0) / 2.0,
        PairStrategy::Sequential { overlap } => n * f64::from(*overlap).min(n),
        PairStrategy::Spatial {
            max_neighbors,
            strip_overlap,
            ..
        } => n * (f64::from(*max_neighbors) + f64::from(*strip_overlap)).min(n),
        PairStrategy::VocabTree { num_images, .. } => n * f64::from(*num_images).min(n),
    }
}

/// CPU-seconds a stage is expected to need (see the module's time model).
pub fn cpu_seconds(stage: Stage, spec: &ReconstructionSpec, images: usize, megapixels: f64) -> f64 {
    let cap = (spec.max_image_size as f64).powi(2) * 0.75 / 1e6;
    let mp = megapixels.min(cap).max(0.01);
    let n = images as f64;
    // Incremental mapping re-adjusts a growing model: more than linear in the images.
    let growth = (n / 20.0).max(1.0);
    match stage {
        Stage::Extract => 2.0 * n * mp,
        Stage::Match => 0.7 * pairs(&spec.pairs, images) + tree_training_cpu_seconds(spec, images),
        Stage::Map | Stage::MapCluster => 1.0 * n * growth,
        Stage::BundleAdjust | Stage::Georeference => 0.2 * n * growth,
        Stage::Ingest | Stage::Verify | Stage::Export => 0.05 * n,
    }
}

/// CPU-seconds to train a vocabulary tree from the set's own features, where the spec
/// asks for retrieval pairs with no tree: k-means is descriptors × words per iteration,
/// and 177,194 descriptors into 4,096 words took 37 s on two cores (1.0e-7 CPU-s each).
fn tree_training_cpu_seconds(spec: &ReconstructionSpec, images: usize) -> f64 {
    match spec.pairs {
        PairStrategy::VocabTree { tree: None, .. } => {
            let t =
                tessera_sfm::vocab_tree::TreeTraining::for_set(images as u64, spec.max_features);
            1.0e-7 * t.descriptors as f64 * f64::from(t.words)
        }
        _ => 0.0,
    }
}

/// The smallest class that holds both a stage's memory and its CPU time.
pub fn class_for_stage(memory_bytes: u64, cpu_seconds: f64) -> ResourceClass {
    let mut c = class_for(memory_bytes);
    while c.cpu_seconds().is_some_and(|budget| cpu_seconds > budget) {
        match c.next() {
            Some(n) => c = n,
            None => break,
        }
    }
    c
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

    fn spec(pairs: PairStrategy, max_image_size: u32) -> ReconstructionSpec {
        use tessera_core::spec::*;
        ReconstructionSpec {
            project: "p".into(),
            image_set: "i".into(),
            backend: BackendSpec {
                name: "colmap".into(),
                version: None,
            },
            camera_model: serde_json::from_value(serde_json::json!("SIMPLE_RADIAL")).unwrap(),
            max_features: 4096,
            max_image_size,
            sift_native_scale: false,
            pairs,
            mapper: MapperKind::Incremental,
            ba: BaMode::Standard,
            georef: Georef::None,
            exports: vec![ExportFormat::PointsBin],
            respect_exif_orientation: false,
            per_image_intrinsics: false,
            image_set_digest: None,
            georef_if_possible: false,
            crs: None,
            split: None,
            priority: 0,
        }
    }

    fn classes(spec: &ReconstructionSpec, images: usize, mp: f64) -> Vec<(Stage, ResourceClass)> {
        [
            Stage::Extract,
            Stage::Match,
            Stage::Map,
            Stage::BundleAdjust,
        ]
        .into_iter()
        .map(|s| {
            let bytes = estimate(s, images, mp, spec.max_image_size);
            (s, class_for_stage(bytes, cpu_seconds(s, spec, images, mp)))
        })
        .collect()
    }

    /// The time model covers what was measured, and keeps a stage that would outlive a
    /// Lambda function's 15 minutes out of the light classes: a 500-photo matching needs
    /// little memory but thousands of CPU-seconds, and in the stage-runner it would be
    /// killed at its timeout on every attempt.
    #[test]
    fn stages_that_would_outlive_a_lambda_start_in_a_container_class() {
        let sceaux = spec(PairStrategy::Exhaustive, 1600);
        // (stage, measured wall seconds on 2 cores) → CPU-seconds at most twice that.
        for (stage, wall) in [
            (Stage::Extract, 19.4),
            (Stage::Match, 17.5),
            (Stage::Map, 8.8),
        ] {
            let e = cpu_seconds(stage, &sceaux, 11, 6.0);
            assert!(
                e >= wall && e <= 2.0 * wall * 2.0,
                "{stage:?}: {e} CPU-s for {wall} s wall"
            );
        }
        // The rehearsal's six small photos run in the stage-runner.
        for (stage, class) in classes(&spec(PairStrategy::Exhaustive, 1600), 6, 0.48) {
            assert!(!class.is_heavy(), "{stage:?} of 6 photos is {class:?}");
        }
        // 500 phone photos, sequential pairs: matching and mapping go to Batch, though
        // matching would fit a Lambda's memory.
        let big = spec(PairStrategy::Sequential { overlap: 10 }, 1600);
        let c = classes(&big, 500, 12.0);
        assert!(!class_for(estimate(Stage::Match, 500, 12.0, 1600)).is_heavy());
        for (stage, class) in c {
            if matches!(stage, Stage::Extract | Stage::Match | Stage::Map) {
                assert!(class.is_heavy(), "{stage:?} of 500 photos is {class:?}");
            }
        }
        // 60 photos exhaustive: 1770 pairs, over the light budget.
        let m = classes(&spec(PairStrategy::Exhaustive, 1600), 60, 12.0);
        assert!(
            m.iter().any(|(s, c)| *s == Stage::Match && c.is_heavy()),
            "{m:?}"
        );
    }
}
