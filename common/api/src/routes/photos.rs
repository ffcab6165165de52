//! One photo of the photo-privacy extension, `/v1/x-tessera/…`: adding photos (from
//! finalized uploads, an object already in the store, or a presigned PUT), a photo with
//! its faces and state, its published files (served only while it is published), its
//! manual blur regions, reprocessing, and erasure.

use super::privacy::{accepted, photo_error};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;
use tessera_core::geometry::FracRect;
use tessera_core::photo::Photo;
use tessera_core::{Millis, PhotoId};
use tessera_jobs::photos::{self, intake, project};

/// Add-photo request.
#[derive(Debug, Deserialize)]
pub struct AddPhoto {
    /// A finalized upload…
    #[serde(default)]
    pub blob_sha: Option<String>,
    /// …or an object the tenant put in its incoming folder (on AWS: a key of the stack's
    /// bucket), deleted from there once taken in ([`intake::add_incoming`]).
    #[serde(default)]
    pub s3_key: Option<String>,
    /// File name (default: the last segment of `s3_key`).
    #[serde(default)]
    pub name: Option<String>,
}

/// `POST /v1/x-tessera/projects/{pid}/photos`: store the upload and ingest it as S3
/// would announce it.
pub async fn add_photo(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<AddPhoto>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let Json(b) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"blob_sha\": …, \"name\": …}} or {{\"s3_key\": …}}: {e}"
        ))
    })?;
    let added = match (&b.blob_sha, &b.s3_key) {
        (Some(sha), None) => {
            let name = b
                .name
                .as_deref()
                .ok_or_else(|| Problem::validation("`name` is required with `blob_sha`"))?;
            intake::add_blob(&s.engine, &p, sha, name).await?
        }
        (None, Some(k)) => intake::add_incoming(&s.engine, &p, k, b.name.as_deref()).await?,
        _ => {
            return Err(Problem::validation(
                "give exactly one of `blob_sha` (with `name`) and `s3_key`",
            ));
        }
    };
    Ok(accepted(
        &[added.job],
        json!({ "photo_id": added.photo, "_links": super::links(&format!("/v1/x-tessera/photos/{}", added.photo), &[]) }),
    ))
}

/// The body of `photos:presign`.
#[derive(Debug, Deserialize)]
pub struct PresignPhoto {
    /// File name.
    pub name: String,
    /// The content type the upload will send (default `image/jpeg`).
    #[serde(default)]
    pub content_type: Option<String>,
}

/// How long a presigned photo upload URL is valid: long enough for a phone on a slow
/// link, short enough that a leaked URL soon stops working. Each URL names a fresh photo
/// key and is signed with `If-None-Match: *`, so it can create that object once and
/// never replace it.
const PRESIGNED_FOR: std::time::Duration = std::time::Duration::from_secs(900);

/// `POST /v1/x-tessera/projects/{pid}/photos:presign`: a URL to PUT the photo straight
/// into the bucket. The bucket's notification then ingests it like any upload; the
/// photo appears under the returned id. Only where the store can hand out URLs (S3).
pub async fn presign_photo(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<PresignPhoto>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let Json(b) = body
        .map_err(|e| Problem::bad_request(format!("the body must be JSON {{\"name\": …}}: {e}")))?;
    let photo = PhotoId::new();
    let key = intake::upload_key(p.id, photo, &b.name)?;
    let content_type = b.content_type.unwrap_or_else(|| "image/jpeg".into());
    let url = s
        .engine
        .ports()
        .objects
        .presigned_put(&key, &content_type, PRESIGNED_FOR)
        .await
        .map_err(Problem::internal)?;
    let Some(url) = url else {
        let mut pr = Problem::new(
            StatusCode::NOT_IMPLEMENTED,
            "capability_unavailable",
            "this server's object store cannot hand out upload URLs; POST the photo to …/photos instead",
        );
        pr.extra
            .insert("capability".into(), "x-tessera.presigned_uploads".into());
        return Err(pr);
    };
    // Counted before the URL is handed out: an upload through it is a photo.
    intake::admit(&s.engine, &caller.tenant).await?;
    let expires = Millis::now().plus(PRESIGNED_FOR).to_rfc3339();
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "photo_id": photo, "key": key,
            "upload": { "method": "PUT", "url": url, "headers": { "content-type": content_type, "if-none-match": "*" }, "expires_at": expires },
            "_links": super::links(&format!("/v1/x-tessera/photos/{photo}"), &[]),
        })),
    )
        .into_response())
}

pub(crate) async fn owned_photo(s: &ApiState, caller: &Caller, id: &str) -> Result<Photo, Problem> {
    Ok(owned_photo_and_state(s, caller, id).await?.0)
}

/// The caller's photo `id` as the caller may see it, and its state in its project as
/// the project is now.
pub(crate) async fn owned_photo_and_state(
    s: &ApiState,
    caller: &Caller,
    id: &str,
) -> Result<(Photo, photos::status::PhotoState), Problem> {
    let (mut photo, project) =
        tessera_core::catalog::tenancy::photo(s.engine.ports().store.as_ref(), &caller.tenant, id)
            .await?;
    let state = photos::status::current(&photo, &project);
    // Files decided before the project's last subject change are not served (nor linked)
    // until the photo is decided again: the photo reads as unpublished meanwhile.
    if !photo.servable(project.subjects_rev) {
        photo.published_at = None;
    }
    Ok((photo, state))
}

/// Presigned download URLs of a published photo's files, where the store offers them.
async fn download_urls(s: &ApiState, p: &Photo) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    if p.published_at.is_none() {
        return out;
    }
    let objects = s.engine.ports().objects.clone();
    // Only the public file: a subject's own variant shows their face unblurred, and is
    // read through `/files/{variant}`, where every read is audited.
    for r in p.renditions.iter().filter(|r| r.variant.is_none()) {
        for k in [&r.key, &r.thumb_key] {
            if let Ok(Some(url)) = objects
                .presigned_get(k, photos::withdraw::DOWNLOAD_URL_LIFETIME)
                .await
            {
                out.insert(k.clone(), url);
            }
        }
    }
    out
}

/// A face's decision as a caller without an admin key sees it: whether it is blurred
/// and why in kind, never whom it was matched to or how closely. Over a project's photos
/// the subject ids would be the listing of where each opted-out person appears (which
/// the clusters are admin-only for), and would aim an erasure at the photos that hold a
/// person's clearest views.
fn decision_for_viewer(d: &tessera_core::privacy::FaceDecision) -> Value {
    use tessera_core::privacy::FaceDecision;
    let kind = match d {
        FaceDecision::FailClosed => "fail_closed",
        FaceDecision::NotOptedOut { .. } => "not_opted_out",
        FaceDecision::Subject { .. } => "subject",
        FaceDecision::Ambiguous { .. } => "ambiguous",
    };
    json!({ "decision": kind })
}

/// A photo as the API shows it. To an admin (`admin`) only: which person (cluster) each
/// face was found to be and a decision its cluster made, whom each face matched, and the
/// subjects' own variants (each shows one opted-out person unblurred, as the original
/// does, which is admin-only too). Together over a project's photos they are the listing
/// of who appears where, and a subject's variant is a way around their opt-out.
pub(crate) fn photo_view(
    p: &Photo,
    state: &photos::status::PhotoState,
    downloads: &std::collections::HashMap<String, String>,
    admin: bool,
) -> Value {
    let href = format!("/v1/x-tessera/photos/{}", p.id);
    let published = p.published_at.is_some();
    let state = serde_json::to_value(state).expect("serializable");
    json!({
        "photo_id": p.id, "project_id": p.project, "name": p.file_name, "width": p.width, "height": p.height,
        "status": state["status"], "reason": state.get("reason"),
        "created_at": p.created_at.to_rfc3339(),
        "original_deleted": p.original_deleted_at.is_some(),
        "published_at": p.published_at.map(|m| m.to_rfc3339()),
        "variant_version": p.variant_version,
        "faces": p.faces.as_ref().map(|fs| fs.iter().map(|f| json!({ "bbox": f.bbox, "score": f.score, "decision": if admin { json!(f.decision) } else { decision_for_viewer(&f.decision) }, "rule": f.rule.map(|r| r.report(f.evidence)), "cluster_id": f.cluster.filter(|_| admin), "cluster_ruling": f.ruling.as_ref().filter(|_| admin).map(|r| json!({ "ruling": r, "why": r.explain() })) })).collect::<Vec<_>>()),
        "blur_regions": p.blur_regions,
        "variants": p.renditions.iter().filter(|r| admin || r.variant.is_none()).map(|r| {
            let v = r.variant.map_or("public".to_string(), |s| s.to_string());
            json!({
                "variant": v, "url": published.then(|| format!("{href}/files/{v}")), "byte_size": r.byte_size,
                "thumbnail_url": published.then(|| format!("{href}/files/{v}?thumbnail=true")),
                "download_url": downloads.get(&r.key), "thumbnail_download_url": downloads.get(&r.thumb_key),
            })
        }).collect::<Vec<_>>(),
        "_links": super::links(&href, &[("original", format!("{href}/original"))]),
    })
}

/// `GET /v1/x-tessera/photos/{id}`.
pub async fn get_photo(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let (p, state) = match owned_photo_and_state(&s, &caller, &id).await {
        Ok(found) => found,
        // An upload ingest refused has no row; it is listed, so it can be opened (and
        // erased) too.
        Err(missing) if missing.status == StatusCode::NOT_FOUND => {
            return match refused_of(&s, &caller, &id).await? {
                Some(r) => Ok(Json(refusal_view(&r))),
                None => Err(missing),
            };
        }
        Err(other) => return Err(other),
    };
    let downloads = download_urls(&s, &p).await;
    Ok(Json(photo_view(&p, &state, &downloads, caller.admin)))
}

/// A refused upload as the photo list and the photo's own page show it.
pub fn refusal_view(r: &photos::status::RefusedUpload) -> Value {
    json!({
        "photo_id": r.photo_id, "project_id": r.project, "name": r.name,
        "status": "failed", "reason": r.reason, "created_at": r.at.to_rfc3339(),
        "faces": null, "variants": [], "blur_regions": [],
        "_links": super::links(&format!("/v1/x-tessera/photos/{}", r.photo_id), &[]),
    })
}

/// `DELETE /v1/x-tessera/photos/{id}`: erase the photo, its upload and every file made
/// from it (audited).
pub async fn erase(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let (store, objects) = (
        s.engine.ports().store.as_ref(),
        s.engine.ports().objects.as_ref(),
    );
    let p = match owned_photo(&s, &caller, &id).await {
        Ok(p) => p,
        // Only a photo with no row may be a refusal; any other failure is answered as
        // it is (a store error must never send an erase down the refusal path).
        Err(missing) if missing.status == StatusCode::NOT_FOUND => {
            // An upload ingest refused has no row, and is erasable all the same.
            let Some(refused) = refused_of(&s, &caller, &id).await? else {
                return Err(missing);
            };
            tessera_jobs::photos::erase::erase_refused(store, objects, &refused, &caller.actor())
                .await
                .map_err(photo_error)?;
            return Ok(StatusCode::NO_CONTENT);
        }
        Err(other) => return Err(other),
    };
    tessera_jobs::photos::erase::erase_photo(&s.engine, &p, &caller.actor())
        .await
        .map_err(photo_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The refusal of photo `id`, if it was refused in one of the caller's projects.
async fn refused_of(
    s: &ApiState,
    caller: &Caller,
    id: &str,
) -> Result<Option<photos::status::RefusedUpload>, Problem> {
    let Ok(pid) = id.parse::<PhotoId>() else {
        return Ok(None);
    };
    let Some(r) = photos::status::refusal(s.engine.ports().store.as_ref(), pid).await? else {
        return Ok(None);
    };
    Ok(super::projects::owned(s, caller, &r.project.to_string())
        .await
        .ok()
        .map(|_| r))
}

/// `?thumbnail=true`.
#[derive(Debug, Deserialize, Default)]
pub struct FileParams {
    /// The thumbnail instead of the file.
    #[serde(default)]
    pub thumbnail: bool,
}

/// `GET /v1/x-tessera/photos/{id}/files/{variant}`: only while published.
pub async fn file(
    State(s): State<ApiState>,
    caller: Caller,
    Path((id, variant)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<FileParams>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let p = owned_photo(&s, &caller, &id).await?;
    // Any variant but the public one shows an opted-out person unblurred, as the
    // original does: an admin's to read. Refused before it is looked up, so the answer
    // says nothing of which subjects the photo holds.
    if variant != "public" && !caller.admin {
        return Err(Problem::forbidden(format!(
            "variant `{variant}` of photo {id} would show an opted-out person unblurred; reading a subject's own variant needs an admin key (every caller may read `public`)"
        )));
    }
    if p.published_at.is_none() {
        return Err(Problem::not_found(format!("photo {id} is not published")));
    }
    let r = p
        .renditions
        .iter()
        .find(|r| r.variant.map_or("public".to_string(), |s| s.to_string()) == variant)
        .ok_or_else(|| Problem::not_found(format!("photo {id} has no variant `{variant}`")))?;
    if let Some(subject) = r.variant {
        // A subject's own variant shows their face unblurred: every read is on record.
        tessera_core::audit::record(
            s.engine.ports().store.as_ref(),
            &caller.actor(),
            "photo.read_unblurred",
            format!("photo/{}", p.id),
            json!({ "subject": subject, "thumbnail": q.thumbnail }),
        )
        .await?;
    }
    let key = if q.thumbnail { &r.thumb_key } else { &r.key };
    let ct = if key.ends_with(".png") {
        "image/png"
    } else {
        "image/jpeg"
    };
    // Versioned keys are never overwritten, so the key is a strong validator.
    let etag = hex::encode(sha2::Sha256::digest(key.as_bytes()));
    // The URL names a variant, not a version: after a re-blur or an unpublish the same
    // URL must not be answered from a cache.
    crate::bytes::serve_object(
        &headers,
        s.engine.ports().objects.as_ref(),
        key,
        ct,
        &etag,
        crate::bytes::Freshness::Revalidate,
        // Never a redirect: each read of a subject's unblurred variant is audited, and a
        // bearer URL could be replayed unaudited; the console reads these files with
        // `fetch`, which a redirect to the bucket (no CORS) would break. They are renders
        // of photos of at most 100 MiB, within what the `api` function streams (200 MB).
        None,
    )
    .await
    .map_err(Problem::internal)
}

/// Blur regions request.
#[derive(Debug, Deserialize)]
pub struct Regions {
    /// Rectangles as fractions of the image.
    pub regions: Vec<FracRect>,
}

async fn reprocess_one(s: &ApiState, p: &Photo, edits_rev: u64) -> Result<Response, Problem> {
    let proj = project::load(s.engine.ports().store.as_ref(), p.project).await?;
    let job = s
        .engine
        .submit(photos::reprocess_plan(
            proj.tenant.clone(),
            proj.id,
            p.id,
            proj.subjects_rev,
            edits_rev,
        ))
        .await?
        .job_id;
    Ok(accepted(&[job], json!({ "photo_id": p.id })))
}

/// `PUT /v1/x-tessera/photos/{id}/blur-regions`: replace the regions and re-blur.
pub async fn put_regions(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Json<Regions>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let p = owned_photo(&s, &caller, &id).await?;
    let Json(b) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"regions\": [{{x, y, w, h}}]}}: {e}"
        ))
    })?;
    let rev =
        tessera_jobs::photos::regions::set_regions(&s.engine, p.id, &b.regions, &caller.actor())
            .await
            .map_err(photo_error)?;
    reprocess_one(&s, &p, rev).await
}

/// `POST /v1/x-tessera/photos/{id}:reprocess`.
pub async fn action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id_action): Path<String>,
) -> Result<Response, Problem> {
    let Some((id, "reprocess")) = id_action.split_once(':') else {
        return Err(Problem::not_found(
            "POST /v1/x-tessera/photos/{id}:reprocess",
        ));
    };
    let p = owned_photo(&s, &caller, id).await?;
    reprocess_one(&s, &p, p.edits_rev).await
}
