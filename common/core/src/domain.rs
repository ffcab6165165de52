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
    /// The sweep that re-decides the photos at some subject revision, when it ended
    /// without finishing (cancelled by someone, or dead after its last attempt). Its
    /// photos not yet re-decided stay withheld (fail closed) with nobody to re-decide
    /// them: this is what says so and how to go on. Cleared when the sweep runs again
    /// and at the next subject change (whose own sweep covers every photo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_stalled: Option<SweepStall>,
    /// Created.
    pub created_at: Millis,
}

impl Project {
    /// The stall of the sweep at the project's current subjects, if it stalled: one of
    /// an older revision is superseded by the current one's sweep.
    pub fn stalled_sweep(&self) -> Option<&SweepStall> {
        self.sweep_stalled
            .as_ref()
            .filter(|s| s.subjects_rev == self.subjects_rev)
    }
}

/// A re-decision sweep that ended without finishing ([`Project::sweep_stalled`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepStall {
    /// The subject revision it was re-deciding the photos at.
    pub subjects_rev: u64,
    /// Its job: resuming that job (`POST /v1/jobs/{id}:resume`) goes on from where it
    /// stopped.
    pub job_id: String,
    /// Why it ended (the part's last error, or who cancelled it).
    pub reason: String,
    /// When it ended.
    pub at: Millis,
    /// Where the part that ended started: the sort key (photo id) of the last photo the
    /// parts before it handled, `None` for the first part. Photos up to it had their
    /// re-decisions submitted, and are not among those it left.
    #[serde(default)]
    pub after: Option<String>,
}

impl SweepStall {
    /// Whether the photo `id` may be among those the sweep did not reach: it sorts after
    /// where the part that ended started.
    pub fn left(&self, id: &str) -> bool {
        self.after.as_deref().is_none_or(|after| id > after)
    }

    /// What a photo the sweep did not reach says of it, and what to do.
    pub fn explain(&self) -> String {
        format!(
            "withheld until it is decided again after the subject change at revision {}, but that re-decision (job {}) ended without finishing: {}; resume it (POST /v1/jobs/{}:resume, or `tessera jobs resume {}`) to publish the photos it did not reach",
            self.subjects_rev, self.job_id, self.reason, self.job_id, self.job_id
        )
    }
}
