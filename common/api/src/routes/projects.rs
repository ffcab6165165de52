//! `/v1/projects`: create (idempotent by `Idempotency-Key`), list, get — each scoped to
//! the caller's tenant.

use super::{Paging, links};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::domain::Project;
use tessera_core::projects::{self, ProjectError};
use tessera_core::{ProjectId, records};

/// The body of a create request (unknown fields are ignored, as the spec asks).
#[derive(Debug, Deserialize)]
pub struct CreateProject {
    /// Unique name within the tenant.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Optional face-match threshold for the privacy extension (absent: fail closed).
    #[serde(default)]
    pub match_threshold: Option<f32>,
}

/// The wire shape of a project.
pub fn view(p: &Project) -> Value {
    let href = format!("/v1/projects/{}", p.id);
    json!({
        "project_id": p.id,
        "tenant_id": p.tenant,
        "name": p.name,
        "description": p.description,
        "created_at": p.created_at.to_rfc3339(),
        "x-tessera": { "match_threshold": p.match_threshold, "opted_out_subjects": p.opted_out, "upload_retention_days": p.upload_retention_days },
        "_links": links(&href, &[("datasets", format!("{href}/datasets")), ("pipelines", format!("{href}/pipelines"))]),
    })
}

impl From<ProjectError> for Problem {
    fn from(e: ProjectError) -> Self {
        match e {
            ProjectError::NotFound(m) => Problem::not_found(m),
            ProjectError::Conflict(m) => Problem::conflict(m),
            ProjectError::Invalid(m) => Problem::validation(m),
            ProjectError::Forbidden(e) => Problem::forbidden(e.to_string()),
            ProjectError::Store(e) => e.into(),
        }
    }
}

fn created(p: &Project, status: StatusCode) -> Response {
    let mut r = (status, Json(view(p))).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/projects/{}", p.id)) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// `POST /v1/projects`.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Json<CreateProject>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let Json(body) = body
        .map_err(|e| Problem::bad_request(format!("the body must be JSON {{\"name\": …}}: {e}")))?;
    let store = s.engine.ports().store.as_ref();
    let idem = super::idempotency(&headers)?;
    if let Some(k) = &idem
        && let Some(id) = k.earlier(store, &caller.tenant, "projects").await?
    {
        let id: ProjectId = id
            .parse()
            .map_err(|_| Problem::internal("idempotency record names no project"))?;
        // A replay answers as the first request did: 201, the project, its Location.
        return Ok(created(
            &projects::load(store, id).await?,
            StatusCode::CREATED,
        ));
    }
    let mut p = projects::create(
        store,
        caller.tenant.clone(),
        &body.name,
        body.match_threshold,
        0.35,
    )
    .await?;
    if body.description.is_some() {
        p = projects::update(store, p.id, None, Some(body.description.clone())).await?;
    }
    if let Some(k) = idem {
        // A racing retry with the same key finds this record; a failure here only costs
        // the idempotency of a retry, not the project.
        let _ = store
            .transact(vec![k.record(
                &caller.tenant,
                "projects",
                &p.id.to_string(),
            )])
            .await;
    }
    Ok(created(&p, StatusCode::CREATED))
}

/// `GET /v1/projects`.
pub async fn list(
    State(s): State<ApiState>,
    caller: Caller,
    QueryParams(paging): QueryParams<Paging>,
) -> Result<Json<Value>, Problem> {
    super::page_of(
        &s,
        records::tenant_projects_partition(&caller.tenant),
        &paging,
        view,
    )
    .await
}

/// A project of the caller's tenant, or 404 (another tenant's project does not exist
/// for this caller).
pub async fn owned(s: &ApiState, caller: &Caller, id: &str) -> Result<Project, Problem> {
    Ok(
        tessera_core::catalog::tenancy::project(
            s.engine.ports().store.as_ref(),
            &caller.tenant,
            id,
        )
        .await?,
    )
}

/// `GET /v1/projects/{id}`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    Ok(Json(view(&owned(&s, &caller, &id).await?)))
}

/// The body of a PATCH.
#[derive(Debug, Deserialize)]
pub struct PatchProject {
    /// New name.
    #[serde(default)]
    pub name: Option<String>,
    /// New description (`null` clears it).
    #[serde(default, deserialize_with = "some")]
    pub description: Option<Option<String>>,
    /// Days originals are kept after ingest (`null`: for ever), for photos ingested from
    /// now on.
    #[serde(default, deserialize_with = "some")]
    pub upload_retention_days: Option<Option<u32>>,
}

fn some<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Ok(Some(Option::deserialize(d)?))
}

/// `PATCH /v1/projects/{id}`.
pub async fn patch(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    QueryParams(mask): QueryParams<super::UpdateMask>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let p = owned(&s, &caller, &id).await?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"name\"?, \"description\"?, \"upload_retention_days\"?}}: {e}"
        ))
    })?;
    let body = mask.apply(body, &["name", "description", "upload_retention_days"])?;
    let b: PatchProject = serde_json::from_value(body)
        .map_err(|e| Problem::validation(format!("the project PATCH body: {e}")))?;
    if let Some(days) = b.upload_retention_days {
        projects::set_upload_retention(
            s.engine.ports().store.as_ref(),
            p.id,
            days,
            &caller.actor(),
        )
        .await?;
    }
    let p = projects::update(
        s.engine.ports().store.as_ref(),
        p.id,
        b.name.as_deref(),
        b.description,
    )
    .await?;
    Ok(Json(view(&p)))
}

/// `?cascade=true` on a project DELETE.
#[derive(Debug, Deserialize, Default)]
pub struct DeleteParams {
    /// Erase everything in the project with it.
    #[serde(default)]
    pub cascade: bool,
}

/// `DELETE /v1/projects/{id}`: an empty project (no photos, refused uploads, datasets,
/// opted-out subjects or runs: 409 naming what is left); with `?cascade=true`, the
/// project and everything in it (its runs once they have all ended, photos, datasets,
/// opted-out subjects with their reference photos), audited.
pub async fn delete(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    QueryParams(params): QueryParams<DeleteParams>,
) -> Result<StatusCode, Problem> {
    let p = owned(&s, &caller, &id).await?;
    let store = s.engine.ports().store.as_ref();
    if params.cascade {
        let actor = caller.actor();
        // Whether this caller may erase it at all, before anything goes.
        tessera_jobs::photos::erase::authorize_project_erasure(store, p.id, &actor)
            .await
            .map_err(super::privacy::photo_error)?;
        // Runs first: if one has not ended nothing is erased, and a request cut short
        // leaves the project to ask again.
        tessera_jobs::erase_job::erase_project_runs(&s.engine, p.id, &actor).await?;
        tessera_jobs::photos::erase::erase_project(
            store,
            s.engine.ports().objects.as_ref(),
            p.id,
            &actor,
        )
        .await
        .map_err(super::privacy::photo_error)?;
        // A run submitted while the runs were being erased (its dataset was still
        // there) goes too, if it has ended; one still going is left to its own DELETE.
        if let Err(e) = tessera_jobs::erase_job::erase_project_runs(&s.engine, p.id, &actor).await {
            tracing::warn!(project_id = %p.id, error = %e, "a run started during the project's erasure is left");
        }
        return Ok(StatusCode::NO_CONTENT);
    }
    let runs = tessera_jobs::erase_job::project_runs(&s.engine, &caller.tenant, p.id).await?;
    if !runs.is_empty() {
        return Err(Problem::conflict(format!(
            "project {} still has {} run(s); delete them first, or delete with ?cascade=true",
            p.id,
            runs.len()
        )));
    }
    tessera_jobs::photos::erase::delete_empty_project(store, p.id)
        .await
        .map_err(super::privacy::photo_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name taken and a field changed by someone else since it was read are both
    /// 409s (read and try again), not 422s (the request is wrong as written).
    #[test]
    fn conflicts_with_what_is_there_now_are_409s() {
        for e in [
            ProjectError::Conflict("a project named `a` exists already".into()),
            ProjectError::Conflict("its upload_retention_days changed meanwhile".into()),
        ] {
            assert_eq!(Problem::from(e).status, StatusCode::CONFLICT);
        }
        assert_eq!(
            Problem::from(ProjectError::Invalid("bad".into())).status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
}
