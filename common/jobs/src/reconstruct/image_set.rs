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
pub async fn list(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    image_set: &str,
) -> Result<Vec<SourcePhoto>, TaskError> {
    if let Some(id) = datasets::dataset_of_image_set(image_set) {
        let dataset = datasets::dataset(store, tenant, &id.to_string())
            .await
            .map_err(TaskError::from_classified)?;
        let images = datasets::all_images(store, dataset.dataset_id)
            .await
            .map_err(TaskError::from_classified)?;
        return Ok(images
            .iter()
            .map(|i| SourcePhoto {
                name: i.name.clone(),
                key: i.object_key(),
            })
            .collect());
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
