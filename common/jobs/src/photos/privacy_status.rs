//! How far a project's photos are from its current subjects: the counts the API, the
//! console and `tessera projects show` report, one standing per photo so they add up.

use super::project::{PhotoError, load, photos};
use tessera_core::ProjectId;
use tessera_core::photo::Photo;
use tessera_core::ports::StateStore;

/// How far a project's photos are from its current subjects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PrivacyStatus {
    /// The project's subject revision.
    pub subjects_rev: u64,
    /// Photos in the project, refused uploads included (as the list shows them).
    pub photos: u64,
    /// Photos whose files were decided at an older revision or under older rules: they
    /// are being re-decided, and their files are not served meanwhile. A photo never
    /// decided yet is not one of them (it is `processing`).
    pub not_current: u64,
    /// Photos being processed for the first time (uploaded, not yet decided once).
    pub processing: u64,
    /// Photos whose processing failed for good, and uploads ingest refused (listed with
    /// their reason).
    pub failed: u64,
    /// Photos whose files are served now (published, and decided at the current subjects).
    pub published: u64,
    /// The sweep re-deciding the photos at the current subjects, when it ended without
    /// finishing: the `not_current` photos it did not reach wait for it to be resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_stalled: Option<tessera_core::domain::SweepStall>,
}

/// Where one photo stands against its project's subjects, for counting. Exactly one per
/// photo, so the counts add up to the number of photos.
fn standing(ph: &Photo, subjects_rev: u64) -> Standing {
    if ph.servable(subjects_rev) {
        Standing::Published
    } else if ph.failure.is_some() || ph.original_deleted_at.is_some() {
        // An original deleted under retention can never be decided again.
        Standing::Failed
    } else if ph.subjects_rev == 0 && ph.published_at.is_none() && ph.renditions.is_empty() {
        Standing::Processing
    } else if ph.needs_reprocess(subjects_rev) {
        Standing::NotCurrent
    } else {
        // Decided at the current subjects, not yet published again (a regions edit, a
        // reprocess): still being processed.
        Standing::Processing
    }
}

#[derive(Clone, Copy)]
enum Standing {
    Published,
    Failed,
    Processing,
    NotCurrent,
}

/// Count the project's photos against its subject revision.
pub async fn privacy_status(
    store: &dyn StateStore,
    project: ProjectId,
) -> Result<PrivacyStatus, PhotoError> {
    let p = load(store, project).await?;
    let all = photos(store, project).await?;
    // Uploads ingest refused are listed as failed: those with no row are counted the
    // same, and a row whose upload was later refused (its bytes changed after ingest)
    // is withheld for good, not "being processed".
    let rows: std::collections::HashSet<_> = all.iter().map(|ph| ph.id).collect();
    let refusals = tessera_core::catalog::refusals::refusals(store, project).await?;
    let refused_rows: std::collections::HashSet<_> = refusals
        .iter()
        .map(|r| r.photo_id)
        .filter(|id| rows.contains(id))
        .collect();
    let refused = (refusals.len() - refused_rows.len()) as u64;
    let mut tally = [0u64; 4];
    for ph in &all {
        let st = if refused_rows.contains(&ph.id) && !ph.servable(p.subjects_rev) {
            Standing::Failed
        } else {
            standing(ph, p.subjects_rev)
        };
        tally[st as usize] += 1;
    }
    Ok(PrivacyStatus {
        subjects_rev: p.subjects_rev,
        photos: all.len() as u64 + refused,
        not_current: tally[Standing::NotCurrent as usize],
        processing: tally[Standing::Processing as usize],
        failed: tally[Standing::Failed as usize] + refused,
        published: tally[Standing::Published as usize],
        sweep_stalled: p.stalled_sweep().cloned(),
    })
}
