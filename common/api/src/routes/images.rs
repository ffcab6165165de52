//! A dataset's images over HTTP, translated to and from `tessera_core::catalog::datasets`
//! (records, name reservation, quotas). Bytes come from a finalized upload's blob or from
//! a dataset's source (`local`, `s3`), and are checked with the check a reconstruction's
//! ingest applies; what a client names as an image is registered even when it does not
//! decode (sfmapi), saying why.

use super::datasets::owned;
use super::{Paging, links};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tessera_core::catalog::datasets::{self as catalog, CheckedBytes, Dataset, Image, Pixels};

/// Most images in one `:batchCreate`.
pub const MAX_BATCH: usize = 1000;

fn image_view(i: &Image) -> Value {
    let href = format!("/v1/images/{}", i.image_id);
    json!({
        "image_id": i.image_id, "dataset_id": i.dataset_id, "name": i.name, "content_sha": i.content_sha,
        "source_kind": i.source_kind, "rel_path": i.rel_path, "byte_size": i.byte_size, "width": i.width, "height": i.height,
        "unreadable": i.unreadable, "created_at": i.created_at,
        "_links": links(&href, &[("bytes", format!("{href}/bytes"))]),
    })
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
    catalog::check_name("image", &req.name)?;
    let bytes = super::uploads::read_blob(
        s,
        &caller.tenant,
        "blob_sha",
        &req.blob_sha,
        crate::sources::MAX_SOURCE_FILE,
    )
    .await?;
    let sha = req.blob_sha.to_ascii_lowercase();
    register(
        s,
        d,
        &req.name,
        bytes,
        sha,
        ("upload", None),
        Unreadable::Register,
    )
    .await
}

/// Which images whose bytes do not decode are registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreadable {
    /// A client named these bytes as an image (`images`, `images:batchCreate`): sfmapi
    /// registers them, and they are refused later, by name, at a reconstruction's ingest.
    Register,
    /// A folder or bucket is being walked: a file that is no image is skipped and
    /// reported, so a source's notes and sidecars do not become images.
    Skip,
}

/// Check bytes with the check a reconstruction's ingest applies (format, HEIC, damaged
/// header, truncation, a pixel bomb's dimensions: `reconstruct::images::check`, one
/// admission for both), then register them under `name`, with what the check found.
async fn register(
    s: &ApiState,
    d: &Dataset,
    name: &str,
    bytes: ::bytes::Bytes,
    sha: String,
    source: (&str, Option<String>),
    unreadable: Unreadable,
) -> Result<Image, Problem> {
    catalog::check_name("image", name)?;
    // The facts a recipe's automatic choices are made from, read once, as the CLI reads
    // a folder's photos.
    let fact = tessera_jobs::reconstruct::recipe::PhotoFact::hashed(name, sha.clone(), &bytes);
    let pixels = match fact.size {
        Ok((w, h)) => Pixels::Size(w, h),
        Err(why) if unreadable == Unreadable::Register => Pixels::Unreadable(why),
        Err(why) => return Err(Problem::validation(why)),
    };
    Ok(catalog::register_image(
        s.engine.ports().store.as_ref(),
        s.engine.ports().objects.as_ref(),
        d,
        name,
        CheckedBytes {
            bytes,
            sha,
            pixels,
            gps: fact.gps,
        },
        source,
    )
    .await?)
}

/// Register every file of a source as an image of `d`. A file that is too large, not an
/// image or unreadable is skipped and reported; the rest are registered.
pub(super) async fn import_source(
    s: &ApiState,
    caller: &Caller,
    d: &Dataset,
    src: &dyn crate::sources::ImageSource,
    files: &[crate::sources::SourceFile],
) -> Result<Value, Problem> {
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
                    d,
                    &name,
                    bytes,
                    sha,
                    (src.kind(), Some(f.rel_path.clone())),
                    Unreadable::Skip,
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

pub(super) async fn batch_create(
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
    // Every request is checked as a single create checks it (a name, a finalized blob
    // within the size limit, looked up, not read) before any is registered, so a batch
    // with one bad request registers nothing and names that request. Bytes that do not
    // decode are not a bad request (sfmapi registers them; `Unreadable::Register`).
    let mut names = std::collections::BTreeSet::new();
    for (i, r) in req.requests.iter().enumerate() {
        let at = |p: Problem| {
            let mut p = p;
            p.detail = format!("requests[{i}] ({}): {}", r.name, p.detail);
            p
        };
        if !names.insert(r.name.as_str()) {
            return Err(at(Problem::validation(
                "the name appears twice in this batch; names are unique in a dataset",
            )));
        }
        catalog::check_name("image", &r.name).map_err(|e| at(e.into()))?;
        if catalog::image_named(s.engine.ports().store.as_ref(), &d, &r.name)
            .await
            .is_ok()
        {
            return Err(at(Problem::conflict(
                "an image of this name is already in the dataset",
            )));
        }
        super::uploads::check_blob(
            s,
            &caller.tenant,
            "blob_sha",
            &r.blob_sha,
            crate::sources::MAX_SOURCE_FILE,
        )
        .await
        .map_err(at)?;
    }
    // What still fails here (a quota reached partway, a store error) takes back the
    // images this batch registered, so the batch is whole or not at all.
    let mut made: Vec<Image> = Vec::new();
    for (i, r) in req.requests.iter().enumerate() {
        match create_one(s, caller, &d, r).await {
            Ok(img) => made.push(img),
            Err(mut p) => {
                for img in &made {
                    if let Err(e) = catalog::delete_image(
                        s.engine.ports().store.as_ref(),
                        s.engine.ports().objects.as_ref(),
                        img,
                    )
                    .await
                    {
                        tracing::error!(image_id = %img.image_id, error = %e, "a failed batch could not take back an image it registered");
                    }
                }
                p.detail = format!("requests[{i}] ({}): {}", r.name, p.detail);
                return Err(p);
            }
        }
    }
    let out: Vec<Value> = made.iter().map(image_view).collect();
    Ok((StatusCode::CREATED, Json(json!({ "images": out }))).into_response())
}

/// Every image of a dataset (for planning).
pub async fn all_images(s: &ApiState, dataset: &Dataset) -> Result<Vec<Image>, Problem> {
    Ok(catalog::all_images(s.engine.ports().store.as_ref(), dataset.dataset_id).await?)
}

/// `GET /v1/datasets/{did}/images`.
pub async fn list_images(
    State(s): State<ApiState>,
    caller: Caller,
    Path(did): Path<String>,
    QueryParams(paging): QueryParams<Paging>,
) -> Result<Json<Value>, Problem> {
    let d = owned(&s, &caller, &did).await?;
    super::page_of(
        &s,
        catalog::images_partition(d.dataset_id),
        &paging,
        image_view,
    )
    .await
}

/// `DELETE /v1/datasets/{did}/images/{name}`.
pub async fn delete_image(
    State(s): State<ApiState>,
    caller: Caller,
    Path((did, name)): Path<(String, String)>,
) -> Result<StatusCode, Problem> {
    let d = owned(&s, &caller, &did).await?;
    let store = s.engine.ports().store.as_ref();
    let img = catalog::image_named(store, &d, &name).await?;
    catalog::delete_image(store, s.engine.ports().objects.as_ref(), &img).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /v1/images/{id}`: the same deletion as by name, addressed by id.
pub async fn delete_image_by_id(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    catalog::delete_image(
        s.engine.ports().store.as_ref(),
        s.engine.ports().objects.as_ref(),
        &img,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn owned_image(s: &ApiState, caller: &Caller, id: &str) -> Result<Image, Problem> {
    Ok(
        tessera_core::catalog::tenancy::image(s.engine.ports().store.as_ref(), &caller.tenant, id)
            .await?,
    )
}

/// `GET /v1/images/{id}`.
pub async fn get_image(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    Ok(Json(image_view(&owned_image(&s, &caller, &id).await?)))
}
