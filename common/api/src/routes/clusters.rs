//! `/v1/x-tessera/projects/{pid}/clusters`: the people a project's photos show, each as
//! the faces that look alike across its photos (`tessera_core::clusters`), and opting one
//! of them out directly. Admin keys only: a listing of who appears in which photos, and
//! a face's embeddings turned into an opt-out, are not for every key of a tenant.

use super::privacy::photo_error;
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::ClusterId;
use tessera_jobs::photos::clusters;

/// `GET …/clusters?page_size=&page_token=`: the people in most photos first.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    Query(paging): Query<super::Paging>,
) -> Result<Json<Value>, Problem> {
    // Whose project first: another tenant learns nothing, not even that it needs an admin.
    let p = super::projects::owned(&s, &caller, &pid).await?;
    caller.require_admin("listing who appears in which photos")?;
    let skip = match paging.page_token.as_deref() {
        None | Some("") => 0,
        Some(t) => t.parse::<usize>().map_err(|_| {
            Problem::validation(format!(
                "page_token `{t}` is not one this listing gave; start again without it"
            ))
        })?,
    };
    let size = paging.page_size.unwrap_or(50);
    let (items, next) = clusters::list(s.engine.ports().store.as_ref(), &p, skip, size).await?;
    let items: Vec<Value> = items
        .iter()
        .map(|c| {
            let href = format!("/v1/x-tessera/projects/{pid}/clusters/{}", c.cluster_id);
            json!({
                "cluster_id": c.cluster_id, "photos": c.photos, "faces": c.faces,
                "clear_views": c.clear_views, "standing": c.standing,
                "subjects": c.subjects.iter().map(|(id, label, sim)| json!({ "subject_id": id, "label": label, "similarity": sim })).collect::<Vec<_>>(),
                "sample_photos": c.sample_photos,
                "summary": format!("this person appears in {} photo{}", c.photos, if c.photos == 1 { "" } else { "s" }),
                "updated_at": c.updated_at.to_rfc3339(),
                "_links": super::links(&href, &[("opt_out", format!("{href}/opt-out"))]),
            })
        })
        .collect();
    Ok(Json(
        json!({ "items": items, "next_page_token": next.map(|n| n.to_string()), "total": null }),
    ))
}

/// The body of an opt-out of a cluster.
#[derive(Debug, Deserialize)]
pub struct OptOut {
    /// A label for people (the name the organiser was given, or a description).
    pub label: String,
}

/// `POST …/clusters/{cid}/opt-out {"label": …}`: the person enrolled as an opted-out
/// subject from the cluster's views; every photo is decided again.
pub async fn opt_out(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, cid)): Path<(String, String)>,
    body: Result<Json<OptOut>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    // Whose project first: another tenant learns nothing, not even that it needs an admin.
    let p = super::projects::owned(&s, &caller, &pid).await?;
    caller.require_admin("opting a cluster out (it shows who appears in which photos)")?;
    let Json(b) = body.map_err(|e| {
        Problem::bad_request(format!("the body must be JSON {{\"label\": …}}: {e}"))
    })?;
    let cid: ClusterId = cid
        .parse()
        .map_err(|_| Problem::not_found(format!("cluster {cid} does not exist")))?;
    let (sub, change) = clusters::opt_out(&s.engine, p.id, cid, &b.label, &caller.actor())
        .await
        .map_err(photo_error)?;
    let body = json!({
        "subject_id": sub.id, "label": sub.label, "usable_views": sub.embeddings.len(),
        "subjects_rev": change.subjects_rev, "reblur_job_id": change.reblur_job,
        "job_ids": [change.reblur_job],
        "_links": super::links(&format!("/v1/x-tessera/projects/{pid}/subjects/{}", sub.id), &[]),
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
