//! The photo-privacy extension's project side, `/v1/x-tessera/…`: a project's privacy
//! settings, its opted-out subjects, and the tenant's audit trail. One photo's routes are
//! in [`super::photos`].

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::SubjectId;
use tessera_jobs::photos::project;

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

pub(crate) fn accepted(jobs: &[tessera_core::JobId], extra: Value) -> Response {
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
        "sweep_stalled": status.sweep_stalled.as_ref().map(|s| json!({ "job_id": s.job_id, "subjects_rev": s.subjects_rev, "reason": s.reason, "at": s.at.to_rfc3339(), "what_to_do": s.explain() })),
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
