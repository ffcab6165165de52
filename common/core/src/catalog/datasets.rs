//! Datasets and their images: the records, their keys, and the rules of registering an
//! image.
//!
//! An image's name is **reserved before any byte is written**, and a name that exists
//! answers a conflict with the existing image's bytes untouched. Its bytes are stored
//! once per distinct content of the dataset ([`super::image_bytes`]): the image record
//! names the content's generation, and a reconstruction of the dataset finds its photos
//! through these records, not by listing objects. Images stored before contents were
//! counted keep their bytes at `datasets/<dataset>/images/<name>`. Every lookup is scoped to the caller's tenant: another tenant's dataset or
//! image does not exist for it.
//!
//! Over 600 lines on purpose: the records, their keys, name reservation and release and
//! the set's digest share the same keys and invariants, and splitting them would put the
//! key formats in two places.

use super::CatalogError;
use crate::Millis;
use crate::ids::{DatasetId, ImageId, ProjectId, TenantId};
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};
use crate::ports::{ObjectStore, StateStore};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Longest dataset or image name.
pub const MAX_NAME: usize = 255;
/// Most images one dataset holds.
pub const MAX_IMAGES: u64 = 10_000;
/// Most datasets one project holds.
pub const MAX_DATASETS: usize = 1_000;

/// A named set of images to reconstruct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    /// Id.
    pub dataset_id: DatasetId,
    /// Owner.
    pub tenant: TenantId,
    /// Project.
    pub project_id: ProjectId,
    /// Name.
    pub name: String,
    /// Where bytes come from (`{"kind": "upload" | "local" | "s3", …}`), as created.
    pub source: Value,
    /// COLMAP camera model.
    pub camera_model: String,
    /// Whether reconstructions turn photos as their EXIF orientation says (datasets
    /// stored before this existed did not: false).
    #[serde(default)]
    pub respect_exif_orientation: bool,
    /// Images registered (the quota counter; stored datasets without it count from 0).
    #[serde(default)]
    pub image_count: u64,
    /// How photos share intrinsics (datasets stored before this existed: shared).
    #[serde(default)]
    pub intrinsics_mode: IntrinsicsMode,
    /// Created, RFC 3339.
    pub created_at: String,
}

/// How a dataset's photos share camera intrinsics (sfmapi's `intrinsics_mode`).
///
/// Image names hold no folders (see [`check_name`]), so a dataset is one folder and
/// `per_folder` shares as `single_camera` does. Photos of different sizes never share
/// one camera: COLMAP would drop every photo whose size differs from the camera's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntrinsicsMode {
    /// One camera for all photos of one size.
    #[default]
    SingleCamera,
    /// One camera per photo.
    PerImage,
    /// One camera per folder of photos.
    PerFolder,
}

impl IntrinsicsMode {
    /// Whether every photo gets its own intrinsics.
    pub fn per_image(self) -> bool {
        self == Self::PerImage
    }
}

fn upload_kind() -> String {
    "upload".into()
}

/// One image of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// Id.
    pub image_id: ImageId,
    /// Dataset.
    pub dataset_id: DatasetId,
    /// Owner.
    pub tenant: TenantId,
    /// File name, unique in the dataset.
    pub name: String,
    /// SHA-256 of the bytes.
    pub content_sha: String,
    /// Size.
    pub byte_size: u64,
    /// Pixels, from the checked header.
    pub width: Option<u64>,
    /// Pixels, from the checked header.
    pub height: Option<u64>,
    /// Why its bytes do not decode as an image, when they do not. sfmapi registers any
    /// bytes a client names as an image; a reconstruction's ingest refuses these by name,
    /// and no thumbnail is made of them. `width` and `height` are then absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// Whether its EXIF carries a position, read at registration (automatic pairs and
    /// georeferencing count them). `None` for images registered before it was read:
    /// counted as without, so a dataset registered then never gets spatial pairs it may
    /// not deserve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gps: Option<bool>,
    /// Where it came from: `upload`, `local` or `s3`.
    #[serde(default = "upload_kind")]
    pub source_kind: String,
    /// Its path below the source's root or prefix (sources other than uploads).
    #[serde(default)]
    pub rel_path: Option<String>,
    /// Which generation of the dataset's content `content_sha` holds its bytes; `None`
    /// for images stored before contents were counted (bytes under their name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_generation: Option<u64>,
    /// Created, RFC 3339.
    pub created_at: String,
}

fn dataset_key(id: DatasetId) -> ItemKey {
    ItemKey::new(format!("DATASET#{id}"), "DATASET")
}
fn image_key(id: ImageId) -> ItemKey {
    ItemKey::new(format!("IMAGE#{id}"), "IMAGE")
}
fn image_name_key(dataset: DatasetId, name: &str) -> ItemKey {
    ItemKey::new(format!("DATASET#{dataset}"), format!("IMAGENAME#{name}"))
}

/// The by-parent partition listing a dataset's images (by name).
pub fn images_partition(dataset: DatasetId) -> String {
    format!("DATASET#{dataset}#IMAGES")
}

/// The by-parent partition listing a project's datasets.
pub fn datasets_partition(project: ProjectId) -> String {
    format!("PROJECT#{project}#DATASETS")
}

/// A dataset's image set as a reconstruction's spec names it (`image_set`). Older
/// images' bytes are under this prefix; newer ones are found through the records.
pub fn images_prefix(dataset: DatasetId) -> String {
    format!("datasets/{dataset}/images")
}

/// The dataset an `image_set` names, if it names one (`datasets/<id>/images` or a bare
/// dataset id).
pub fn dataset_of_image_set(image_set: &str) -> Option<DatasetId> {
    let s = image_set.trim_end_matches('/');
    s.strip_prefix("datasets/")
        .and_then(|r| r.strip_suffix("/images"))
        .unwrap_or(s)
        .parse()
        .ok()
}

impl Image {
    /// Where its bytes are.
    pub fn object_key(&self) -> String {
        match self.content_generation {
            Some(g) => super::image_bytes::object_key(self.dataset_id, &self.content_sha, g),
            None => format!("{}/{}", images_prefix(self.dataset_id), self.name),
        }
    }
}

/// A dataset or image name: 1 to [`MAX_NAME`] bytes, a plain file name (no `/`, `\`,
/// control characters, `.` or `..`), since an image's name is part of its object key.
pub fn check_name(what: &str, name: &str) -> Result<(), CatalogError> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || name == "."
        || name == ".."
        || name.contains(['/', '\\', '#'])
        || name.chars().any(char::is_control)
    {
        return Err(CatalogError::Invalid(format!(
            "{what} name `{}` must be a plain file name of 1 to {MAX_NAME} bytes (no `/`, `\\`, `#`, control characters, `.` or `..`)",
            name.chars().take(100).collect::<String>()
        )));
    }
    Ok(())
}

/// A new dataset's settings.
#[derive(Debug, Clone)]
pub struct NewDataset {
    /// Name.
    pub name: String,
    /// Source (already listed and authorized by the caller).
    pub source: Value,
    /// COLMAP camera model (already checked).
    pub camera_model: String,
    /// Whether reconstructions apply EXIF orientation.
    pub respect_exif_orientation: bool,
    /// How photos share intrinsics.
    pub intrinsics_mode: IntrinsicsMode,
}

/// Create a dataset in `project` (which the caller owns).
pub async fn create(
    store: &dyn StateStore,
    tenant: &TenantId,
    project: ProjectId,
    new: NewDataset,
) -> Result<Dataset, CatalogError> {
    check_name("dataset", &new.name)?;
    let mut q = Query::partition(Index::ByParent, datasets_partition(project), MAX_DATASETS);
    q.limit = MAX_DATASETS;
    if store.query(&q).await?.items.len() >= MAX_DATASETS {
        return Err(CatalogError::Quota(format!(
            "project {project} has {MAX_DATASETS} datasets, the most one project holds; delete one or use another project"
        )));
    }
    let d = Dataset {
        dataset_id: DatasetId::new(),
        tenant: tenant.clone(),
        project_id: project,
        name: new.name,
        source: new.source,
        camera_model: new.camera_model,
        respect_exif_orientation: new.respect_exif_orientation,
        image_count: 0,
        intrinsics_mode: new.intrinsics_mode,
        created_at: Millis::now().to_rfc3339(),
    };
    let mut item = Item::new(
        dataset_key(d.dataset_id),
        serde_json::to_value(&d).expect("serializable"),
    );
    item.by_parent = Some(ItemKey::new(
        datasets_partition(project),
        d.dataset_id.to_string(),
    ));
    store
        .transact(vec![Write::Put {
            item,
            condition: Condition::Absent,
        }])
        .await?;
    Ok(d)
}

/// One of the tenant's datasets.
pub async fn dataset(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<Dataset, CatalogError> {
    Ok(load_dataset(store, tenant, id).await?.0)
}

async fn load_dataset(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<(Dataset, u64), CatalogError> {
    let missing = || {
        CatalogError::NotFound(format!(
            "dataset {} does not exist",
            id.chars().take(80).collect::<String>()
        ))
    };
    let id: DatasetId = id.parse().map_err(|_| missing())?;
    let item = store.get(&dataset_key(id)).await?.ok_or_else(missing)?;
    let d: Dataset = crate::records::decode(&item)?;
    if &d.tenant != tenant {
        return Err(missing());
    }
    Ok((d, item.rev))
}

/// Store a dataset's changed name, camera model or orientation setting.
pub async fn update(store: &dyn StateStore, d: &Dataset) -> Result<(), CatalogError> {
    check_name("dataset", &d.name)?;
    store
        .transact(vec![Write::Set {
            key: dataset_key(d.dataset_id),
            fields: vec![
                ("name".into(), json!(d.name)),
                ("camera_model".into(), json!(d.camera_model)),
                (
                    "respect_exif_orientation".into(),
                    json!(d.respect_exif_orientation),
                ),
                ("intrinsics_mode".into(), json!(d.intrinsics_mode)),
            ],
            condition: Condition::Exists,
        }])
        .await?;
    Ok(())
}

/// What is known of bytes about to be registered (checked by the caller: format,
/// truncation, pixel limits).
#[derive(Debug, Clone)]
pub struct CheckedBytes {
    /// The bytes.
    pub bytes: Bytes,
    /// Their SHA-256, hex.
    pub sha: String,
    /// What the check found.
    pub pixels: Pixels,
    /// Whether their EXIF carries a position.
    pub gps: bool,
}

/// What a check of an image's bytes found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pixels {
    /// Width and height from the checked header.
    Size(u64, u64),
    /// They do not decode (or would not within the pixel limit): why, naming the file.
    Unreadable(String),
}

/// Register `bytes` as the image `name` of `dataset`: the name (and a place under the
/// dataset's image quota) is reserved first, then the bytes are written; if writing
/// fails the reservation is given back. `source` is (`upload`|`local`|`s3`, rel path).
pub async fn register_image(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    dataset: &Dataset,
    name: &str,
    checked: CheckedBytes,
    source: (&str, Option<String>),
) -> Result<Image, CatalogError> {
    check_name("image", name)?;
    let (width, height, unreadable) = match checked.pixels {
        Pixels::Size(w, h) => (Some(w), Some(h), None),
        Pixels::Unreadable(why) => (None, None, Some(why)),
    };
    let mut img = Image {
        image_id: ImageId::new(),
        dataset_id: dataset.dataset_id,
        tenant: dataset.tenant.clone(),
        name: name.to_string(),
        content_sha: checked.sha,
        byte_size: checked.bytes.len() as u64,
        width,
        height,
        unreadable,
        gps: Some(checked.gps),
        source_kind: source.0.to_string(),
        rel_path: source.1,
        content_generation: None,
        created_at: Millis::now().to_rfc3339(),
    };
    super::quotas::check_stored(store, &dataset.tenant, img.byte_size).await?;
    let stale = reserve(store, dataset, &mut img).await?;
    if let Some(g) = stale {
        // The generation before ours was emptied and its deleter may have died: nothing
        // names it any more. A marker in the expiry index has the collector delete it
        // too, should this fail; deleting twice is harmless.
        let _ = objects
            .delete(&super::image_bytes::object_key(
                img.dataset_id,
                &img.content_sha,
                g,
            ))
            .await;
    }
    if let Err(e) = super::image_bytes::store_bytes(
        store,
        objects,
        img.dataset_id,
        &img.content_sha,
        img.content_generation.unwrap_or_default(),
        checked.bytes,
    )
    .await
    {
        let undone = match release(store, objects, &img).await {
            Ok(()) => "the name is free again".to_string(),
            Err(u) => format!("and giving the name back failed too ({u})"),
        };
        return Err(CatalogError::Unavailable(format!(
            "the bytes of `{}` could not be stored ({e}); {undone}; retry",
            img.name
        )));
    }
    Ok(img)
}

/// Write the name record, the image record, the dataset's count and a reference to the
/// image's content in one transaction, conditional on the dataset's and the content's
/// revisions; a concurrent registration in the same dataset makes it read again. Sets
/// the image's content generation, and answers a generation left to delete.
async fn reserve(
    store: &dyn StateStore,
    dataset: &Dataset,
    img: &mut Image,
) -> Result<Option<u64>, CatalogError> {
    for _ in 0..8 {
        let take = super::image_bytes::take(store, img.dataset_id, &img.content_sha).await?;
        img.content_generation = Some(take.generation);
        let mut item = Item::new(
            image_key(img.image_id),
            serde_json::to_value(&*img).expect("serializable"),
        );
        item.by_parent = Some(ItemKey::new(
            images_partition(img.dataset_id),
            img.name.clone(),
        ));
        let (current, rev) =
            load_dataset(store, &dataset.tenant, &dataset.dataset_id.to_string()).await?;
        if current.image_count >= MAX_IMAGES {
            return Err(CatalogError::Quota(format!(
                "dataset {} holds {MAX_IMAGES} images, the most one dataset holds; make another dataset",
                dataset.dataset_id
            )));
        }
        let result = store
            .transact(
                vec![
                    Write::Set {
                        key: dataset_key(img.dataset_id),
                        fields: vec![("image_count".into(), json!(current.image_count + 1))],
                        condition: Condition::Rev(rev),
                    },
                    Write::Put {
                        item: Item::new(
                            image_name_key(img.dataset_id, &img.name),
                            json!({ "image": img.image_id }),
                        ),
                        condition: Condition::Absent,
                    },
                    Write::Put {
                        item,
                        condition: Condition::Absent,
                    },
                    super::quotas::add_stored(&img.tenant, img.byte_size as i64),
                ]
                .into_iter()
                .chain(take.writes)
                .collect(),
            )
            .await;
        match result {
            Ok(_) => return Ok(take.stale),
            Err(crate::ports::StoreError::Conflict { index: 1, .. }) => {
                return Err(name_taken(img));
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CatalogError::Unavailable(format!(
        "dataset {} is busy with other registrations; retry",
        img.dataset_id
    )))
}

fn name_taken(img: &Image) -> CatalogError {
    CatalogError::Conflict(format!(
        "dataset {} has an image named `{}` already; delete it first or use another name",
        img.dataset_id, img.name
    ))
}

/// Remove an image's records, give its place in the quota back and its reference to its
/// content; the last reference's content is deleted with it.
async fn release(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    img: &Image,
) -> Result<(), CatalogError> {
    super::quotas::ensure_usage(store, &img.tenant).await?;
    for _ in 0..8 {
        let (current, rev) = load_dataset(store, &img.tenant, &img.dataset_id.to_string()).await?;
        // An image stored before contents were counted holds no reference.
        let give = match img.content_generation {
            Some(g) => {
                super::image_bytes::give_back(store, img.dataset_id, &img.content_sha, g).await?
            }
            None => None,
        };
        let mut writes = vec![
            Write::Set {
                key: dataset_key(img.dataset_id),
                fields: vec![(
                    "image_count".into(),
                    json!(current.image_count.saturating_sub(1)),
                )],
                condition: Condition::Rev(rev),
            },
            Write::Delete {
                key: image_name_key(img.dataset_id, &img.name),
                condition: Condition::field_eq("image", img.image_id.to_string()),
            },
            Write::Delete {
                key: image_key(img.image_id),
                condition: Condition::Exists,
            },
            super::quotas::add_stored(&img.tenant, -(img.byte_size as i64)),
        ];
        let emptied = give.map(|g| {
            writes.push(g.write);
            g.emptied
        });
        match store.transact(writes).await {
            Ok(_) => {
                if let Some(Some(c)) = emptied {
                    // The records are gone either way: a failure here leaves the
                    // content in the expiry index, and the collector deletes it.
                    let _ = super::image_bytes::collect(store, objects, &c).await;
                }
                return Ok(());
            }
            Err(crate::ports::StoreError::Conflict { index: 0 | 4, .. }) => continue,
            Err(e) if e.is_conflict() => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(CatalogError::Unavailable(format!(
        "dataset {} is busy; retry",
        img.dataset_id
    )))
}

/// One of the tenant's images.
pub async fn image(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<Image, CatalogError> {
    let missing = || {
        CatalogError::NotFound(format!(
            "image {} does not exist",
            id.chars().take(80).collect::<String>()
        ))
    };
    let id: ImageId = id.parse().map_err(|_| missing())?;
    let item = store.get(&image_key(id)).await?.ok_or_else(missing)?;
    let img: Image = crate::records::decode(&item)?;
    if &img.tenant != tenant {
        return Err(missing());
    }
    Ok(img)
}

/// The image of `dataset` named `name`.
pub async fn image_named(
    store: &dyn StateStore,
    dataset: &Dataset,
    name: &str,
) -> Result<Image, CatalogError> {
    let missing = || {
        CatalogError::NotFound(format!(
            "dataset {} has no image `{}`",
            dataset.dataset_id,
            name.chars().take(100).collect::<String>()
        ))
    };
    if check_name("image", name).is_err() {
        return Err(missing());
    }
    let n = store
        .get(&image_name_key(dataset.dataset_id, name))
        .await?
        .ok_or_else(missing)?;
    let id = n.body["image"].as_str().unwrap_or_default();
    image(store, &dataset.tenant, id).await
}

/// Delete an image: its records and its reference to its content, whose bytes go when
/// no other image of the dataset names them. An image stored before contents were
/// counted keeps its bytes under its name, so those go first: released first, the name
/// could be registered again in between and the new bytes deleted with the old.
pub async fn delete_image(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    img: &Image,
) -> Result<(), CatalogError> {
    if img.content_generation.is_none() {
        objects.delete(&img.object_key()).await?;
    }
    release(store, objects, img).await
}

/// A digest of what an image set holds: its images' names and content hashes, in name
/// order. Two reconstructions of a dataset share a job only while this is unchanged.
pub fn image_set_digest(images: &[Image]) -> String {
    digest_of_names(
        images
            .iter()
            .map(|i| (i.name.as_str(), i.content_sha.as_str())),
    )
}

/// [`image_set_digest`] of (name, content SHA-256) pairs, in any order: the same photos
/// have the same digest whether they are a dataset's images or a folder on the CLI.
pub fn digest_of_names<'a>(photos: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    use sha2::{Digest, Sha256};
    let mut sorted: Vec<(&str, &str)> = photos.into_iter().collect();
    sorted.sort_unstable();
    let mut h = Sha256::new();
    for (name, sha) in sorted {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sha.as_bytes());
        h.update([b'\n']);
    }
    hex::encode(h.finalize())
}

/// Every image of a dataset, by name.
pub async fn all_images(
    store: &dyn StateStore,
    dataset: DatasetId,
) -> Result<Vec<Image>, CatalogError> {
    Ok(crate::projects::query_all(
        store,
        Query::partition(Index::ByParent, images_partition(dataset), 500),
    )
    .await?)
}

/// Erase a dataset: its record, every image record and name, its image bytes and
/// thumbnails (`erasure` sweeps again a day later). Reconstructions already made from it
/// are jobs of their own and are not touched.
pub async fn erase(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    dataset: &Dataset,
    actor: &crate::audit::Actor,
) -> Result<super::erasure::Swept, CatalogError> {
    use super::erasure::{self, Erasure};
    let id = dataset.dataset_id;
    super::quotas::ensure_usage(store, &dataset.tenant).await?;
    let e = Erasure {
        target: format!("dataset/{id}"),
        prefixes: vec![
            format!("{}/", images_prefix(id)),
            super::image_bytes::contents_prefix(id),
            format!("thumbnails/{id}/"),
        ],
        partitions: vec![
            ("by_parent".into(), images_partition(id)),
            (
                "by_parent".into(),
                super::image_bytes::contents_partition(id),
            ),
            ("table".into(), format!("DATASET#{id}")),
        ],
        erased_at: Millis::now(),
        swept: false,
    };
    store
        .transact(vec![
            Write::Delete {
                key: dataset_key(id),
                condition: Condition::Exists,
            },
            erasure::marker(&e),
            crate::audit::entry(
                actor,
                "dataset.erase",
                e.target.clone(),
                json!({ "name": dataset.name, "images": dataset.image_count }),
            ),
        ])
        .await
        .map_err(|err| {
            if err.is_conflict() {
                CatalogError::NotFound(format!("dataset {id} does not exist"))
            } else {
                err.into()
            }
        })?;
    // Image records go a page at a time, each page with its bytes off the tenant's
    // counter in the same transaction: an image deleted meanwhile is never counted off
    // twice (its record's `Exists` condition fails and the page is read again).
    loop {
        let page = store
            .query(&Query::partition(Index::ByParent, images_partition(id), 10))
            .await?;
        if page.items.is_empty() {
            break;
        }
        let mut writes = Vec::new();
        let mut freed = 0i64;
        for item in &page.items {
            let img: Image = crate::records::decode(item)?;
            freed += img.byte_size as i64;
            writes.push(Write::Delete {
                key: image_key(img.image_id),
                condition: Condition::Exists,
            });
            writes.push(Write::Delete {
                key: image_name_key(id, &img.name),
                condition: Condition::None,
            });
        }
        writes.push(super::quotas::add_stored(&dataset.tenant, -freed));
        match store.transact(writes).await {
            Err(err) if err.is_conflict() => continue,
            other => other?,
        }
    }
    erasure::sweep(store, objects, &e).await
}
