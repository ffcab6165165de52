//! Job specs as validated data, and their fingerprints.
//!
//! Over 600 lines on purpose: the spec's types and the field-by-field validation that
//! names each of them are read together; about a third is their tests.
//!
//! A spec is parsed with serde (unknown fields rejected) and then validated field by
//! field; every problem names the field and says how to fix it, and all problems are
//! reported at once. The fingerprint is SHA-256 over the canonical JSON of the spec with
//! `priority` removed and a schema version inside, so the same work submitted twice (at
//! any priority) is one job, and a change of schema never collides with old jobs.

mod refined;
mod split;
pub use refined::{RelocalizeSpec, TriangulateSpec};
pub use split::SplitSpec;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// Bumped whenever the meaning of a spec field changes.
pub const SPEC_SCHEMA_VERSION: u32 = 1;

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Dotted path of the field (`pairs.overlap`).
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// Every problem found in a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecError {
    /// The problems, in field order.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid job spec:")?;
        for e in &self.errors {
            write!(f, "\n  - {}: {}", e.field, e.message)?;
        }
        Ok(())
    }
}

impl crate::Classify for SpecError {
    fn class(&self) -> crate::ErrorClass {
        crate::ErrorClass::Permanent
    }
}

/// Collects field errors while validating.
#[derive(Default)]
pub struct Problems(Vec<FieldError>);

impl Problems {
    /// Record that `field` is invalid.
    pub fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// `Ok` when nothing was recorded.
    pub fn finish(self) -> Result<(), SpecError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(SpecError { errors: self.0 })
        }
    }
}

/// Parse JSON into a spec type, turning serde's message into a field error.
pub fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, SpecError> {
    serde_json::from_value(value).map_err(|e| SpecError {
        errors: vec![FieldError {
            field: "spec".into(),
            message: format!("{e}; see `tessera --help` or docs/api.md for the spec format"),
        }],
    })
}

/// SHA-256 (hex) of the canonical form of `spec` for a job kind: object keys sorted,
/// `priority` removed at the top level, wrapped with the kind and the schema version.
pub fn fingerprint(kind: &str, spec: &Value) -> String {
    let mut spec = spec.clone();
    if let Value::Object(m) = &mut spec {
        m.remove("priority");
    }
    let canonical =
        serde_json::json!({ "kind": kind, "schema": SPEC_SCHEMA_VERSION, "spec": spec });
    // serde_json's map is ordered by key (no `preserve_order`), so this is canonical.
    let text = serde_json::to_string(&canonical).expect("JSON values serialize");
    hex::encode(Sha256::digest(text.as_bytes()))
}

pub use crate::camera::CameraModel;

/// How image pairs are chosen for matching.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case", deny_unknown_fields)]
pub enum PairStrategy {
    /// Every pair.
    Exhaustive,
    /// Each image with the next `overlap` images (video, walks).
    Sequential {
        /// How many following images to match.
        overlap: u32,
    },
    /// Images near each other by EXIF GPS.
    Spatial {
        /// Neighbours per image.
        max_neighbors: u32,
        /// Farthest neighbour in metres.
        max_distance_m: f64,
        /// Also each photo with the next `strip_overlap` photos of its flight strip (its
        /// line of flight, cut at turns and gaps, in capture order); 0: none. Left out of
        /// the JSON when 0, so a spec written before it keeps its fingerprint.
        #[serde(default, skip_serializing_if = "is_zero")]
        strip_overlap: u32,
    },
    /// Retrieval with a vocabulary tree: each photo is matched with the photos that look
    /// most like it, so a large unordered set costs photos × `num_images` pairs instead of
    /// every pair.
    VocabTree {
        /// Object-store key of a tree built beforehand (the CLI's `--vocab-tree` file, put
        /// in the store under its digest). `None`: the match stage trains one from this
        /// image set's own features, so nothing has to ship or be downloaded. Never a
        /// server path: a stage reads a tree only through the object store.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tree: Option<String>,
        /// Images retrieved per image.
        num_images: u32,
    },
}

/// The mapper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum MapperKind {
    Incremental,
    Hierarchical,
    Global,
}

/// Bundle adjustment mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaMode {
    /// One full pass.
    Standard,
    /// Poses only, then everything.
    TwoStage,
}

/// Georeferencing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Georef {
    /// Leave the model in its own frame.
    None,
    /// Align to EXIF GPS.
    Gps {
        /// Target frame: an EPSG code (4978 = ECEF) or `None` for local ENU.
        target_epsg: Option<u32>,
    },
    /// Align to ground control points.
    Gcp {
        /// Object-store key or path of the ground control file.
        file: String,
        /// Target EPSG code.
        target_epsg: Option<u32>,
    },
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum ExportFormat {
    Ply,
    Nvm,
    ColmapText,
    ColmapBin,
    PointsBin,
    /// LAS 1.4 (point format 7: RGB, with each point's track length and reprojection
    /// error as extra bytes) in the spec's output CRS, its WKT in the header.
    Las,
    /// The same as LAZ (LASzip-compressed LAS 1.4).
    Laz,
    /// The registered cameras' positions as a GeoJSON FeatureCollection (WGS 84
    /// longitude, latitude and ellipsoidal height, RFC 7946), with their coordinates in
    /// the output CRS as properties.
    CamerasGeojson,
}

impl ExportFormat {
    /// The formats whose coordinates are written in a CRS ([`ReconstructionSpec::crs`]).
    pub fn is_survey(self) -> bool {
        matches!(
            self,
            ExportFormat::Las | ExportFormat::Laz | ExportFormat::CamerasGeojson
        )
    }

    /// Its name in a spec (`colmap-text`).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// The engine backends Tessera can drive.
pub const BACKENDS: &[&str] = &["pycolmap", "colmap"];

/// The engine backend and the version the job was planned for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    /// Backend name (`pycolmap` or `colmap`).
    pub name: String,
    /// Version requirement (`3.8`), or `None` for whatever is installed.
    pub version: Option<String>,
}

impl BackendSpec {
    /// Whether SIFT can start at the photos' own pixels on this backend
    /// ([`ReconstructionSpec::sift_native_scale`]): COLMAP 4 through pycolmap, which
    /// reads the database between the two extractions a weak photo needs.
    pub fn sift_native_scale(&self) -> bool {
        self.name == "pycolmap"
    }
}

/// Features under which a photo SIFT saw at its own pixels is extracted again. On
/// `odm_seneca_80` (1600 px, fields and haze) at COLMAP's peak threshold the poorest
/// photos kept 244, 536, 547 … features (median 3,528) and 2 of 80 went unregistered;
/// on `odm_caliterra_30` the poorest kept 1,354 (pycolmap 4.2.1).
pub const NATIVE_SCALE_WEAK_BELOW: u32 = 1024;

/// SIFT's peak (contrast) threshold for that second extraction, against COLMAP's
/// 0.02 / 3 ≈ 0.0067: on `odm_seneca_80` it lifts the poorest photo from 244 features to
/// 2,158. Not for every photo: on `odm_caliterra_30` it took the average from 2,522 to
/// about 7,700 features, and matching and mapping, which grow with them, cost the whole
/// of the time the native scale saved (56.5 s against 24.2 s).
pub const NATIVE_SCALE_WEAK_PEAK_THRESHOLD: f64 = 0.004;

/// A reconstruction job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconstructionSpec {
    /// The project (ULID).
    pub project: String,
    /// The image set: a dataset id or an object-store prefix.
    pub image_set: String,
    /// Engine backend.
    pub backend: BackendSpec,
    /// Camera model.
    pub camera_model: CameraModel,
    /// Cap on SIFT features per image.
    pub max_features: u32,
    /// Longest image side fed to extraction, in pixels.
    pub max_image_size: u32,
    /// SIFT starts at the photo's own pixels (COLMAP's `first_octave` 0) instead of a
    /// copy doubled in each direction (-1, COLMAP's default). The doubled copy holds four
    /// times the pixels and costs about 3.4× the extraction time; it pays where photos
    /// are small, not where each has megapixels of real detail. A photo that then keeps
    /// fewer than [`NATIVE_SCALE_WEAK_BELOW`] features (weak texture) is extracted again
    /// with weaker extrema kept ([`NATIVE_SCALE_WEAK_PEAK_THRESHOLD`]). COLMAP 4
    /// (pycolmap) only: the command line cannot look twice. Absent from older specs
    /// (false), so their fingerprints do not change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sift_native_scale: bool,
    /// Pair selection.
    pub pairs: PairStrategy,
    /// Mapper.
    pub mapper: MapperKind,
    /// Bundle adjustment.
    pub ba: BaMode,
    /// Georeferencing.
    pub georef: Georef,
    /// Exports to write.
    pub exports: Vec<ExportFormat>,
    /// Turn each photo as its EXIF orientation says before COLMAP reads it (sfmapi's
    /// dataset `respect_exif_orientation`): phone portraits then share one camera with
    /// the landscape shots instead of looking like a second, sideways camera. Absent
    /// from older specs (false), so their fingerprints do not change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub respect_exif_orientation: bool,
    /// One set of intrinsics per photo even where all photos share a size (sfmapi's
    /// dataset `intrinsics_mode: per_image`: photos of one resolution from different
    /// lenses or zoom settings). Otherwise photos of one size share one camera. Absent
    /// from older specs (false), so their fingerprints do not change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_image_intrinsics: bool,
    /// What the image set holds (a digest of its images' names and content hashes), so
    /// that the same spec over a dataset whose images changed is a new job, not the old
    /// one found by fingerprint. Absent where the image set is fixed or unknown, so older
    /// fingerprints do not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_set_digest: Option<String>,
    /// Georeferencing was chosen for the photos (they carry GPS), not asked for: when
    /// the alignment fails the model stays in its own frame, with a warning, instead of
    /// the run failing. Absent from older specs (false), so their fingerprints do not
    /// change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub georef_if_possible: bool,
    /// The coordinate system the survey exports (LAS, LAZ, camera GeoJSON's projected
    /// coordinates) are written in; by default the UTM zone of the photos for an
    /// east-north-up model and EPSG:4978 for an ECEF one ([`crate::crs`]). Needs GPS
    /// georeferencing. Absent from older specs, so their fingerprints do not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crs: Option<crate::crs::OutputCrs>,
    /// Map in overlapping clusters and merge them ([`SplitSpec`]); `None` maps every
    /// photo in one mapper run. Absent from older specs, so their fingerprints do not
    /// change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitSpec>,
    /// Scheduling priority, -100..=100; not part of the fingerprint.
    #[serde(default)]
    pub priority: i32,
}

impl ReconstructionSpec {
    /// Check every field; all problems are reported together.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut p = Problems::default();
        if self.project.parse::<crate::ProjectId>().is_err() {
            p.add(
                "project",
                format!(
                    "`{}` is not a project id; use the ULID printed when the project was created",
                    self.project
                ),
            );
        }
        if self.image_set.trim().is_empty() {
            p.add(
                "image_set",
                "is empty; give a dataset id or an object-store prefix holding the images",
            );
        } else if self.image_set.parse::<crate::DatasetId>().is_err()
            && crate::ports::object_store::validate_key(self.image_set.trim_end_matches('/'))
                .is_err()
        {
            p.add("image_set", format!("`{}` is neither a dataset id nor a valid object-store prefix (relative, no `..`)", self.image_set));
        }
        if !BACKENDS.contains(&self.backend.name.as_str()) {
            p.add(
                "backend.name",
                format!(
                    "unknown backend `{}`; use `pycolmap` (COLMAP 4) or `colmap` (the command line)",
                    self.backend.name
                ),
            );
        }
        if let Some(v) = &self.backend.version
            && !v
                .split('.')
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            p.add(
                "backend.version",
                format!("`{v}` is not a version like `3.8` or `3.14.1`"),
            );
        }
        check_extraction(&mut p, self.max_features, self.max_image_size);
        match &self.pairs {
            PairStrategy::Exhaustive => {}
            PairStrategy::Sequential { overlap } => {
                if !(1..=500).contains(overlap) {
                    p.add(
                        "pairs.overlap",
                        format!("{overlap} is out of range; use 1 to 500 (10 is usual)"),
                    );
                }
            }
            PairStrategy::Spatial {
                max_neighbors,
                max_distance_m,
                strip_overlap,
            } => {
                if *strip_overlap > 100 {
                    p.add(
                        "pairs.strip_overlap",
                        format!("{strip_overlap} is out of range; use 0 (none) to 100"),
                    );
                }
                if !(1..=500).contains(max_neighbors) {
                    p.add(
                        "pairs.max_neighbors",
                        format!("{max_neighbors} is out of range; use 1 to 500"),
                    );
                }
                if !(max_distance_m.is_finite() && *max_distance_m > 0.0) {
                    p.add(
                        "pairs.max_distance_m",
                        "must be a positive number of metres",
                    );
                }
            }
            PairStrategy::VocabTree { tree, num_images } => {
                if let Some(tree) = tree
                    && crate::ports::object_store::validate_key(tree).is_err()
                {
                    p.add(
                        "pairs.tree",
                        "is not an object key; leave it out to train a tree from the photos' own features",
                    );
                }
                if !(1..=1000).contains(num_images) {
                    p.add(
                        "pairs.num_images",
                        format!("{num_images} is out of range; use 1 to 1000"),
                    );
                }
            }
        }
        match &self.georef {
            Georef::None => {}
            Georef::Gps { target_epsg } => check_epsg(&mut p, "georef.target_epsg", *target_epsg),
            Georef::Gcp { file, target_epsg } => {
                if crate::ports::object_store::validate_key(file).is_err() {
                    p.add(
                        "georef.file",
                        format!("`{file}` is not an object-store key; upload the gcp_list.txt and name its key"),
                    );
                }
                check_epsg(&mut p, "georef.target_epsg", *target_epsg);
            }
        }
        check_exports(&mut p, &self.exports);
        let georeferenced = matches!(self.georef, Georef::Gps { .. } | Georef::Gcp { .. });
        let survey: Vec<String> = self
            .exports
            .iter()
            .filter(|e| e.is_survey())
            .map(|e| e.name())
            .collect();
        if let Some(crs) = self.crs {
            if !georeferenced {
                p.add(
                    "crs",
                    format!("{crs} needs a georeferenced model; use georef gps (or auto, with photos that carry GPS)"),
                );
            }
            if survey.is_empty() {
                p.add(
                    "crs",
                    format!("{crs} applies to the las, laz and cameras-geojson exports, and none is asked for; add one"),
                );
            }
            if let crate::crs::OutputCrs::Epsg(code) = crs
                && let Err(e) = crate::crs::Crs::from_epsg(code)
            {
                p.add("crs", e.to_string());
            }
        }
        if self.exports.contains(&ExportFormat::CamerasGeojson) && !georeferenced {
            p.add(
                "exports",
                "cameras-geojson places cameras on the earth and needs a georeferenced model; use georef gps (or auto, with photos that carry GPS)",
            );
        }
        if let Some(split) = &self.split {
            split.check(&mut p, self.mapper);
        }
        if !(-100..=100).contains(&self.priority) {
            p.add(
                "priority",
                format!("{} is out of range; use -100 to 100", self.priority),
            );
        }
        p.finish()
    }
}

/// Each format once.
/// For `skip_serializing_if`: a count of zero is left out of a spec's JSON.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Features and image size as a reconstruction or a relocalisation asks them.
fn check_extraction(p: &mut Problems, max_features: u32, max_image_size: u32) {
    if !(256..=65536).contains(&max_features) {
        p.add(
            "max_features",
            format!("{max_features} is out of range; use 256 to 65536 (8192 is usual)"),
        );
    }
    if !(320..=16384).contains(&max_image_size) {
        p.add(
            "max_image_size",
            format!("{max_image_size} is out of range; use 320 to 16384 pixels"),
        );
    }
}

fn check_exports(p: &mut Problems, exports: &[ExportFormat]) {
    let mut seen = std::collections::BTreeSet::new();
    for e in exports {
        if !seen.insert(*e) {
            p.add(
                "exports",
                format!("`{}` is listed twice; list each format once", e.name()),
            );
        }
    }
}

/// The frames a GPS alignment produces: local east-north-up metres (no code) and
/// earth-centred ECEF (EPSG:4978). Any other code would be answered with one of those
/// under its name, so it is refused.
fn check_epsg(p: &mut Problems, field: &str, epsg: Option<u32>) {
    match epsg {
        None | Some(4978) => {}
        Some(code) if !(1024..=32767).contains(&code) => p.add(
            field,
            format!("{code} is not an EPSG code; use 4978 (ECEF), or leave it out for local east-north-up metres"),
        ),
        Some(code) => p.add(
            field,
            format!("EPSG:{code} is not produced as the model's own frame; use 4978 (ECEF), or leave it out for local east-north-up metres, and ask for EPSG:{code} as the crs of the las, laz or cameras-geojson exports"),
        ),
    }
}

#[cfg(test)]
mod tests;
