//! The routes, one module per resource.

pub mod admin;
pub mod datasets;
pub mod events;
pub mod jobs;
pub mod meta;
pub mod pipelines;
pub mod projects;
pub mod reconstructions;
pub mod uploads;

use crate::{ApiState, AuthMode};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

/// AIP-158 paging parameters.
#[derive(Debug, Deserialize, Default)]
pub struct Paging {
    /// Items per page (1..=1000, default 100).
    pub page_size: Option<usize>,
    /// Where the previous page stopped (opaque).
    pub page_token: Option<String>,
}

impl Paging {
    /// The page size to use.
    pub fn size(&self) -> usize {
        self.page_size.unwrap_or(100).clamp(1, 1000)
    }
}

/// A `_links` block with `self` and named links.
pub fn links(self_href: &str, more: &[(&str, String)]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("self".into(), serde_json::json!({ "href": self_href }));
    for (name, href) in more {
        m.insert((*name).into(), serde_json::json!({ "href": href }));
    }
    serde_json::Value::Object(m)
}

/// CORS for browsers (preflight answered here) and the `none`-mode warning.
async fn edge(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let mut res = if req.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let h = res.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type, idempotency-key, last-event-id, range, if-none-match, content-range"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag, Last-Modified, Content-Range, Location, Link"),
    );
    if state.auth == AuthMode::None {
        h.insert(
            header::WARNING,
            HeaderValue::from_static(
                "199 tessera \"auth mode none: every caller is the local tenant\"",
            ),
        );
        h.insert("x-sfmapi-auth", HeaderValue::from_static("none"));
    }
    res
}

/// Every route.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(meta::healthz))
        .route("/readyz", get(meta::readyz))
        .route("/version", get(meta::version))
        .route("/v1/capabilities", get(meta::capabilities))
        .route("/v1/projects", post(projects::create).get(projects::list))
        .route("/v1/projects/{project_id}", get(projects::get))
        .route(
            "/v1/projects/{project_id}/datasets",
            post(datasets::create).get(datasets::list),
        )
        .route(
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            get(datasets::get),
        )
        .route(
            "/v1/projects/{project_id}/pipelines/{recipe}",
            post(pipelines::submit),
        )
        .route("/v1/uploads", post(uploads::create))
        .route(
            "/v1/uploads/{upload_action}",
            get(uploads::get)
                .patch(uploads::chunk)
                .post(uploads::action),
        )
        .route(
            "/v1/datasets/{dataset_id}/images",
            get(datasets::list_images).post(datasets::create_images),
        )
        .route(
            "/v1/datasets/{dataset_id}/{action}",
            post(datasets::batch_create),
        )
        .route(
            "/v1/datasets/{dataset_id}/images/{name}",
            axum::routing::delete(datasets::delete_image),
        )
        .route("/v1/images/{image_id}", get(datasets::get_image))
        .route("/v1/images/{image_id}/bytes", get(datasets::image_bytes))
        .route("/v1/reconstructions/{recon_id}", get(reconstructions::get))
        .route(
            "/v1/reconstructions/{recon_id}/snapshots",
            get(reconstructions::snapshots),
        )
        .route(
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/{name}",
            get(reconstructions::file),
        )
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/{job_action}", get(jobs::get).post(jobs::action))
        .route("/v1/jobs/{job_id}/events", get(events::sse))
        .route("/v1/admin/api-keys", post(admin::create).get(admin::list))
        .route(
            "/v1/admin/api-keys/{key_id}",
            axum::routing::delete(admin::revoke),
        )
        .fallback(|| async { crate::Problem::not_found("no such route; see /v1/capabilities") })
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}
