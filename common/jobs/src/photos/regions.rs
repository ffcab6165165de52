//! A photo's manual blur regions: replacing them withholds the photo until it is
//! re-blurred with them (the caller submits that re-blur).

use super::project::PhotoError;
use tessera_core::audit::{self, Actor};
use tessera_core::geometry::FracRect;
use tessera_core::photo::Photo;
use tessera_core::ports::state_store::{Condition, Write};
use tessera_core::weakening;
use tessera_core::{PhotoId, records};
use tessera_engine::Engine;

/// Most manual blur regions one photo keeps (the row must stay a small record).
pub const MAX_BLUR_REGIONS: usize = 200;

/// Replace a photo's manual blur regions (fractions of the stored image), checking
/// each, and unpublish it until it is re-blurred with them; returns the new edit
/// revision. Removing or shrinking a region needs an admin's authority; every change is
/// audited. The files of the unpublished version are deleted at once (see
/// [`super::withdraw`]): a download URL handed out for them stops working now, not when
/// it expires.
pub async fn set_regions(
    engine: &Engine,
    photo: PhotoId,
    regions: &[FracRect],
    actor: &Actor,
) -> Result<u64, PhotoError> {
    if regions.len() > MAX_BLUR_REGIONS {
        return Err(PhotoError::Invalid(format!(
            "regions holds {} blur regions; at most {MAX_BLUR_REGIONS} are kept per photo (merge overlapping ones)",
            regions.len()
        )));
    }
    for (i, r) in regions.iter().enumerate() {
        if let Some(p) = r.problem() {
            return Err(PhotoError::Invalid(format!("blur region {i} {p}")));
        }
    }
    let store = engine.ports().store.as_ref();
    let objects = engine.ports().objects.as_ref();
    let key = records::photo_key(photo);
    // The row changes under a render (every step of it is a write): a conflict means
    // reading it again and deciding again, never an error for the client.
    let mut rounds = 0;
    let (row, rev) = loop {
        let item = store
            .get(&key)
            .await?
            .ok_or_else(|| PhotoError::NotFound(format!("photo {photo} does not exist")))?;
        let row: Photo = records::decode(&item)?;
        let uncovered = weakening::regions_uncovered(&row.blur_regions, regions);
        weakening::authorize(
            actor,
            &format!("replacing the blur regions of photo {photo}"),
            if uncovered > 0 {
                vec![format!(
                    "{uncovered} of its {} blur region(s) would no longer be blurred",
                    row.blur_regions.len()
                )]
            } else {
                Vec::new()
            },
        )?;
        if row.published_at.is_some() {
            // Whoever copied the served version should take it down now. Raised before
            // the write that withholds it, as a render does (the same notice: one
            // delivery however many edits or re-decisions withhold this version).
            engine
                .raise(&[super::notices::unpublished(
                    &row,
                    &actor.tenant,
                    "its blur regions changed",
                )])
                .await?;
        }
        let rev = row.edits_rev + 1;
        let saved = store
            .transact(vec![
                Write::Set {
                    key: key.clone(),
                    fields: vec![
                        (
                            "blur_regions".into(),
                            serde_json::to_value(regions).expect("serializable"),
                        ),
                        ("edits_rev".into(), rev.into()),
                        // Fail closed: the published files lack the new regions, so they
                        // are not served until the photo is re-blurred with them.
                        ("published_at".into(), serde_json::Value::Null),
                    ],
                    condition: Condition::Rev(item.rev),
                },
                audit::entry(
                    actor,
                    "photo.blur_regions",
                    format!("photo/{photo}"),
                    serde_json::json!({
                        "regions": regions.len(), "before": row.blur_regions.len(),
                        "uncovered": uncovered, "edits_rev": rev,
                    }),
                ),
            ])
            .await;
        match saved {
            Ok(()) => break (row, rev),
            Err(e) if e.is_conflict() && rounds < 20 => {
                rounds += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10 * rounds)).await;
            }
            Err(e) if e.is_conflict() => {
                return Err(PhotoError::Invalid(format!(
                    "photo {photo} kept changing while its regions were being saved; try again"
                )));
            }
            Err(e) => return Err(e.into()),
        }
    };
    super::withdraw::delete_files(objects, &row).await?;
    Ok(rev)
}
