//! The photo-privacy extension, `/v1/x-tessera/…`: a project's privacy settings, its
//! opted-out subjects, photos (from finalized uploads), their faces, files and
//! publication, manual blur regions and re-blurring. Published files are served only
//! while the photo is published.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Photo, keys};
use tessera_core::{Millis, PhotoId, SubjectId, records};
use tessera_jobs::photos::{self, ObjectCreated, project};

pub(crate) fn photo_error(e: project::PhotoError) -> Problem {
    match e {
        project::PhotoError::NotFound(m) => Problem::not_found(m),
        project::PhotoError::Invalid(m) => Problem::validation(m),
        project::PhotoError::Forbidden(e) => Problem::forbidden(e.to_string()),
        project::PhotoError::Conflict(m) => Problem::conflict(m),
        project::PhotoError::Store(e) => e.into(),
        project::PhotoError::Objects(e) => Problem::internal(e),
        project::PhotoError::Faces(e) => Problem::unavailable(format!("face models: {e}")),
        project::PhotoError::Engine(e) => e.into(),
    }
}

fn accepted(jobs: &[tessera_core::JobId], extra: Value) -> Response {
    let mut body = json!({ "job_ids": jobs });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let mut r = (StatusCode::ACCEPTED, Json(body)).into_response();
    if let Some(j) = jobs.first() {
        r.headers_mut().insert(
            header::LOCATION,
            HeaderValue::from_str(&format!("/v1/jobs/{j}")).expect("ascii"),
        );
    }
    r
}

/// Privacy settings.
#[derive(Debug, Deserialize)]
pub struct Settings {
    /// Cosine threshold; `null` fails closed.
    pub match_threshold: Option<f32>,
    /// Face box growth, 0.30..0.40.
    #[serde(default = "default_expand")]
    pub blur_expand: f32,
    /// EXIF fields published files keep (default: capture time and camera, no location).
    #[serde(default)]
    pub keep_metadata: tessera_core::photo::KeepMetadata,
}

/// The project's privacy settings and how many photos are not yet re-decided at its
/// current subjects.
fn privacy_view(p: &tessera_core::domain::Project, status: &project::PrivacyStatus) -> Value {
    json!({
        "match_threshold": p.match_threshold.map(as_written), "blur_expand": as_written(p.blur_expand),
        "keep_metadata": p.keep_metadata, "opted_out": p.opted_out,
        "subjects_rev": status.subjects_rev, "photos": status.photos,
        "photos_not_current": status.not_current, "photos_published": status.published,
        "photos_processing": status.processing, "photos_failed": status.failed,
        "recommended_threshold": as_written(tessera_core::privacy::RECOMMENDED_THRESHOLD),
    })
}

/// A stored `f32` as the number people wrote (0.363, not 0.3630000054836273 as its
/// widening to JSON's double would say): its shortest decimal form, read as a double.
fn as_written(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// `GET /v1/x-tessera/projects/{pid}/privacy`: settings, and the photos not yet
/// re-decided after the last subject change.
pub async fn get_settings(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let status = project::privacy_status(s.engine.ports().store.as_ref(), p.id)
        .await
        .map_err(photo_error)?;
    Ok(Json(privacy_view(&p, &status)))
}

fn changed(change: project::SubjectChange, extra: Value) -> Response {
    let mut body =
        json!({ "subjects_rev": change.subjects_rev, "reblur_job_id": change.reblur_job });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    accepted(&[change.reblur_job], body)
}

fn default_expand() -> f32 {
    0.35
}

/// `PUT /v1/x-tessera/projects/{pid}/privacy`: settings change → every photo re-blurred.
pub async fn put_settings(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<Settings>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let Json(b) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"match_threshold\": number|null}}: {e}"
        ))
    })?;
    let change = project::set_settings(
        &s.engine,
        p.id,
        project::Settings {
            threshold: b.match_threshold,
            expand: b.blur_expand,
            keep_metadata: b.keep_metadata,
        },
        &caller.actor(),
    )
    .await
    .map_err(photo_error)?;
    Ok(changed(
        change,
        json!({ "match_threshold": b.match_threshold, "blur_expand": b.blur_expand, "keep_metadata": b.keep_metadata }),
    ))
}

/// Enrol request: reference photos by blob.
#[derive(Debug, Deserialize)]
pub struct Enrol {
    /// A name people know them by.
    pub label: String,
    /// Finalized uploads of their reference photos.
    pub blob_shas: Vec<String>,
}

fn subject_view(pid: &str, sub: &tessera_core::photo::Subject) -> Value {
    json!({
        "subject_id": sub.id, "label": sub.label, "references": sub.references.len(),
        "usable_views": sub.embeddings.len(), "warnings": project::enrolment_warnings(sub),
        "created_at": sub.created_at.to_rfc3339(),
        "_links": super::links(&format!("/v1/x-tessera/projects/{pid}/subjects/{}", sub.id), &[]),
    })
}

/// Most reference photos one enrolment takes (each is decoded and searched for its face).
pub const MAX_REFERENCES: usize = 20;
/// Largest reference photo.
pub const MAX_REFERENCE_BYTES: u64 = 25 << 20;
/// Most bytes of reference photos one enrolment takes.
pub const MAX_REFERENCES_TOTAL: u64 = 100 << 20;

/// `POST /v1/x-tessera/projects/{pid}/subjects`: enrol, then re-blur every photo.
pub async fn enrol(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<Enrol>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let Json(b) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"label\": …, \"blob_shas\": [...]}}: {e}"
        ))
    })?;
    // The request is checked before the face models are loaded (a refusal costs nothing).
    if b.label.trim().is_empty() {
        return Err(Problem::validation(
            "label is empty; a subject needs a label (a name people recognise)",
        ));
    }
    if b.blob_shas.is_empty() || b.blob_shas.len() > MAX_REFERENCES {
        return Err(Problem::validation(format!(
            "blob_shas holds {} reference photos; give 1 to {MAX_REFERENCES}",
            b.blob_shas.len()
        )));
    }
    for sha in &b.blob_shas {
        tessera_core::catalog::uploads::check_sha("blob_shas", sha)?;
    }
    let faces = s
        .faces
        .as_ref()
        .ok_or_else(|| Problem::unavailable("this server has no face models"))?;
    let models = faces
        .models()
        .map_err(|e| Problem::unavailable(e.message))?;
    // One enrolment at a time per server, with bounded references: each is decoded
    // and searched for its face, which is what costs memory.
    static ENROLMENTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let _one = ENROLMENTS
        .get_or_init(|| tokio::sync::Semaphore::new(1))
        .acquire()
        .await
        .map_err(Problem::internal)?;
    let mut refs = Vec::new();
    let mut total = 0u64;
    for sha in &b.blob_shas {
        let bytes =
            super::uploads::read_blob(&s, &caller.tenant, "blob_shas", sha, MAX_REFERENCE_BYTES)
                .await?;
        total += bytes.len() as u64;
        if total > MAX_REFERENCES_TOTAL {
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                format!(
                    "blob_shas: the reference photos add up to more than {} MiB; send fewer or smaller ones",
                    MAX_REFERENCES_TOTAL >> 20
                ),
            ));
        }
        refs.push((sha.to_ascii_lowercase(), bytes.to_vec()));
    }
    let (sub, change) = project::enrol(&s.engine, models, p.id, &b.label, refs, &caller.actor())
        .await
        .map_err(photo_error)?;
    let mut r = changed(change, subject_view(&pid, &sub));
    *r.status_mut() = StatusCode::CREATED;
    Ok(r)
}

/// `GET /v1/x-tessera/projects/{pid}/subjects`.
pub async fn list_subjects(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let subs = project::subjects(s.engine.ports().store.as_ref(), p.id).await?;
    Ok(Json(
        json!({ "items": subs.iter().map(|x| subject_view(&pid, x)).collect::<Vec<_>>(), "next_page_token": null, "total": subs.len() }),
    ))
}

/// `DELETE /v1/x-tessera/projects/{pid}/subjects/{sid}`: then every photo re-blurred.
pub async fn remove_subject(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, sid)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let p = super::projects::owned(&s, &caller, &pid).await?;
    let sid: SubjectId = sid
        .parse()
        .map_err(|_| Problem::not_found(format!("subject {sid} does not exist")))?;
    let change = project::remove_subject(&s.engine, p.id, sid, &caller.actor())
        .await
        .map_err(photo_error)?;
    Ok(changed(change, json!({})))
}

/// Add-photo request.
#[derive(Debug, Deserialize)]
pub struct AddPhoto {
    /// A finalized upload…
    #[serde(default)]
    pub blob_sha: Option<String>,
    /// …or an object already in the store (on AWS: a key of the stack's bucket).
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
    let objects = s.engine.ports().objects.clone();
    let (bytes, name) = match (&b.blob_sha, &b.s3_key) {
        (Some(sha), None) => {
            let name = b
                .name
                .clone()
                .ok_or_else(|| Problem::validation("`name` is required with `blob_sha`"))?;
            let bytes = super::uploads::read_blob(
                &s,
                &caller.tenant,
                "blob_sha",
                sha,
                tessera_imaging::decode::MAX_BYTES,
            )
            .await?;
            (bytes, name)
        }
        (None, Some(k)) => {
            // Only the caller's own incoming folder: never another tenant's object, nor
            // anything Tessera writes.
            tessera_core::catalog::incoming::check_incoming_key(&caller.tenant, k)?;
            let size = objects
                .head(k)
                .await
                .map_err(Problem::internal)?
                .ok_or_else(|| Problem::validation(format!("s3_key `{k}`: no object there")))?
                .size;
            if size > tessera_imaging::decode::MAX_BYTES {
                return Err(Problem::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "quota_exceeded",
                    format!(
                        "s3_key `{k}` is {} MiB, more than the {} MiB a photo may be",
                        size >> 20,
                        tessera_imaging::decode::MAX_BYTES >> 20
                    ),
                ));
            }
            let bytes = objects.get(k).await.map_err(|e| match e {
                tessera_core::ports::ObjectStoreError::NotFound(_)
                | tessera_core::ports::ObjectStoreError::InvalidKey { .. } => {
                    Problem::validation(format!("s3_key `{k}`: {e}"))
                }
                other => Problem::internal(other),
            })?;
            let name = b
                .name
                .clone()
                .unwrap_or_else(|| k.rsplit('/').next().unwrap_or(k).to_string());
            (bytes, name)
        }
        _ => {
            return Err(Problem::validation(
                "give exactly one of `blob_sha` (with `name`) and `s3_key`",
            ));
        }
    };
    let photo = PhotoId::new();
    let key = keys::upload(p.id, photo, &name);
    if name.contains('/') || tessera_core::ports::object_store::validate_key(&key).is_err() {
        return Err(Problem::validation(format!(
            "`{name}` is not a usable file name"
        )));
    }
    tessera_core::catalog::quotas::admit_photo(s.engine.ports().store.as_ref(), &caller.tenant)
        .await?;
    let size = bytes.len() as u64;
    objects.put(&key, bytes).await.map_err(Problem::internal)?;
    let event = ObjectCreated::for_key("local", &key, size, &format!("{:016X}", Millis::now().0));
    let job = s
        .engine
        .submit(photos::ingest_plan(p.tenant.clone(), p.id, &event))
        .await?
        .job_id;
    Ok(accepted(
        &[job],
        json!({ "photo_id": photo, "_links": super::links(&format!("/v1/x-tessera/photos/{photo}"), &[]) }),
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
    let key = keys::upload(p.id, photo, &b.name);
    if b.name.contains('/') || tessera_core::ports::object_store::validate_key(&key).is_err() {
        return Err(Problem::validation(format!(
            "`{}` is not a usable file name",
            b.name
        )));
    }
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
    tessera_core::catalog::quotas::admit_photo(s.engine.ports().store.as_ref(), &caller.tenant)
        .await?;
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
    let missing = || {
        Problem::not_found(format!(
            "photo {id} does not exist (yet: ingest may still be running)"
        ))
    };
    let pid: PhotoId = id.parse().map_err(|_| missing())?;
    let item = s
        .engine
        .ports()
        .store
        .get(&records::photo_key(pid))
        .await?
        .ok_or_else(missing)?;
    let mut photo: Photo = records::decode(&item)?;
    let project = super::projects::owned(s, caller, &photo.project.to_string())
        .await
        .map_err(|_| missing())?;
    // Files decided before the project's last subject change are not served (nor linked)
    // until the photo is decided again: the photo reads as unpublished meanwhile.
    if !photo.servable(project.subjects_rev) {
        photo.published_at = None;
    }
    Ok(photo)
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

pub(crate) fn photo_view(
    p: &Photo,
    state: &photos::status::PhotoState,
    downloads: &std::collections::HashMap<String, String>,
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
        "faces": p.faces.as_ref().map(|fs| fs.iter().map(|f| json!({ "bbox": f.bbox, "score": f.score, "decision": f.decision, "rule": f.rule.map(|r| r.report(f.evidence)) })).collect::<Vec<_>>()),
        "blur_regions": p.blur_regions,
        "variants": p.renditions.iter().map(|r| {
            let v = r.variant.map_or("public".to_string(), |s| s.to_string());
            json!({
                "variant": v, "url": published.then(|| format!("{href}/files/{v}")),
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
    let p = match owned_photo(&s, &caller, &id).await {
        Ok(p) => p,
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
    let state = super::photo_review::state_of(&p);
    let downloads = download_urls(&s, &p).await;
    Ok(Json(photo_view(&p, &state, &downloads)))
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

/// `?page_token=…&page_size=…` for the audit trail.
#[derive(Debug, Deserialize, Default)]
pub struct AuditPage {
    /// Continue after this cursor.
    pub page_token: Option<String>,
    /// Entries per page (1..=500, default 100).
    pub page_size: Option<usize>,
}

/// `GET /v1/x-tessera/audit`: the tenant's audit trail, newest first (admin keys only).
pub async fn audit_trail(
    State(s): State<ApiState>,
    caller: Caller,
    axum::extract::Query(q): axum::extract::Query<AuditPage>,
) -> Result<Json<Value>, Problem> {
    if !caller.admin {
        return Err(Problem::forbidden("the audit trail needs an admin key"));
    }
    let (items, next) = tessera_core::audit::list(
        s.engine.ports().store.as_ref(),
        &caller.tenant,
        q.page_token,
        q.page_size.unwrap_or(100),
    )
    .await?;
    Ok(Json(json!({ "items": items, "next_page_token": next })))
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
    tessera_jobs::photos::erase::erase_photo(store, objects, &p, &caller.actor())
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
