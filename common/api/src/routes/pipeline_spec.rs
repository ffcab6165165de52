//! A reconstruction request's sfmapi sections (FeaturesSpec, PairsSpec and the mapping
//! spec's `x-tessera` options) translated into the [`Recipe`] every way in shares, and
//! prepared over a dataset's registered images by [`recipe::prepare`]. Only translation
//! lives here: every choice left to the photos is the recipe's.

use crate::ApiState;
use crate::problem::Problem;
use serde_json::{Value, json};
use tessera_core::spec::{
    BaMode, BackendSpec, ExportFormat, Georef, MapperKind, PairStrategy, ReconstructionSpec,
    SplitSpec,
};
use tessera_jobs::reconstruct::recipe::{self, GeorefAsk, PairsAsk, PhotoFact, Placement, Recipe};

/// What runs after mapping, from a mapping spec's `x-tessera` object.
struct Finishing {
    ba: BaMode,
    georef: GeorefAsk,
    exports: Vec<ExportFormat>,
    crs: Option<tessera_core::crs::OutputCrs>,
    split: recipe::SplitAsk,
    /// A ground control file's text, checked.
    ground_control: Option<(String, tessera_core::gcp::ControlFile)>,
}

/// Tessera's own choices for what runs after mapping, from a mapping spec's
/// `x-tessera` object: `{"ba": "standard" | "two_stage", "georeference": "none" | "auto"
/// | "gps" | "gps_ecef", "exports": ["ply", "nvm", "colmap_text", "colmap_bin", "las",
/// "laz", "cameras_geojson"], "crs": "auto" | "EPSG:NNNN", "ground_control": "<the text of
/// an OpenDroneMap gcp_list.txt>", "split": "auto" | "none" | 25 | "25/8" |
/// {"cluster_size": 25, "overlap": 8}}`; the split defaults to auto, as on the CLI. Ground control places the model instead of GPS
/// (`georeference` may then be left out, or `gps_ecef` for an earth-centred result).
/// Georeferencing is `none` unless asked, because sfmapi's pipelines return models in
/// their own frame; `auto` is the CLI's default rule. 422 for a value that is none of
/// these; whether the engine offers them is checked on the whole spec ([`engine_check`]).
fn finishing(options: Option<&Value>) -> Result<Finishing, Problem> {
    let o = options.cloned().unwrap_or(Value::Null);
    if !o.is_null() && !o.is_object() {
        return Err(Problem::validation("spec.x-tessera must be an object"));
    }
    let ba = match &o["ba"] {
        Value::Null => BaMode::Standard,
        v => serde_json::from_value(v.clone()).map_err(|_| {
            Problem::validation(format!(
                "spec.x-tessera.ba `{v}`: use standard or two_stage"
            ))
        })?,
    };
    let georef = match o["georeference"].as_str() {
        None | Some("none") => GeorefAsk::Given(Georef::None),
        Some("auto") => GeorefAsk::Auto,
        Some("gps") => GeorefAsk::Given(Georef::Gps { target_epsg: None }),
        Some("gps_ecef") => GeorefAsk::Given(Georef::Gps {
            target_epsg: Some(4978),
        }),
        Some(other) => {
            return Err(Problem::validation(format!(
                "spec.x-tessera.georeference `{other}`: use none, auto (GPS where most photos carry it), gps (east-north-up metres) or gps_ecef (EPSG:4978)"
            )));
        }
    };
    let mut exports = Vec::new();
    for e in o["exports"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        // The capability spelling (`colmap_text`) of the spec's format (`colmap-text`).
        let format: ExportFormat = e
            .as_str()
            .and_then(|n| serde_json::from_value(json!(n.replace('_', "-"))).ok())
            .ok_or_else(|| {
                Problem::validation(format!(
                    "spec.x-tessera.exports: `{e}` is not one of ply, nvm, colmap_text, colmap_bin, las, laz, cameras_geojson"
                ))
            })?;
        exports.push(format);
    }
    let crs = match &o["crs"] {
        Value::Null => None,
        Value::String(c) => Some(
            c.parse()
                .map_err(|e: String| Problem::validation(format!("spec.x-tessera.crs: {e}")))?,
        ),
        v => {
            return Err(Problem::validation(format!(
                "spec.x-tessera.crs `{v}`: use a string, EPSG:NNNN or auto"
            )));
        }
    };
    let bad_split = |why: String| {
        Problem::validation(format!(
            "spec.x-tessera.split: {why}; use auto, none, a cluster size (25), \"25/8\" or {{\"cluster_size\": 25, \"overlap\": 8}}"
        ))
    };
    let split = match &o["split"] {
        Value::Null => recipe::SplitAsk::Auto,
        Value::String(v) => v.parse().map_err(bad_split)?,
        Value::Number(n) => n.to_string().parse().map_err(bad_split)?,
        Value::Object(o) => {
            // The overlap defaults as in "25": a third of the cluster.
            let size = o
                .get("cluster_size")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad_split("`cluster_size` must be a number of photos".into()))?;
            let mut split = SplitSpec::of_size(size.min(u64::from(u32::MAX)) as u32);
            if let Some(overlap) = o.get("overlap") {
                split.overlap = overlap
                    .as_u64()
                    .ok_or_else(|| bad_split("`overlap` must be a number of photos".into()))?
                    .min(u64::from(u32::MAX)) as u32;
            }
            if let Some(other) = o
                .keys()
                .find(|k| !["cluster_size", "overlap"].contains(&k.as_str()))
            {
                return Err(bad_split(format!("`{other}` is not a field of split")));
            }
            recipe::SplitAsk::Given(split)
        }
        v => return Err(bad_split(format!("`{v}` is not a split"))),
    };
    let ground_control = match &o["ground_control"] {
        Value::Null => None,
        Value::String(text) => {
            if text.len() as u64 > tessera_core::gcp::MAX_BYTES {
                return Err(Problem::validation(format!(
                    "spec.x-tessera.ground_control is {} bytes; a gcp_list.txt is a line per mark, and over {} bytes is refused",
                    text.len(),
                    tessera_core::gcp::MAX_BYTES
                )));
            }
            let file = tessera_core::gcp::parse(text)
                .map_err(|e| Problem::validation(format!("spec.x-tessera.ground_control: {e}")))?;
            Some((text.clone(), file))
        }
        v => {
            return Err(Problem::validation(format!(
                "spec.x-tessera.ground_control `{v}`: give the text of a gcp_list.txt"
            )));
        }
    };
    let georef = match (&ground_control, o["georeference"].as_str(), georef) {
        (None, _, g) => g,
        (Some(_), Some("none" | "gps"), _) => {
            return Err(Problem::validation(
                "spec.x-tessera: ground_control places the model by its points; leave georeference out (or gps_ecef for an earth-centred result)",
            ));
        }
        (Some(_), _, g) => g,
    };
    Ok(Finishing {
        ba,
        georef,
        exports,
        crs,
        split,
        ground_control,
    })
}

/// The pair strategy a PairsSpec asks for (its capability already checked by
/// [`super::pipelines::require_capabilities`]): `auto` (or none) leaves it to the photos.
fn pairs_asked(pairs: Option<&Value>) -> Result<PairsAsk, Problem> {
    let p = pairs.cloned().unwrap_or(Value::Null);
    if !p.is_null() && !p.is_object() {
        return Err(Problem::validation(format!(
            "pairs `{p}`: use an object such as {{\"strategy\": \"spatial\"}}"
        )));
    }
    if !p["strategy"].is_null() && !p["strategy"].is_string() {
        return Err(Problem::validation(format!(
            "pairs.strategy `{}`: use auto, exhaustive, sequential, spatial or vocabtree",
            p["strategy"]
        )));
    }
    let count_to = |field: &str, default: u32, max: u64| -> Result<u32, Problem> {
        match &p[field] {
            Value::Null => Ok(default),
            v => v
                .as_u64()
                .filter(|n| (1..=max).contains(n))
                .map(|n| n as u32)
                .ok_or_else(|| {
                    Problem::validation(format!("pairs.{field} `{v}`: use a whole number 1–{max}"))
                }),
        }
    };
    let count = |field: &str, default: u32| count_to(field, default, 500);
    Ok(match p["strategy"].as_str() {
        None | Some("auto") => PairsAsk::Auto,
        Some("exhaustive") => PairsAsk::Given(PairStrategy::Exhaustive),
        Some("sequential") => PairsAsk::Given(PairStrategy::Sequential {
            overlap: count("overlap", recipe::SEQUENTIAL_OVERLAP)?,
        }),
        // sfmapi's names (`overlap`, `overlap_distance_m`), or the spec's own, as a job's
        // options show them (the console's "run again" sends those back).
        Some("spatial") => PairsAsk::Given(PairStrategy::Spatial {
            max_neighbors: if p["max_neighbors"].is_null() {
                count("overlap", recipe::SPATIAL_NEIGHBOURS)?
            } else {
                count("max_neighbors", recipe::SPATIAL_NEIGHBOURS)?
            },
            max_distance_m: {
                let field = if p["max_distance_m"].is_null() {
                    "overlap_distance_m"
                } else {
                    "max_distance_m"
                };
                match &p[field] {
                    Value::Null => recipe::SPATIAL_DISTANCE_M,
                    v => v
                        .as_f64()
                        .filter(|d| d.is_finite() && *d > 0.0 && *d <= 1e6)
                        .ok_or_else(|| {
                            Problem::validation(format!(
                                "pairs.{field} `{v}`: use metres, more than 0 and at most 1,000,000"
                            ))
                        })?,
                }
            },
            // None unless asked: the spec leaves 0 out of its JSON, so a job's options
            // sent back ("run again") must read as 0 to give the same job.
            strip_overlap: match &p["strip_overlap"] {
                Value::Null => 0,
                v => v
                    .as_u64()
                    .filter(|n| *n <= 100)
                    .map(|n| n as u32)
                    .ok_or_else(|| {
                        Problem::validation(format!(
                            "pairs.strip_overlap `{v}`: use a whole number 0–100 (0: no flight-strip pairs)"
                        ))
                    })?,
            },
        }),
        // Retrieval by a tree trained from the dataset's own features: a client cannot
        // name a tree file, which would be a path on the server or another tenant's key.
        Some("vocabtree" | "vocab_tree") => {
            for field in ["tree", "vocab_tree", "vocab_tree_path"] {
                if !p[field].is_null() {
                    return Err(Problem::validation(format!(
                        "pairs.{field}: a vocabulary tree cannot be named here; leave it out and Tessera trains one from the dataset's own features"
                    )));
                }
            }
            PairsAsk::Given(PairStrategy::VocabTree {
                tree: None,
                num_images: count_to(
                    "num_images",
                    tessera_jobs::reconstruct::pairing::VOCAB_TREE_IMAGES,
                    1000,
                )?,
            })
        }
        Some(other) => return Err(Problem::capability_unavailable(&format!("pairs.{other}"))),
    })
}

/// 501 naming the first capability `spec` needs that this server's engine lacks: the
/// same check the engine runs before each stage.
fn engine_check(s: &ApiState, spec: &ReconstructionSpec) -> Result<(), Problem> {
    tessera_sfm::backend::BackendInfo {
        name: s.backend.0.clone(),
        version: s.backend.1.clone(),
        cuda: false,
        capabilities: s.capabilities.iter().cloned().collect(),
    }
    .check_spec(spec)
    .map_err(|u| Problem::capability_unavailable(&u.capability))
}

/// The request's sections made into a [`Recipe`] and prepared over the dataset's
/// registered images by the rule every way in uses ([`recipe::prepare`]).
pub(super) async fn spec_for(
    s: &ApiState,
    d: super::datasets::Dataset,
    mapper: MapperKind,
    features: Option<&Value>,
    pairs: Option<&Value>,
    options: Option<&Value>,
) -> Result<Planned, Problem> {
    let Finishing {
        ba,
        mut georef,
        exports,
        crs,
        split,
        ground_control,
    } = finishing(options)?;
    let photos: Vec<PhotoFact> = super::images::all_images(s, &d)
        .await?
        .iter()
        .map(PhotoFact::of_image)
        .collect();
    // The control file is stored beside the dataset's images, named by its content, so
    // the same file makes the same spec; it is written only when the job is submitted.
    let control = match ground_control {
        None => None,
        Some((text, file)) => {
            let names: std::collections::HashSet<&str> =
                photos.iter().map(|p| p.name.as_str()).collect();
            if let Some(m) = file.marks_outside(&names) {
                return Err(Problem::validation(format!(
                    "spec.x-tessera.ground_control line {}: `{}` is not an image of dataset {}; mark control points in the dataset's images",
                    m.line, m.image, d.dataset_id
                )));
            }
            use sha2::Digest;
            let digest = hex::encode(sha2::Sha256::digest(text.as_bytes()));
            let key = format!("datasets/{}/gcp/{}.txt", d.dataset_id, &digest[..32]);
            let ecef = georef
                == GeorefAsk::Given(Georef::Gps {
                    target_epsg: Some(4978),
                });
            georef = GeorefAsk::Given(Georef::Gcp {
                file: key.clone(),
                target_epsg: ecef.then_some(4978),
            });
            Some((key, bytes::Bytes::from(text)))
        }
    };
    let features = features.cloned().unwrap_or(Value::Null);
    let recipe = Recipe {
        camera_model: serde_json::from_value(json!(d.camera_model))
            .map_err(|_| Problem::validation(format!("camera model `{}`", d.camera_model)))?,
        pairs: pairs_asked(pairs)?,
        mapper,
        ba,
        georef,
        exports,
        crs,
        split,
        max_features: features["sift_max_num_features"]
            .as_u64()
            .or(features["max_num_features"].as_u64())
            .map(|n| n.clamp(256, 65_536) as u32),
        max_image_size: None,
        respect_exif_orientation: d.respect_exif_orientation,
        per_image_intrinsics: d.intrinsics_mode.per_image(),
    };
    let place = Placement {
        project: d.project_id.to_string(),
        image_set: super::datasets::images_prefix(d.dataset_id),
        // The engine this server plans for, its version pinned at submission so the
        // fingerprint names the engine that runs.
        backend: BackendSpec {
            name: s.backend.0.clone(),
            version: Some(s.backend.1.clone()).filter(|v| !v.is_empty()),
        },
    };
    let prepared = recipe::prepare(
        &recipe,
        place,
        &photos,
        &format!("dataset {}", d.dataset_id),
    )
    .map_err(|e| Problem::validation(e.to_string()))?;
    engine_check(s, &prepared.spec)?;
    Ok(Planned {
        prepared,
        dataset: d,
        control,
    })
}

/// A recipe prepared over a dataset.
pub(super) struct Planned {
    /// The spec, its sizing and its choices.
    pub prepared: recipe::Prepared,
    /// The dataset it reconstructs.
    pub dataset: super::datasets::Dataset,
    /// A ground control file to store (key, bytes) before the job runs.
    pub control: Option<(String, bytes::Bytes)>,
}
