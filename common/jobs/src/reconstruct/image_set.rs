//! Where a run's photos are: a dataset's images, found through its catalog records (their
//! bytes are stored once per distinct content, so names are not object keys), or every
//! object under a prefix (a folder the CLI uploaded).

use tessera_core::TenantId;
use tessera_core::catalog::datasets;
use tessera_core::ports::{ObjectStore, StateStore};
use tessera_engine::TaskError;

/// One photo of an image set: its name and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePhoto {
    /// File name (what the model and the report call it).
    pub name: String,
    /// Object key of its bytes.
    pub key: String,
}

/// The photos of `image_set`, by name. A dataset is read as its owner `tenant` sees it:
/// another tenant's dataset, or one erased since the run was asked for, is a permanent
/// error that names it.
///
/// `digest` is the spec's `image_set_digest`, the set the run was asked for (its
/// fingerprint covers it). A dataset's images are listed through an index that
/// DynamoDB answers eventually consistently, so an image registered just before the
/// run was asked for may be missing from the listing for a moment; an image registered
/// or deleted since changes the set for good. Either way the run must not map another
/// set under this fingerprint: a listing whose digest differs is a transient error
/// (retried with back-off while the index settles), and a set that stays changed ends
/// the run with that reason once its attempts are spent.
pub async fn list(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    image_set: &str,
    digest: Option<&str>,
) -> Result<Vec<SourcePhoto>, TaskError> {
    if let Some(id) = datasets::dataset_of_image_set(image_set) {
        let dataset = datasets::dataset(store, tenant, &id.to_string())
            .await
            .map_err(TaskError::from_classified)?;
        let images = datasets::all_images(store, dataset.dataset_id)
            .await
            .map_err(TaskError::from_classified)?;
        if let Some(asked) = digest {
            let listed = datasets::image_set_digest(&images);
            if listed != asked {
                return Err(TaskError::transient(format!(
                    "dataset {id} now lists {} images whose digest {} is not the {} the run was asked for: an image was registered or deleted since (or the catalog's index has not caught up yet); submit the run again over the dataset as it is now",
                    images.len(),
                    &listed[..12],
                    &asked[..asked.len().min(12)],
                )));
            }
        }
        return Ok(images
            .iter()
            .map(|i| SourcePhoto {
                name: i.name.clone(),
                key: i.object_key(),
            })
            .collect());
    }
    // Under `datasets/` only a dataset's own image set is read, through its records: a
    // prefix listing there would read its content blobs, or another dataset's.
    if image_set.starts_with("datasets/") {
        return Err(TaskError::permanent(format!(
            "image set `{image_set}` names no dataset's images; use `datasets/<dataset id>/images`"
        )));
    }
    let prefix = format!("{}/", image_set.trim_end_matches('/'));
    let mut photos = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = objects.list(&prefix, after.as_deref(), 1000).await?;
        photos.extend(page.into_iter().map(|m| SourcePhoto {
            name: m.key.rsplit('/').next().unwrap_or(&m.key).to_string(),
            key: m.key,
        }));
        match next {
            Some(n) => after = Some(n),
            None => return Ok(photos),
        }
    }
}
