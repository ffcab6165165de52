//! Specs of work on a finished reconstruction: photos registered into its model
//! ([`RelocalizeSpec`]) and its points triangulated again with the poses held
//! ([`TriangulateSpec`]), with the checks they share.

use super::{ExportFormat, Problems, SpecError, check_exports, check_extraction};
use serde::{Deserialize, Serialize};

/// Register new photos into an existing reconstruction (COLMAP's image registrator),
/// then bundle-adjust.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelocalizeSpec {
    /// The reconstruction job whose model the photos join.
    pub base_job: String,
    /// Object-store prefix of the new photos.
    pub image_set: String,
    /// Cap on SIFT features per image.
    pub max_features: u32,
    /// Longest image side fed to extraction.
    pub max_image_size: u32,
    /// Exports to write.
    pub exports: Vec<ExportFormat>,
    /// Scheduling priority; not part of the fingerprint.
    #[serde(default)]
    pub priority: i32,
}

/// Re-triangulate a reconstruction's points with its camera poses held fixed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriangulateSpec {
    /// The reconstruction job whose model is re-triangulated.
    pub base_job: String,
    /// Exports to write.
    pub exports: Vec<ExportFormat>,
    /// Scheduling priority; not part of the fingerprint.
    #[serde(default)]
    pub priority: i32,
}

/// A refinement writes the formats of its base's own frame; the survey formats need the
/// base reconstruction's CRS, so they are exported from the base reconstruction.
fn check_refined_exports(p: &mut Problems, exports: &[ExportFormat]) {
    check_exports(p, exports);
    for e in exports.iter().filter(|e| e.is_survey()) {
        p.add(
            "exports",
            format!("`{}` is written by a reconstruction, not by a refinement; ask the base reconstruction for it", e.name()),
        );
    }
}

fn check_base_job(p: &mut Problems, base_job: &str) {
    if base_job.parse::<crate::JobId>().is_err() {
        p.add("base_job", format!("`{base_job}` is not a job id; use the id of a finished reconstruction (`tessera jobs list`)"));
    }
}

impl RelocalizeSpec {
    /// Check every field.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut p = Problems::default();
        check_base_job(&mut p, &self.base_job);
        check_refined_exports(&mut p, &self.exports);
        if crate::ports::object_store::validate_key(self.image_set.trim_end_matches('/')).is_err() {
            p.add(
                "image_set",
                format!("`{}` is not a valid object-store prefix", self.image_set),
            );
        }
        check_extraction(&mut p, self.max_features, self.max_image_size);
        p.finish()
    }
}

impl TriangulateSpec {
    /// Check every field.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut p = Problems::default();
        check_base_job(&mut p, &self.base_job);
        check_refined_exports(&mut p, &self.exports);
        p.finish()
    }
}
