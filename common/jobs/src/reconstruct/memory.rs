//! The memory model: peak RSS of a stage ≈ a + b · (images × megapixels), megapixels
//! capped by `max_image_size`, with coefficients kept per engine version; extraction's
//! is of the photos in flight instead (below). The estimate
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
//! **Extraction is not linear in the count**: it holds one photo per thread
//! (`tessera_sfm::backend::EXTRACT_THREADS_MAX` at most), each decoded at its own size
//! and turned into a scale space of the side SIFT sees — four times the pixels where
//! SIFT doubles the photo first. Its peak is `a + threads · (k · seen MP · 4 or 1 + r ·
//! photo MP)`, whatever the count. The linear model before it put 80 photos of 1600 px
//! at 8.1 GB (a Batch container) and 1,000 phone photos at 56 GB (the GPU class);
//! measured with pycolmap 4.2.1 on 2 threads (Python and pycolmap's ~110 MB included):
//!
//! | set | SIFT sees | extract peak |
//! | --- | --- | --- |
//! | sample, 12 × 800 px | doubled | 373 MB |
//! | `opensfm_lund`, 29 × 1024 px | doubled | 552 MB |
//! | `odm_caliterra_30`, 30 × 1600 px | doubled | 1,197 MB |
//! | `odm_caliterra_30`, 30 × 1600 px | own pixels | 399 MB |
//! | `odm_seneca_80`, 80 × 1600 px | own pixels | 421 MB |
//! | `sceaux_castle`, 11 × 2832 px seen at 2000 | own pixels | 611 MB |
//!
//! The coefficients lie above every measurement (so estimates are conservative) rather
//! than through them. The photo's own megapixels are the set's mean: a set that mixes a
//! few very large photos into small ones can exceed it by the large ones' decoded
//! pixels (10 MB per megapixel each), which the eight threads assumed on a light class's
//! two vCPUs and the child's limit at twice the estimate leave room for.
//!
//! **The time model** sizes the class too: a stage whose CPU time would not fit a light
//! class's budget ([`ResourceClass::cpu_seconds`], the Lambda's 15 minutes) starts in a
//! container class. Measured with the release build, 4096 features, on the sceaux set at
//! 1600 px (11 × 1.92 MP, exhaustive, 2 cores; `tessera bench reconstruct … --json`):
//! extract 19.4 s wall (≈ 3.5 CPU-s per image, 1.8 per image·MP; at the photos' own
//! pixels 0.30 of the doubled time: 6.2 s against 21.0 s on `odm_caliterra_30`), match 55 pairs in
//! 17.5 s (≈ 0.64 CPU-s per pair), map 8.8 s, bundle adjustment 0.8 s. Mapping and
//! bundle adjustment grow faster than the image count; their terms are extrapolations,
//! kept above the measurements.

use super::Stage;
use tessera_core::spec::{PairStrategy, ReconstructionSpec};
use tessera_core::task::ResourceClass;

/// Engine versions the coefficients were measured with: extraction's with pycolmap.
pub const MEASURED_WITH: &str = "colmap-3.8-cpu, extraction pycolmap-4.2.1-cpu";

const MB: f64 = 1024.0 * 1024.0;

/// (a in bytes, b in bytes per image·megapixel) for each stage.
pub fn coefficients(stage: Stage) -> (f64, f64) {
    match stage {
        Stage::Ingest => (40.0 * MB, 0.5 * MB),
        // Per photo in flight, not per photo: see `extract_peak`.
        Stage::Extract => (120.0 * MB, 0.0),
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

/// Extraction's peak per photo in flight: bytes per megapixel of the scale space SIFT
/// builds, and per megapixel of the photo decoded before it is scaled down.
const EXTRACT_PER_SEEN_MP: f64 = 65.0 * MB;
const EXTRACT_PER_PHOTO_MP: f64 = 10.0 * MB;

/// Peak memory estimate in bytes. `megapixels` is the photos' own (the mean); the
/// stages after extraction see them capped at `max_image_size` on the long side.
/// `native_scale`: SIFT starts at the photos' own pixels (the spec's
/// `sift_native_scale`), not a doubled copy.
pub fn estimate(
    stage: Stage,
    images: usize,
    megapixels: f64,
    max_image_size: u32,
    native_scale: bool,
) -> u64 {
    if stage == Stage::Extract {
        let threads = tessera_sfm::backend::EXTRACT_THREADS_MAX;
        return extract_peak(images, megapixels, max_image_size, native_scale, threads);
    }
    let (a, b) = coefficients(stage);
    (a + b * images as f64 * seen_megapixels(megapixels, max_image_size)) as u64
}

fn seen_megapixels(megapixels: f64, max_image_size: u32) -> f64 {
    let cap = (max_image_size as f64).powi(2) * 0.75 / 1e6;
    megapixels.min(cap).max(0.01)
}

/// Extraction's peak with `threads` photos in flight (fewer if there are fewer photos).
fn extract_peak(
    images: usize,
    megapixels: f64,
    max_image_size: u32,
    native_scale: bool,
    threads: usize,
) -> u64 {
    let (a, _) = coefficients(Stage::Extract);
    let doubling = if native_scale { 1.0 } else { 4.0 };
    // Capped as a square photo would be, not 4:3: a panorama or square crop at the cap
    // holds a third more pixels.
    let cap = f64::from(max_image_size).powi(2) / 1e6;
    let seen = megapixels.min(cap).max(0.01);
    let per_photo =
        EXTRACT_PER_SEEN_MP * doubling * seen + EXTRACT_PER_PHOTO_MP * megapixels.max(0.01);
    (a + images.clamp(1, threads) as f64 * per_photo) as u64
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
        Stage::Extract if spec.sift_native_scale => 0.6 * n * mp,
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
            (Stage::Match, 11, 6.0, 1000, 48e6),
            (Stage::Map, 11, 6.0, 1000, 82e6),
            (Stage::BundleAdjust, 11, 6.0, 1000, 54e6),
        ];
        for (stage, n, mp, size, bytes) in measured {
            let e = estimate(stage, n, mp, size, false) as f64;
            assert!(
                e >= bytes * 0.95 && e <= bytes * 3.0,
                "{stage:?}: estimate {e} for measured {bytes}"
            );
        }
        // Extraction on 2 threads, as measured: COLMAP 3.8 in bytes, pycolmap (the
        // module's table, which carries Python) in MiB.
        let python = engine_overhead("pycolmap", Stage::Extract) as f64;
        let extraction = [
            (12, 0.48, 800, false, 322e6, 0.0),
            (11, 6.0, 1000, false, 526e6, 0.0),
            (12, 0.48, 800, false, 373.0 * MB, python),
            (29, 0.79, 1024, false, 552.0 * MB, python),
            (30, 1.92, 1600, false, 1197.0 * MB, python),
            (30, 1.92, 1600, true, 399.0 * MB, python),
            (80, 1.92, 1600, true, 421.0 * MB, python),
            (11, 6.03, 2000, true, 611.0 * MB, python),
        ];
        for (n, mp, size, native, bytes, overhead) in extraction {
            let e = extract_peak(n, mp, size, native, 2) as f64 + overhead;
            assert!(
                e >= bytes * 0.95 && e <= bytes * 3.0,
                "extract {n} × {mp} MP at {size} px (native {native}): estimate {e} for measured {bytes}"
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
            let bytes = estimate(s, images, mp, spec.max_image_size, spec.sift_native_scale);
            (s, class_for_stage(bytes, cpu_seconds(s, spec, images, mp)))
        })
        .collect()
    }

    /// Extraction holds the photos in flight, not the set: 80 photos need what 8 do, and
    /// 1,000 phone photos seen at their own pixels stay within a light class's memory
    /// (the linear model put the 80 at 8.1 GB, a Batch container, and the 1,000 at
    /// 56 GB, the GPU class). A doubled copy costs more per photo in flight.
    #[test]
    fn extraction_memory_is_the_photos_in_flight_not_the_set() {
        let survey = |n| estimate(Stage::Extract, n, 1.92, 1600, true);
        assert_eq!(survey(80), survey(8));
        assert!(survey(3) < survey(8));
        let python = engine_overhead("pycolmap", Stage::Extract);
        assert_eq!(class_for(survey(80) + python), ResourceClass::Medium);
        let phones = estimate(Stage::Extract, 1000, 12.0, 1200, true) + python;
        assert_eq!(class_for(phones), ResourceClass::Medium);
        let doubled = estimate(Stage::Extract, 1000, 12.0, 1200, false) + python;
        assert!(doubled > phones && class_for(doubled) <= ResourceClass::Large);
        // The time model: the doubled copy is most of extraction's time.
        let mut native = spec(PairStrategy::Exhaustive, 1600);
        native.sift_native_scale = true;
        let doubled = spec(PairStrategy::Exhaustive, 1600);
        let ratio = cpu_seconds(Stage::Extract, &native, 30, 1.92)
            / cpu_seconds(Stage::Extract, &doubled, 30, 1.92);
        assert!((0.25..=0.5).contains(&ratio), "{ratio}");
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
        assert!(!class_for(estimate(Stage::Match, 500, 12.0, 1600, false)).is_heavy());
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
