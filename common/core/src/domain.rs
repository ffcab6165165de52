//! Projects. Datasets and images are in [`crate::catalog::datasets`]; photos and
//! opted-out subjects in [`crate::photo`].

use crate::clock::Millis;
use crate::ids::{ProjectId, TenantId};
use serde::{Deserialize, Serialize};

/// A project: scope of datasets, photos, subjects and privacy settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Project {
    /// Id.
    pub id: ProjectId,
    /// Owner.
    pub tenant: TenantId,
    /// Human name.
    pub name: String,
    /// What it is for, if someone said.
    #[serde(default)]
    pub description: Option<String>,
    /// Cosine similarity at or above which a face is taken to be an opted-out subject.
    /// `None` means *fail closed*: every face is blurred and no match is recorded.
    pub match_threshold: Option<f32>,
    /// How much face boxes grow before blurring (0.30..=0.40).
    pub blur_expand: f32,
    /// Bumped whenever the opted-out subjects change, so re-blurring after each change
    /// is a new job.
    pub subjects_rev: u64,
    /// How many opted-out subjects the project has.
    pub opted_out: u64,
    /// Which EXIF fields published files keep (default: capture time and camera, never
    /// location).
    #[serde(default)]
    pub keep_metadata: crate::photo::KeepMetadata,
    /// Days a photo's original upload (and its unblurred thumbnail) is kept after the
    /// photo was ingested; `None` keeps it (needed to re-blur after a subject change —
    /// a photo whose original is gone is unpublished when it would need re-deciding).
    #[serde(default)]
    pub upload_retention_days: Option<u32>,
    /// Created.
    pub created_at: Millis,
}
