//! What a reviewer of a photo platform needs over HTTP: a project's photos with their
//! state (and why a failed one failed), and, for admin keys only, the unblurred original
//! a decision was made about. The states are `tessera_jobs::photos::status`.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use sha2::Digest;
use tessera_core::photo::Photo;
use tessera_jobs::photos::status::{self, PhotoState};

/// The state of one photo (its row read by the caller).
pub(crate) async fn state_of(
    s: &ApiState,
    caller: &Caller,
    p: &Photo,
) -> Result<PhotoState, Problem> {
    let mut last = status::last_jobs(&s.engine, &caller.tenant, p.project).await?;
    let job = last.remove(&p.id).map(|(j, _)| j);
    let failure = match &job {
        Some(j) => status::failure(&s.engine, j).await?,
        None => None,
    };
    // `owned_photo` has already unset `published_at` where the files are not servable.
    Ok(status::state(
        Some(p),
        p.published_at.is_some(),
        job.as_ref().map(|j| (j, failure.as_deref())),
    ))
}

/// `GET /v1/x-tessera/projects/{pid}/photos`: every photo, newest first, with its state
/// (`ingesting`, `ingested`, `processing`, `published`, `failed` with `reason`), its
/// faces and decisions, and links to its files.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let store = s.engine.ports().store.as_ref();
    let rows = tessera_jobs::photos::project::photos(store, project.id).await?;
    let all = status::project_photos(
        &s.engine,
        &caller.tenant,
        project.id,
        project.subjects_rev,
        rows,
    )
    .await?;
    let none = std::collections::HashMap::new();
    let items: Vec<Value> = all
        .iter()
        .map(|ps| match &ps.row {
            Some(row) => {
                let mut row = row.clone();
                if !row.servable(project.subjects_rev) {
                    row.published_at = None;
                }
                let mut v = super::privacy::photo_view(&row, &ps.state, &none);
                v["job_id"] = json!(ps.job_id);
                v
            }
            None => {
                let state = serde_json::to_value(&ps.state).expect("serializable");
                json!({
                    "photo_id": ps.photo_id, "project_id": project.id, "name": ps.name,
                    "status": state["status"], "reason": state.get("reason"),
                    "job_id": ps.job_id, "faces": null, "variants": [],
                    "_links": super::links(&format!("/v1/x-tessera/photos/{}", ps.photo_id), &[]),
                })
            }
        })
        .collect();
    let total = items.len();
    Ok(Json(
        json!({ "items": items, "next_page_token": null, "total": total }),
    ))
}

/// `GET /v1/x-tessera/photos/{id}/original`: the upload as it arrived, faces unblurred:
/// admin keys only, and every read is on the audit trail. 410 once the project's
/// retention deleted it.
pub async fn original(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let p = super::privacy::owned_photo(&s, &caller, &id).await?;
    if !caller.admin {
        return Err(Problem::forbidden(
            "the unblurred original needs an admin key; other keys see the published variants",
        ));
    }
    if p.original_deleted_at.is_some() {
        return Err(Problem::new(
            StatusCode::GONE,
            "gone",
            format!("the original of photo {id} was deleted under the project's retention"),
        ));
    }
    tessera_core::audit::record(
        s.engine.ports().store.as_ref(),
        &caller.actor(),
        "photo.read_original",
        format!("photo/{}", p.id),
        json!({ "name": p.file_name }),
    )
    .await?;
    let ct = match p.format.as_str() {
        "png" => "image/png",
        "webp" => "image/webp",
        "heif" => "image/heic",
        _ => "image/jpeg",
    };
    let etag = hex::encode(sha2::Sha256::digest(p.upload_key.as_bytes()));
    crate::bytes::serve_object(
        &headers,
        s.engine.ports().objects.as_ref(),
        &p.upload_key,
        ct,
        &etag,
    )
    .await
    .map_err(Problem::internal)
}
