//! Datasets (`upload` sources) and their images. An image is created from a finalized
//! upload's blob and stored under the dataset's prefix, which is what a reconstruction
//! of the dataset reads.

use super::{Paging, links};
use crate::ApiState;
use crate::auth::Caller;
use crate::bytes as served;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tessera_core::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};
use tessera_core::{Millis, TenantId, records};

/// Most images in one `:batchCreate`.
pub const MAX_BATCH: usize = 1000;

/// A dataset.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dataset {
    /// Id.
    pub dataset_id: String,
    /// Owner.
    pub tenant: TenantId,
    /// Project.
    pub project_id: String,
    /// Name.
    pub name: String,
    /// Where bytes come from (`{"kind": "upload"}`).
    pub source: Value,
    /// COLMAP camera model.
    pub camera_model: String,
    /// Whether reconstructions turn photos as their EXIF orientation says (datasets
    /// stored before this existed did not: false).
    #[serde(default)]
    pub respect_exif_orientation: bool,
    /// Created.
    pub created_at: String,
}

fn upload_kind() -> String {
    "upload".into()
}

/// An image of a dataset.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Image {
    /// Id.
    pub image_id: String,
    /// Dataset.
    pub dataset_id: String,
    /// Owner.
    pub tenant: TenantId,
    /// File name, unique in the dataset.
    pub name: String,
    /// SHA-256 of the bytes.
    pub content_sha: String,
    /// Size.
    pub byte_size: u64,
    /// From the header.
    pub width: Option<u64>,
    /// From the header.
    pub height: Option<u64>,
    /// Where it came from: `upload`, `local` or `s3`.
    #[serde(default = "upload_kind")]
    pub source_kind: String,
    /// Its path below the source's root or prefix (sources other than uploads).
    #[serde(default)]
    pub rel_path: Option<String>,
    /// Created.
    pub created_at: String,
}

fn dataset_key(id: &str) -> ItemKey {
    ItemKey::new(format!("DATASET#{id}"), "DATASET")
}
fn image_key(id: &str) -> ItemKey {
    ItemKey::new(format!("IMAGE#{id}"), "IMAGE")
}
fn image_name_key(dataset: &str, name: &str) -> ItemKey {
    ItemKey::new(format!("DATASET#{dataset}"), format!("IMAGENAME#{name}"))
}
fn images_partition(dataset: &str) -> String {
    format!("DATASET#{dataset}#IMAGES")
}

/// Object-store prefix of a dataset's images (a reconstruction's `image_set`).
pub fn images_prefix(dataset: &str) -> String {
    format!("datasets/{dataset}/images")
}

fn dataset_view(d: &Dataset) -> Value {
    let href = format!("/v1/projects/{}/datasets/{}", d.project_id, d.dataset_id);
    json!({
        "dataset_id": d.dataset_id, "tenant_id": d.tenant, "project_id": d.project_id, "name": d.name,
        "source": d.source, "camera_model": d.camera_model, "intrinsics_mode": "single_camera",
        "is_spherical": false, "respect_exif_orientation": d.respect_exif_orientation, "created_at": d.created_at,
        "_links": links(&href, &[("images", format!("/v1/datasets/{}/images", d.dataset_id))]),
    })
}

fn image_view(i: &Image) -> Value {
    let href = format!("/v1/images/{}", i.image_id);
    json!({
        "image_id": i.image_id, "dataset_id": i.dataset_id, "name": i.name, "content_sha": i.content_sha,
        "source_kind": i.source_kind, "rel_path": i.rel_path, "byte_size": i.byte_size, "width": i.width, "height": i.height,
        "created_at": i.created_at,
        "_links": links(&href, &[("bytes", format!("{href}/bytes"))]),
    })
}

/// The body of a dataset create request.
#[derive(Debug, Deserialize)]
pub struct CreateDataset {
    /// Name.
    pub name: String,
    /// Source; only `{"kind": "upload"}` here.
    #[serde(default)]
    pub source: Option<Value>,
    /// Camera model (default `SIMPLE_RADIAL`).
    #[serde(default)]
    pub camera_model: Option<String>,
    /// Turn photos as their EXIF orientation says before reconstruction (default true:
    /// what every viewer shows, and what phones need).
    #[serde(default)]
    pub respect_exif_orientation: Option<bool>,
}

/// A dataset of the caller's tenant, or 404.
pub async fn owned(s: &ApiState, caller: &Caller, id: &str) -> Result<Dataset, Problem> {
    let item = s.engine.ports().store.get(&dataset_key(id)).await?;
    let d: Dataset = match item {
        Some(i) => records::decode(&i)?,
        None => return Err(Problem::not_found(format!("dataset {id} does not exist"))),
    };
    if d.tenant != caller.tenant {
        return Err(Problem::not_found(format!("dataset {id} does not exist")));
    }
    Ok(d)
}

/// `POST /v1/projects/{pid}/datasets`.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<CreateDataset>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"name\": …, \"source\": {{\"kind\": \"upload\"}}}}: {e}"
        ))
    })?;
    let source = body.source.unwrap_or_else(|| json!({ "kind": "upload" }));
    let import = match source["kind"].as_str() {
        Some("upload") => None,
        Some(k @ ("local" | "s3")) => {
            let Some(src) = s.sources.get(k).cloned() else {
                let mut p = Problem::new(
                    StatusCode::NOT_IMPLEMENTED,
                    "capability_unavailable",
                    format!("`{k}` dataset sources are not offered by this server; use `upload`"),
                );
                p.extra
                    .insert("capability".into(), format!("sources.{k}").into());
                return Err(p);
            };
            // Listed before the dataset exists, so a bad source creates nothing.
            let files = src.list(&caller.tenant, &source).await?;
            if files.is_empty() {
                return Err(Problem::validation(format!(
                    "the `{k}` source holds no images (.jpg, .jpeg, .png, .tif, .tiff, .webp)"
                )));
            }
            if files.len() > crate::sources::MAX_SOURCE_FILES {
                return Err(Problem::validation(format!(
                    "the `{k}` source holds more than {} images; split it into several datasets",
                    crate::sources::MAX_SOURCE_FILES
                )));
            }
            Some((src, files))
        }
        _ => {
            return Err(Problem::validation(
                "source.kind must be `upload`, `local` or `s3`",
            ));
        }
    };
    let camera_model = body.camera_model.unwrap_or_else(|| "SIMPLE_RADIAL".into());
    if serde_json::from_value::<tessera_core::camera::CameraModel>(json!(camera_model)).is_err() {
        return Err(Problem::validation(format!(
            "camera_model `{camera_model}` is not a COLMAP camera model"
        )));
    }
    let d = Dataset {
        dataset_id: ulid::Ulid::new().to_string(),
        tenant: caller.tenant.clone(),
        project_id: project.id.to_string(),
        name: body.name,
        source,
        camera_model,
        respect_exif_orientation: body.respect_exif_orientation.unwrap_or(true),
        created_at: Millis::now().to_rfc3339(),
    };
    let mut item = Item::new(
        dataset_key(&d.dataset_id),
        serde_json::to_value(&d).expect("serializable"),
    );
    item.by_parent = Some(ItemKey::new(
        format!("PROJECT#{}#DATASETS", d.project_id),
        d.dataset_id.clone(),
    ));
    s.engine
        .ports()
        .store
        .transact(vec![Write::Put {
            item,
            condition: Condition::Absent,
        }])
        .await?;
    let mut view = dataset_view(&d);
    if let Some((src, files)) = import {
        view["x-import"] = import_source(&s, &caller, &d, src.as_ref(), &files).await?;
    }
    let mut r = (StatusCode::CREATED, Json(view)).into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!(
            "/v1/projects/{}/datasets/{}",
            d.project_id, d.dataset_id
        ))
        .expect("ascii"),
    );
    Ok(r)
}

/// `GET /v1/projects/{pid}/datasets`.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    QueryParams(paging): QueryParams<Paging>,
) -> Result<Json<Value>, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    super::page_of(
        &s,
        format!("PROJECT#{}#DATASETS", project.id),
        &paging,
        dataset_view,
    )
    .await
}

/// `GET /v1/projects/{pid}/datasets/{did}`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, did)): Path<(String, String)>,
) -> Result<Json<Value>, Problem> {
    let d = owned(&s, &caller, &did).await?;
    if d.project_id != pid {
        return Err(Problem::not_found(format!(
            "dataset {did} is not in project {pid}"
        )));
    }
    Ok(Json(dataset_view(&d)))
}

/// The body of a dataset PATCH.
#[derive(Debug, Deserialize)]
pub struct PatchDataset {
    /// New name.
    #[serde(default)]
    pub name: Option<String>,
    /// New camera model (for stages run after the change).
    #[serde(default)]
    pub camera_model: Option<String>,
    /// Whether later reconstructions apply EXIF orientation.
    #[serde(default)]
    pub respect_exif_orientation: Option<bool>,
}

/// `PATCH /v1/projects/{pid}/datasets/{did}`: name and camera model; the source is
/// immutable (make a new dataset to read bytes from elsewhere).
pub async fn patch(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, did)): Path<(String, String)>,
    body: Result<Json<PatchDataset>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let mut d = owned(&s, &caller, &did).await?;
    if d.project_id != pid {
        return Err(Problem::not_found(format!(
            "dataset {did} is not in project {pid}"
        )));
    }
    let Json(b) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"name\"?, \"camera_model\"?}}: {e}"
        ))
    })?;
    if let Some(n) = b.name {
        if n.trim().is_empty() {
            return Err(Problem::validation("name must not be empty"));
        }
        d.name = n;
    }
    if let Some(m) = b.camera_model {
        if serde_json::from_value::<tessera_core::camera::CameraModel>(json!(m)).is_err() {
            return Err(Problem::validation(format!(
                "camera_model `{m}` is not a COLMAP camera model"
            )));
        }
        d.camera_model = m;
    }
    if let Some(r) = b.respect_exif_orientation {
        d.respect_exif_orientation = r;
    }
    s.engine
        .ports()
        .store
        .transact(vec![Write::Set {
            key: dataset_key(&d.dataset_id),
            fields: vec![
                ("name".into(), json!(d.name)),
                ("camera_model".into(), json!(d.camera_model)),
                (
                    "respect_exif_orientation".into(),
                    json!(d.respect_exif_orientation),
                ),
            ],
            condition: Condition::Exists,
        }])
        .await?;
    Ok(Json(dataset_view(&d)))
}

/// One image to create.
#[derive(Debug, Deserialize)]
pub struct CreateImage {
    /// File name, unique in the dataset.
    pub name: String,
    /// A finalized upload's blob.
    pub blob_sha: String,
}

async fn create_one(
    s: &ApiState,
    caller: &Caller,
    d: &Dataset,
    req: &CreateImage,
) -> Result<Image, Problem> {
    check_name(&req.name)?;
    let bytes = super::uploads::read_blob(
        s,
        &caller.tenant,
        "blob_sha",
        &req.blob_sha,
        crate::sources::MAX_SOURCE_FILE,
    )
    .await?;
    register(
        s,
        caller,
        d,
        &req.name,
        bytes,
        req.blob_sha.to_ascii_lowercase(),
        ("upload", None),
    )
    .await
}

/// Longest image name: a file name on every file system, and far inside a store key.
const MAX_IMAGE_NAME: usize = 255;

fn check_name(name: &str) -> Result<(), Problem> {
    if name.is_empty()
        || name.len() > MAX_IMAGE_NAME
        || name.contains('/')
        || tessera_core::ports::object_store::validate_key(name).is_err()
    {
        return Err(Problem::validation(format!(
            "image name `{}` must be a plain file name of at most {MAX_IMAGE_NAME} bytes (no `/`, `\\`, control characters, `.` or `..`)",
            name.chars().take(100).collect::<String>()
        )));
    }
    Ok(())
}

/// Register bytes as an image of `d`: the header must be readable, the name unique in
/// the dataset; the bytes go where the stages read them.
async fn register(
    s: &ApiState,
    caller: &Caller,
    d: &Dataset,
    name: &str,
    bytes: ::bytes::Bytes,
    content_sha: String,
    (source_kind, rel_path): (&str, Option<String>),
) -> Result<Image, Problem> {
    check_name(name)?;
    let objects = s.engine.ports().objects.clone();
    // The same checks ingest makes (format, damaged header, truncation, a pixel bomb's
    // dimensions), so that no image is registered that a stage would choke on.
    let (width, height) =
        tessera_imaging::check::check(name, &bytes, tessera_jobs::reconstruct::images::MAX_PIXELS)
            .map(|(w, h)| (Some(w), Some(h)))
            .map_err(Problem::validation)?;
    let img = Image {
        image_id: ulid::Ulid::new().to_string(),
        dataset_id: d.dataset_id.clone(),
        tenant: caller.tenant.clone(),
        name: name.to_string(),
        content_sha,
        byte_size: bytes.len() as u64,
        width,
        height,
        source_kind: source_kind.to_string(),
        rel_path,
        created_at: Millis::now().to_rfc3339(),
    };
    // The name is reserved before any byte is written: a name that exists answers 409
    // with the existing image's bytes untouched (writing first would let a re-post, or
    // two source files folding to one name, replace what an existing image serves).
    let mut item = Item::new(
        image_key(&img.image_id),
        serde_json::to_value(&img).expect("serializable"),
    );
    item.by_parent = Some(ItemKey::new(
        images_partition(&d.dataset_id),
        img.name.clone(),
    ));
    let store = s.engine.ports().store.clone();
    store
        .transact(vec![
            Write::Put {
                item: Item::new(
                    image_name_key(&d.dataset_id, &img.name),
                    json!({ "image": img.image_id }),
                ),
                condition: Condition::Absent,
            },
            Write::Put {
                item,
                condition: Condition::Absent,
            },
        ])
        .await
        .map_err(|e| {
            if e.is_conflict() {
                Problem::conflict(format!(
                    "dataset {} has an image named `{}` already; delete it first or use another name",
                    d.dataset_id, img.name
                ))
            } else {
                e.into()
            }
        })?;
    if let Err(e) = objects
        .put(
            &format!("{}/{}", images_prefix(&d.dataset_id), img.name),
            bytes,
        )
        .await
    {
        // Give the name back, so the client can simply retry.
        let undo = store
            .transact(vec![
                Write::Delete {
                    key: image_name_key(&d.dataset_id, &img.name),
                    condition: Condition::None,
                },
                Write::Delete {
                    key: image_key(&img.image_id),
                    condition: Condition::None,
                },
            ])
            .await;
        tracing::warn!(dataset = %d.dataset_id, image = %img.image_id, error = %e, undone = undo.is_ok(), "image bytes not stored");
        return Err(Problem::unavailable(format!(
            "the bytes of `{}` could not be stored ({e}); retry",
            img.name
        )));
    }
    Ok(img)
}

/// Register every file of a source as an image of `d`. A file that is too large, not an
/// image or unreadable is skipped and reported; the rest are registered.
async fn import_source(
    s: &ApiState,
    caller: &Caller,
    d: &Dataset,
    src: &dyn crate::sources::ImageSource,
    files: &[crate::sources::SourceFile],
) -> Result<Value, Problem> {
    use sha2::{Digest, Sha256};
    let mut registered = 0;
    let mut skipped = Vec::new();
    for f in files {
        if f.size > crate::sources::MAX_SOURCE_FILE {
            skipped.push(json!({"rel_path": f.rel_path, "reason": format!("{} bytes is over the {}-byte limit", f.size, crate::sources::MAX_SOURCE_FILE)}));
            continue;
        }
        // Names are unique plain file names: a nested path's folders join with `_`.
        let name = f.rel_path.replace('/', "_");
        let outcome = match src.read(&caller.tenant, &d.source, &f.rel_path).await {
            Ok(bytes) => {
                let sha = hex::encode(Sha256::digest(&bytes));
                register(
                    s,
                    caller,
                    d,
                    &name,
                    bytes,
                    sha,
                    (src.kind(), Some(f.rel_path.clone())),
                )
                .await
            }
            Err(p) => Err(p),
        };
        match outcome {
            Ok(_) => registered += 1,
            Err(p) if p.status.is_client_error() => {
                skipped.push(json!({"rel_path": f.rel_path, "reason": p.detail}));
            }
            Err(p) => return Err(p),
        }
    }
    tracing::info!(dataset = %d.dataset_id, kind = src.kind(), registered, skipped = skipped.len(), "source imported");
    Ok(json!({ "registered": registered, "skipped": skipped }))
}

/// `POST /v1/datasets/{did}/images`.
pub async fn create_images(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
    body: Result<Json<CreateImage>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let d = owned(&s, &caller, &did).await?;
    let Json(req) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"name\": …, \"blob_sha\": …}}: {e}"
        ))
    })?;
    let img = create_one(&s, &caller, &d, &req).await?;
    let mut r = (StatusCode::CREATED, Json(image_view(&img))).into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/images/{}", img.image_id)).expect("ascii"),
    );
    Ok(r)
}

/// The body of `:batchCreate` (AIP-231).
#[derive(Debug, Deserialize)]
pub struct BatchCreate {
    /// The images.
    pub requests: Vec<CreateImage>,
}

/// `POST /v1/datasets/{did}/{action}`: `images:batchCreate`, or a stage
/// (`features`, `matches`, `verify`), which share the routed path.
pub async fn post_action(
    State(s): State<ApiState>,
    caller: Caller,
    Path((did, action)): Path<(String, String)>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let Json(body) =
        body.map_err(|e| Problem::bad_request(format!("the body must be JSON: {e}")))?;
    match action.as_str() {
        "images:batchCreate" => {
            let req: BatchCreate = serde_json::from_value(body).map_err(|e| {
                Problem::bad_request(format!("the body must be {{\"requests\": [...]}}: {e}"))
            })?;
            batch_create(&s, &caller, &did, req).await
        }
        "features" | "matches" | "verify" => {
            let req = serde_json::from_value(body)
                .map_err(|e| Problem::bad_request(format!("stage request: {e}")))?;
            super::pipelines::stage(&s, &caller, &did, &action, req).await
        }
        "similarity:build" => Err(super::optional::similarity_build(&s, &caller, &did).await),
        other => Err(Problem::not_found(format!(
            "no route POST /v1/datasets/{did}/{other}"
        ))),
    }
}

async fn batch_create(
    s: &ApiState,
    caller: &Caller,
    did: &str,
    req: BatchCreate,
) -> Result<Response, Problem> {
    let d = owned(s, caller, did).await?;
    if req.requests.is_empty() || req.requests.len() > MAX_BATCH {
        return Err(Problem::validation(format!(
            "a batch holds 1 to {MAX_BATCH} images, this one {}",
            req.requests.len()
        )));
    }
    let mut out = Vec::new();
    for r in &req.requests {
        out.push(image_view(&create_one(s, caller, &d, r).await?));
    }
    Ok((StatusCode::CREATED, Json(json!({ "images": out }))).into_response())
}

/// Every image of a dataset (for planning).
pub async fn all_images(s: &ApiState, dataset: &str) -> Result<Vec<Image>, Problem> {
    Ok(tessera_core::projects::query_all(
        s.engine.ports().store.as_ref(),
        Query::partition(Index::ByParent, images_partition(dataset), 500),
    )
    .await?)
}

/// `GET /v1/datasets/{did}/images`.
pub async fn list_images(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
    QueryParams(paging): QueryParams<Paging>,
) -> Result<Json<Value>, Problem> {
    let d = owned(&s, &caller, &did).await?;
    super::page_of(&s, images_partition(&d.dataset_id), &paging, image_view).await
}

/// `DELETE /v1/datasets/{did}/images/{name}`.
pub async fn delete_image(
    State(s): State<ApiState>,
    caller: Caller,
    Path((did, name)): Path<(String, String)>,
) -> Result<StatusCode, Problem> {
    let d = owned(&s, &caller, &did).await?;
    let store = s.engine.ports().store.clone();
    let Some(n) = store.get(&image_name_key(&d.dataset_id, &name)).await? else {
        return Err(Problem::not_found(format!(
            "dataset {did} has no image `{name}`"
        )));
    };
    let id = n.body["image"].as_str().unwrap_or_default().to_string();
    store
        .transact(vec![
            Write::Delete {
                key: image_name_key(&d.dataset_id, &name),
                condition: Condition::Exists,
            },
            Write::Delete {
                key: image_key(&id),
                condition: Condition::None,
            },
        ])
        .await?;
    s.engine
        .ports()
        .objects
        .delete(&format!("{}/{name}", images_prefix(&d.dataset_id)))
        .await
        .map_err(Problem::internal)?;
    Ok(StatusCode::NO_CONTENT)
}

fn image_object_key(img: &Image) -> String {
    format!("{}/{}", images_prefix(&img.dataset_id), img.name)
}

fn object_problem(img: &Image, e: tessera_core::ports::ObjectStoreError) -> Problem {
    match e {
        // Reserved, bytes not written yet (or being taken back).
        tessera_core::ports::ObjectStoreError::NotFound(_) => Problem::unavailable(format!(
            "the bytes of image {} are not stored yet; retry",
            img.image_id
        )),
        other => Problem::internal(other),
    }
}

/// The stored bytes of an image.
async fn image_object(s: &ApiState, img: &Image) -> Result<::bytes::Bytes, Problem> {
    s.engine
        .ports()
        .objects
        .get(&image_object_key(img))
        .await
        .map_err(|e| object_problem(img, e))
}

pub(crate) async fn owned_image(s: &ApiState, caller: &Caller, id: &str) -> Result<Image, Problem> {
    let missing = || Problem::not_found(format!("image {id} does not exist"));
    let item = s
        .engine
        .ports()
        .store
        .get(&image_key(id))
        .await?
        .ok_or_else(missing)?;
    let img: Image = records::decode(&item)?;
    if img.tenant != caller.tenant {
        return Err(missing());
    }
    Ok(img)
}

/// `GET /v1/images/{id}`.
pub async fn get_image(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    Ok(Json(image_view(&owned_image(&s, &caller, &id).await?)))
}

/// `GET /v1/images/{id}/bytes` (Range, ETag, 304).
pub async fn image_bytes(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    let ct = match img
        .name
        .rsplit('.')
        .next()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => "image/png",
        Some("webp") => "image/webp",
        Some("tif" | "tiff") => "image/tiff",
        _ => "image/jpeg",
    };
    served::serve_object(
        &headers,
        s.engine.ports().objects.as_ref(),
        &image_object_key(&img),
        ct,
        &img.content_sha,
    )
    .await
    .map_err(|e| object_problem(&img, e))
}

/// `?size=N` for thumbnails.
#[derive(Debug, Deserialize, Default)]
pub struct ThumbSize {
    /// Longest side in pixels (16..=1024, default 256).
    pub size: Option<String>,
}

/// The thumbnail sizes made and kept; any other size is scaled from the next larger one,
/// so a client walking through every size cannot make the server decode (and store) the
/// original a thousand times.
const KEPT_THUMBNAILS: [u32; 5] = [64, 128, 256, 512, 1024];

/// Pixels (in megapixels) of originals being decoded for thumbnails at once: one
/// 120-megapixel photo, or many small ones, never several huge ones together.
fn thumbnail_budget() -> &'static tokio::sync::Semaphore {
    static BUDGET: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    BUDGET.get_or_init(|| {
        tokio::sync::Semaphore::new((tessera_imaging::decode::MAX_PIXELS / 1_000_000) as usize)
    })
}

/// A JPEG of `img` whose longest side is `size`, upright (EXIF orientation applied).
fn scaled_jpeg(img: &image::RgbImage, size: u32) -> Result<Vec<u8>, String> {
    let small = image::DynamicImage::ImageRgb8(img.clone())
        .thumbnail(size, size)
        .to_rgb8();
    tessera_imaging::encode::jpeg(&small, None, None).map_err(|r| r.0)
}

/// `GET /v1/images/{id}/thumbnail?size=N`: a JPEG, upright.
pub async fn thumbnail(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<ThumbSize>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    let size: u32 = match q.size.as_deref() {
        None => 256,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| (16..=1024).contains(n))
            .ok_or_else(|| {
                Problem::validation(format!(
                    "size `{}` must be a number of pixels in 16..=1024",
                    v.chars().take(40).collect::<String>()
                ))
            })?,
    };
    let kept = *KEPT_THUMBNAILS
        .iter()
        .find(|k| **k >= size)
        .expect("1024 is the largest size");
    let objects = s.engine.ports().objects.clone();
    let key = format!(
        "thumbnails/{}/{}/{kept}.jpg",
        img.dataset_id, img.content_sha
    );
    let body = match objects.get(&key).await {
        Ok(b) => b,
        Err(_) => {
            let megapixels = img
                .width
                .zip(img.height)
                .map_or(1, |(w, h)| (w * h).div_ceil(1_000_000))
                .clamp(1, tessera_imaging::decode::MAX_PIXELS / 1_000_000);
            let _decoding = thumbnail_budget()
                .acquire_many(megapixels as u32)
                .await
                .map_err(Problem::internal)?;
            let src = image_object(&s, &img).await?;
            let name = img.name.clone();
            let jpeg = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
                let decoded = tessera_imaging::decode(&name, &src).map_err(|r| r.0)?;
                scaled_jpeg(&decoded.rgb, kept)
            })
            .await
            .map_err(Problem::internal)?
            .map_err(|e| Problem::validation(format!("image {id} has no thumbnail: {e}")))?;
            let b = ::bytes::Bytes::from(jpeg);
            let _ = objects.put_if_absent(&key, b.clone()).await;
            b
        }
    };
    let body = if kept == size {
        body
    } else {
        let jpeg = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
            let kept = image::load_from_memory_with_format(&body, image::ImageFormat::Jpeg)
                .map_err(|e| e.to_string())?
                .to_rgb8();
            scaled_jpeg(&kept, size)
        })
        .await
        .map_err(Problem::internal)?
        .map_err(Problem::internal)?;
        ::bytes::Bytes::from(jpeg)
    };
    Ok(served::serve(&headers, body, "image/jpeg", None))
}

/// How much of an image the EXIF route reads: EXIF sits near the start of a JPEG (APP1,
/// at most 64 KiB) and of most other files; reading the whole image for it would let one
/// request cost the image's size in memory.
const EXIF_READ: u64 = 1 << 20;

/// `GET /v1/images/{id}/exif`: every EXIF field as text (empty when there is none or it
/// is unreadable).
pub async fn exif(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    let b = s
        .engine
        .ports()
        .objects
        .get_range(&image_object_key(&img), 0..img.byte_size.min(EXIF_READ))
        .await
        .map_err(|e| object_problem(&img, e))?;
    let mut fields = serde_json::Map::new();
    if let Ok(e) = exif::Reader::new().read_from_container(&mut std::io::Cursor::new(&b[..])) {
        for f in e.fields().filter(|f| f.ifd_num == exif::In::PRIMARY) {
            fields.insert(
                f.tag.to_string(),
                f.display_value().with_unit(&e).to_string().into(),
            );
        }
    }
    Ok(Json(json!({ "image_id": img.image_id, "exif": fields })))
}
