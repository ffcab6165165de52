//! COLMAP command lines for each stage, from a reconstruction spec. Every SIFT stage
//! gets `use_gpu 0` on a machine without CUDA, or COLMAP 3.8 aborts (exit 134).

use crate::backend::CameraSharing;
use std::path::Path;
use tessera_core::spec::{BaMode, PairStrategy, ReconstructionSpec};

fn p(path: &Path) -> String {
    path.display().to_string()
}

fn gpu(cuda: bool) -> &'static str {
    if cuda { "1" } else { "0" }
}

/// `feature_extractor`, the photos' cameras as `cameras` says (COLMAP 3.8's own rule,
/// `Auto`, is one camera per photo).
pub fn extract(
    spec: &ReconstructionSpec,
    db: &Path,
    images: &Path,
    cuda: bool,
    cameras: CameraSharing,
) -> Vec<String> {
    let model = serde_json::to_value(spec.camera_model)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "SIMPLE_RADIAL".into());
    [
        "feature_extractor",
        "--database_path",
        &p(db),
        "--image_path",
        &p(images),
        "--ImageReader.single_camera",
        if cameras == CameraSharing::Shared {
            "1"
        } else {
            "0"
        },
        "--ImageReader.single_camera_per_image",
        if cameras == CameraSharing::PerImage {
            "1"
        } else {
            "0"
        },
        "--ImageReader.camera_model",
        &model,
        "--SiftExtraction.use_gpu",
        gpu(cuda),
        "--SiftExtraction.max_image_size",
        &spec.max_image_size.to_string(),
        "--SiftExtraction.max_num_features",
        &spec.max_features.to_string(),
        "--SiftExtraction.num_threads",
        &crate::backend::extract_threads().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `vocab_tree_builder`: a tree trained from the features in `db`. COLMAP samples
/// whole photos (`max_num_images`), so the training's descriptor budget is met in
/// photos.
pub fn train_vocab_tree(
    db: &Path,
    tree: &Path,
    training: crate::vocab_tree::TreeTraining,
) -> Vec<String> {
    vec![
        "vocab_tree_builder".into(),
        "--database_path".into(),
        p(db),
        "--vocab_tree_path".into(),
        p(tree),
        "--num_visual_words".into(),
        training.words.to_string(),
        "--max_num_images".into(),
        training.photos.to_string(),
    ]
}

/// The matcher for the pair strategy.
pub fn match_pairs(
    pairs: &PairStrategy,
    db: &Path,
    cuda: bool,
    vocab_tree: Option<&Path>,
) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    match pairs {
        PairStrategy::Exhaustive => push(&["exhaustive_matcher"]),
        PairStrategy::Sequential { overlap } => push(&[
            "sequential_matcher",
            "--SequentialMatching.overlap",
            &overlap.to_string(),
        ]),
        PairStrategy::Spatial {
            max_neighbors,
            max_distance_m,
            ..
        } => push(&[
            "spatial_matcher",
            "--SpatialMatching.is_gps",
            "1",
            "--SpatialMatching.max_num_neighbors",
            &max_neighbors.to_string(),
            "--SpatialMatching.max_distance",
            &max_distance_m.to_string(),
        ]),
        PairStrategy::VocabTree { num_images, .. } => push(&[
            "vocab_tree_matcher",
            "--VocabTreeMatching.vocab_tree_path",
            &vocab_tree.map(p).unwrap_or_default(),
            "--VocabTreeMatching.num_images",
            &num_images.to_string(),
        ]),
    }
    push(&[
        "--database_path",
        &p(db),
        "--SiftMatching.use_gpu",
        gpu(cuda),
    ]);
    a
}

/// `matches_importer` on a list of image pairs (`name1 name2` per line): COLMAP matches
/// and verifies each listed pair as the strategies' matchers do.
pub fn match_listed(db: &Path, list: &Path, cuda: bool) -> Vec<String> {
    [
        "matches_importer",
        "--database_path",
        &p(db),
        "--match_list_path",
        &p(list),
        "--match_type",
        "pairs",
        "--SiftMatching.use_gpu",
        gpu(cuda),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `mapper` (incremental) or `hierarchical_mapper`, writing snapshots every
/// `snapshot_every` registered images; `input` continues from a snapshot.
pub fn map(
    hierarchical: bool,
    db: &Path,
    images: &Path,
    out: &Path,
    snapshots: &Path,
    snapshot_every: u32,
    input: Option<&Path>,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        if hierarchical {
            "hierarchical_mapper"
        } else {
            "mapper"
        }
        .into(),
        "--database_path".into(),
        p(db),
        "--image_path".into(),
        p(images),
        "--output_path".into(),
        p(out),
    ];
    if !hierarchical {
        a.extend([
            "--Mapper.snapshot_path".into(),
            p(snapshots),
            "--Mapper.snapshot_images_freq".into(),
            snapshot_every.to_string(),
        ]);
        if let Some(i) = input {
            a.extend(["--input_path".into(), p(i)]);
        }
    }
    a
}

/// `bundle_adjuster` passes: one full pass, or intrinsics fixed first and then all
/// (COLMAP's bundle adjuster cannot hold points fixed, so the first pass refines poses
/// and points with the cameras held).
pub fn bundle_adjust(mode: BaMode, input: &Path, mid: &Path, out: &Path) -> Vec<Vec<String>> {
    let full = |i: &Path, o: &Path| -> Vec<String> {
        vec![
            "bundle_adjuster".into(),
            "--input_path".into(),
            p(i),
            "--output_path".into(),
            p(o),
        ]
    };
    match mode {
        BaMode::Standard => vec![full(input, out)],
        BaMode::TwoStage => {
            let mut first = full(input, mid);
            first.extend(
                [
                    "--BundleAdjustment.refine_focal_length",
                    "0",
                    "--BundleAdjustment.refine_principal_point",
                    "0",
                    "--BundleAdjustment.refine_extra_params",
                    "0",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            vec![first, full(mid, out)]
        }
    }
}

/// `model_aligner` against EXIF GPS, to ENU (local) or ECEF.
pub fn align_gps(input: &Path, out: &Path, db: &Path, ecef: bool, max_error_m: f64) -> Vec<String> {
    [
        "model_aligner",
        "--input_path",
        &p(input),
        "--output_path",
        &p(out),
        "--database_path",
        &p(db),
        "--ref_is_gps",
        "1",
        "--alignment_type",
        if ecef { "ecef" } else { "enu" },
        "--robust_alignment",
        "1",
        "--robust_alignment_max_error",
        &max_error_m.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
