//! The routes, one module per resource.

pub mod admin;
pub mod artifacts;
pub mod clusters;
pub mod datasets;
pub mod downloads;
pub mod events;
pub mod image_files;
pub mod images;
pub mod jobs;
pub mod meta;
pub mod openapi;
pub mod optional;
pub mod photo_review;
pub mod photos;
pub mod pipeline_run;
pub mod pipeline_spec;
pub mod pipelines;
pub mod privacy;
pub mod projects;
pub mod reconstructions;
pub mod stream_guard;
pub mod table;
pub mod uploads;
pub mod webhooks;
pub mod ws;

use crate::{ApiState, AuthMode};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};

pub use openapi::openapi;
use serde::Deserialize;
pub use table::{Operation, table};

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

/// One AIP-158 page of the records a by-parent partition holds, and the cursor after it.
pub async fn page_records<T: serde::de::DeserializeOwned>(
    s: &ApiState,
    partition: String,
    paging: &Paging,
) -> Result<(Vec<T>, Option<String>), crate::Problem> {
    use tessera_core::ports::state_store::{Index, Query};
    let mut q = Query::partition(Index::ByParent, partition, paging.size());
    q.after = paging.page_token.clone();
    let page = s.engine.ports().store.query(&q).await?;
    let records = page
        .items
        .iter()
        .map(tessera_core::records::decode::<T>)
        .collect::<Result<_, _>>()?;
    Ok((records, page.next))
}

/// A `Page<T>` answer.
pub fn page_json(
    items: Vec<serde_json::Value>,
    next: Option<String>,
) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "items": items, "next_page_token": next, "total": null }))
}

/// One AIP-158 page of the records a by-parent partition holds, each shown by `view`.
pub async fn page_of<T: serde::de::DeserializeOwned>(
    s: &ApiState,
    partition: String,
    paging: &Paging,
    view: impl Fn(&T) -> serde_json::Value,
) -> Result<axum::Json<serde_json::Value>, crate::Problem> {
    let (records, next) = page_records::<T>(s, partition, paging).await?;
    Ok(page_json(records.iter().map(view).collect(), next))
}

/// AIP-161's `?update_mask=a,b` on a PATCH: only the named fields change, and each must
/// be in the body (an explicit `null` counts). Without a mask, whatever the body holds
/// changes.
#[derive(Debug, Deserialize, Default)]
pub struct UpdateMask {
    /// Comma-separated field paths, relative to the body.
    pub update_mask: Option<String>,
}

impl UpdateMask {
    /// The body cut to the mask's fields; 422 naming an unknown path or one the body
    /// lacks.
    pub fn apply(
        &self,
        body: serde_json::Value,
        allowed: &[&str],
    ) -> Result<serde_json::Value, crate::Problem> {
        let serde_json::Value::Object(fields) = body else {
            return Err(crate::Problem::validation(
                "the PATCH body must be a JSON object",
            ));
        };
        let Some(mask) = &self.update_mask else {
            return Ok(serde_json::Value::Object(fields));
        };
        let paths: Vec<&str> = mask
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if paths.is_empty() {
            return Err(crate::Problem::validation(
                "update_mask must name at least one field",
            ));
        }
        let unknown: Vec<&str> = paths
            .iter()
            .copied()
            .filter(|p| !allowed.contains(p))
            .collect();
        if !unknown.is_empty() {
            return Err(crate::Problem::validation(format!(
                "update_mask names field(s) that cannot be changed: {}; it may name {}",
                unknown.join(", "),
                allowed.join(", ")
            )));
        }
        let missing: Vec<&str> = paths
            .iter()
            .copied()
            .filter(|p| !fields.contains_key(*p))
            .collect();
        if !missing.is_empty() {
            return Err(crate::Problem::validation(format!(
                "update_mask names field(s) missing from the body: {}",
                missing.join(", ")
            )));
        }
        Ok(serde_json::Value::Object(
            fields
                .into_iter()
                .filter(|(k, _)| paths.contains(&k.as_str()))
                .collect(),
        ))
    }
}

/// The `Idempotency-Key` header, checked, if sent.
pub fn idempotency(
    headers: &axum::http::HeaderMap,
) -> Result<Option<tessera_core::catalog::idempotency::IdempotencyKey>, crate::Problem> {
    headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map_err(|_| crate::Problem::validation("Idempotency-Key must be printable ASCII"))
                .and_then(|k| {
                    Ok(tessera_core::catalog::idempotency::IdempotencyKey::parse(
                        k,
                    )?)
                })
        })
        .transpose()
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

/// Count a routed request for `/metrics`, by its route template.
async fn count(req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "(unmatched)".to_string(), |m| m.as_str().to_string());
    let res = next.run(req).await;
    crate::metrics::record(&method, &route, res.status().as_u16(), started.elapsed());
    res
}

/// The browser boundary (`crate::browser`: Host and Origin checked, CORS for allowed
/// origins, preflights answered here) and the `none`-mode warning.
async fn edge(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    use crate::browser::Verdict;
    let verdict = state.browser.judge(req.headers());
    let preflight = req.method() == Method::OPTIONS;
    let path = req.uri().path().to_string();
    let res = match &verdict {
        // Every preflight is answered 200 (sfmapi §3.10 asks 200; browsers take any
        // 2xx); one from a page that may not call us gets none of the headers that would
        // let the browser go on.
        _ if preflight => StatusCode::OK.into_response(),
        Verdict::Refused(why) => {
            tracing::warn!(reason = %why, "request from a page or host name this server does not serve");
            crate::Problem::forbidden(why.clone()).into_response()
        }
        _ => next.run(req).await,
    };
    let mut res = crate::problem::with_instance(res, &path).await;
    let h = res.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    if let Verdict::Cors(origin) = &verdict
        && let Ok(origin) = HeaderValue::from_str(origin)
    {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, idempotency-key, last-event-id, range, if-none-match, content-range, x-content-sha256"),
        );
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("ETag, Last-Modified, Content-Range, Location, Link"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    }
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

/// Every route, from [`table`].
pub fn router(state: ApiState) -> Router {
    let mut by_path: Vec<(&'static str, MethodRouter<ApiState>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for o in table() {
        // Custom methods share a routed path and handler (`:cancel`, `:resume`).
        if !seen.insert((o.method.clone(), o.route)) {
            continue;
        }
        match by_path.iter_mut().find(|(p, _)| *p == o.route) {
            Some((_, mr)) => *mr = std::mem::take(mr).merge(o.handler),
            None => by_path.push((o.route, o.handler)),
        }
    }
    // The web console: static files, no key needed (they hold no data).
    let mut r = Router::new()
        .route("/", get(crate::console::index))
        .route("/console/{*path}", get(crate::console::asset));
    for (path, mr) in by_path {
        r = r.route(path, mr);
    }
    r.fallback(|| async { crate::Problem::not_found(NO_ROUTE) })
        .method_not_allowed_fallback(|| async {
            crate::Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "bad_request",
                "this method is not allowed here; see /openapi.json",
            )
        })
        .route_layer(middleware::from_fn(count))
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

/// The detail of the router's own 404.
pub const NO_ROUTE: &str = "no such route; see /openapi.json";
