//! Making a photo's files unreachable the moment it stops being published.
//!
//! Files are read two ways: through the API, which checks on every read that the photo
//! is servable now, and through presigned download URLs (on S3), which cannot be
//! revoked once handed out. So:
//! - an explicit unpublish (blur regions changed, the upload's bytes changed) deletes
//!   the files of the unpublished version as soon as the unpublish is committed; a URL
//!   for them then answers 404 at once. The row may keep pointing at them: it is
//!   unpublished, and the next version is rendered from the upload, never from them;
//! - a download URL lives [`DOWNLOAD_URL_LIFETIME`]. It is handed out only while the
//!   photo is servable, and an opt-out makes every photo of the project unservable in
//!   the transaction that records it, so a URL issued before an opt-out outlives it by
//!   at most that long, while the sweep re-blurs the photo and its cleanup deletes the
//!   old files. One minute is enough for a client that fetches what it was just given
//!   (URLs are for fetching now, not for keeping), and short enough that a URL copied
//!   into a page or a log is dead before anyone else can use it.

use super::project::PhotoError;
use std::time::Duration;
use tessera_core::photo::Photo;
use tessera_core::ports::ObjectStore;

/// How long a presigned download URL of a published file is valid.
pub const DOWNLOAD_URL_LIFETIME: Duration = Duration::from_secs(60);

/// Delete every file the row's renditions point at (never the upload or its
/// thumbnail). Idempotent: deleting a missing object succeeds.
pub async fn delete_files(objects: &dyn ObjectStore, row: &Photo) -> Result<usize, PhotoError> {
    let mut deleted = 0;
    for r in &row.renditions {
        for key in [&r.key, &r.thumb_key] {
            if !row.is_protected(key) {
                objects.delete(key).await?;
                deleted += 1;
            }
        }
    }
    tracing::info!(photo = %row.id, deleted, "files of the unpublished version deleted");
    Ok(deleted)
}
