//! What a reviewer of a photo platform needs over HTTP: a project's photos with their
//! state (and why a failed one failed), and, for admin keys only, the unblurred original
//! a decision was made about. The states are `tessera_jobs::photos::status`.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use sha2::Digest;
use tessera_jobs::photos::status::{self, Listed};

/// `GET /v1/x-tessera/projects/{pid}/photos`: the photos, newest first, a page at a time
/// (AIP-158 `page_size`, default 100, and `page_token`; no total, which would read the
/// whole project), each with its state
/// (`ingesting`, `ingested`, `processing`, `published`, `failed` with `reason`), its
/// faces and decisions, and links to its files; uploads ingest refused are listed as
/// failed, with why.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    Query(paging): Query<super::Paging>,
) -> Result<Json<Value>, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let after = paging
        .page_token
        .as_deref()
        .map(|t| {
            t.parse::<tessera_core::PhotoId>().map_err(|_| {
                Problem::bad_request(format!(
                    "page_token `{}` is not one this list gave; start again without it",
                    t.chars().take(40).collect::<String>()
                ))
            })
        })
        .transpose()?;
    let store = s.engine.ports().store.as_ref();
    let (page, next) = status::project_photos_page(store, &project, after, paging.size()).await?;
    let none = std::collections::HashMap::new();
    let items: Vec<Value> = page
        .into_iter()
        .map(|l| match l {
            Listed::Row(mut row, state) => {
                if !row.servable(project.subjects_rev) {
                    row.published_at = None;
                }
                super::photos::photo_view(&row, &state, &none, caller.admin)
            }
            Listed::Refused(r) => super::photos::refusal_view(&r),
        })
        .collect();
    Ok(super::page_json(items, next.map(|p| p.to_string())))
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
    let p = super::photos::owned_photo(&s, &caller, &id).await?;
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
        // Every read is audited, so every read reaches the server.
        crate::bytes::Freshness::Revalidate,
        // Never a redirect: every read of an original is audited, and a presigned URL
        // could be replayed unaudited. Originals are at most 100 MiB, within what the
        // `api` function streams (200 MB).
        None,
    )
    .await
    .map_err(Problem::internal)
}
