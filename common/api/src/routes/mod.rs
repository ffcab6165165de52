//! The routes, one module per resource.

pub mod admin;
pub mod artifacts;
pub mod datasets;
pub mod downloads;
pub mod events;
pub mod jobs;
pub mod meta;
pub mod optional;
pub mod photo_review;
pub mod pipeline_run;
pub mod pipelines;
pub mod privacy;
pub mod projects;
pub mod reconstructions;
pub mod stream_guard;
pub mod uploads;
pub mod webhooks;
pub mod ws;

use crate::{ApiState, AuthMode};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
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

/// One operation: how it is routed and how it is documented. The router and the
/// OpenAPI document are both built from [`table`], so they cannot disagree.
pub struct Operation {
    /// HTTP method.
    pub method: Method,
    /// The path as routed (axum syntax, `{param}`).
    pub route: &'static str,
    /// The path as documented (differs where a custom method shares a segment, as in
    /// `/v1/jobs/{job_id}:cancel`).
    pub doc: &'static str,
    /// One line for people.
    pub summary: &'static str,
    /// Grouping.
    pub tag: &'static str,
    /// The success status.
    pub ok: u16,
    /// The handler.
    pub handler: MethodRouter<ApiState>,
}

fn op(
    method: Method,
    route: &'static str,
    doc: &'static str,
    summary: &'static str,
    tag: &'static str,
    ok: u16,
    handler: MethodRouter<ApiState>,
) -> Operation {
    Operation {
        method,
        route,
        doc,
        summary,
        tag,
        ok,
        handler,
    }
}

/// Every operation the API offers.
pub fn table() -> Vec<Operation> {
    use Method as M;
    use axum::routing::{delete, patch, put};
    vec![
        op(
            M::GET,
            "/healthz",
            "/healthz",
            "Liveness",
            "meta",
            200,
            get(meta::healthz),
        ),
        op(
            M::GET,
            "/metrics",
            "/metrics",
            "Prometheus exposition: requests served, queue depths",
            "meta",
            200,
            get(meta::metrics),
        ),
        op(
            M::GET,
            "/readyz",
            "/readyz",
            "Readiness: the state store answers",
            "meta",
            200,
            get(meta::readyz),
        ),
        op(
            M::GET,
            "/version",
            "/version",
            "Server and API versions",
            "meta",
            200,
            get(meta::version),
        ),
        op(
            M::GET,
            "/openapi.json",
            "/openapi.json",
            "This document",
            "meta",
            200,
            get(openapi_json),
        ),
        op(
            M::GET,
            "/spec",
            "/spec",
            "Which specification this server implements, and where its OpenAPI document is",
            "meta",
            200,
            get(meta::spec),
        ),
        op(
            M::GET,
            "/v1/capabilities",
            "/v1/capabilities",
            "Backend and feature flags",
            "meta",
            200,
            get(meta::capabilities),
        ),
        op(
            M::GET,
            "/v1/camera-models",
            "/v1/camera-models",
            "The camera models a dataset may use, with their parameters",
            "meta",
            200,
            get(meta::camera_models),
        ),
        op(
            M::POST,
            "/v1/projects",
            "/v1/projects",
            "Create a project (Idempotency-Key)",
            "projects",
            201,
            post(projects::create),
        ),
        op(
            M::GET,
            "/v1/projects",
            "/v1/projects",
            "List projects (AIP-158)",
            "projects",
            200,
            get(projects::list),
        ),
        op(
            M::GET,
            "/v1/projects/{project_id}",
            "/v1/projects/{project_id}",
            "Get a project",
            "projects",
            200,
            get(projects::get),
        ),
        op(
            M::PATCH,
            "/v1/projects/{project_id}",
            "/v1/projects/{project_id}",
            "Rename a project or change its description",
            "projects",
            200,
            patch(projects::patch),
        ),
        op(
            M::DELETE,
            "/v1/projects/{project_id}",
            "/v1/projects/{project_id}",
            "Delete an empty project (`?cascade=true`: erase it with everything in it)",
            "projects",
            204,
            delete(projects::delete),
        ),
        op(
            M::POST,
            "/v1/projects/{project_id}/datasets",
            "/v1/projects/{project_id}/datasets",
            "Create a dataset (`upload` source)",
            "datasets",
            201,
            post(datasets::create),
        ),
        op(
            M::GET,
            "/v1/projects/{project_id}/datasets",
            "/v1/projects/{project_id}/datasets",
            "List a project's datasets",
            "datasets",
            200,
            get(datasets::list),
        ),
        op(
            M::GET,
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            "Get a dataset",
            "datasets",
            200,
            get(datasets::get),
        ),
        op(
            M::DELETE,
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            "Erase a dataset, its images and their thumbnails",
            "datasets",
            204,
            delete(datasets::erase),
        ),
        op(
            M::PATCH,
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            "/v1/projects/{project_id}/datasets/{dataset_id}",
            "Change a dataset's name, camera model, intrinsics mode or EXIF orientation (`?update_mask=`)",
            "datasets",
            200,
            patch(datasets::patch),
        ),
        op(
            M::POST,
            "/v1/projects/{project_id}/pipelines:run",
            "/v1/projects/{project_id}/pipelines:run",
            "Run typed steps; the chain features → pairs → matches → verify → map runs (202 + Location), other type-valid chains are 501 pipelines.custom_execution",
            "pipelines",
            202,
            post(pipeline_run::run),
        ),
        op(
            M::POST,
            "/v1/projects/{project_id}/pipelines/{recipe}",
            "/v1/projects/{project_id}/pipelines/{recipe}",
            "Run a recipe (202 + Location); Tessera's finishing choices in spec.x-tessera: {ba: standard|two_stage, georeference: none|gps, exports: [ply, nvm, colmap_text, colmap_bin]}",
            "pipelines",
            202,
            post(pipelines::submit),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}/{action}",
            "/v1/datasets/{dataset_id}/features",
            "Extract features (202 + Location)",
            "stages",
            202,
            post(datasets::post_action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}/{action}",
            "/v1/datasets/{dataset_id}/matches",
            "Match pairs: {pairs, matcher} (202 + Location)",
            "stages",
            202,
            post(datasets::post_action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}/{action}",
            "/v1/datasets/{dataset_id}/verify",
            "Verify matches geometrically (202 + Location)",
            "stages",
            202,
            post(datasets::post_action),
        ),
        op(
            M::POST,
            "/v1/uploads",
            "/v1/uploads",
            "Open a chunked upload (Idempotency-Key)",
            "uploads",
            201,
            post(uploads::create),
        ),
        op(
            M::GET,
            "/v1/uploads/{upload_id}",
            "/v1/uploads/{upload_id}",
            "Get an upload's state",
            "uploads",
            200,
            get(uploads::get),
        ),
        op(
            M::PATCH,
            "/v1/uploads/{upload_id}",
            "/v1/uploads/{upload_id}",
            "Send a chunk (Content-Range)",
            "uploads",
            200,
            patch(uploads::chunk),
        ),
        op(
            M::POST,
            "/v1/uploads/{upload_id}",
            "/v1/uploads/{upload_id}:finalize",
            "Finalize: hash and store the blob",
            "uploads",
            200,
            post(uploads::action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}/images",
            "/v1/datasets/{dataset_id}/images",
            "Create an image from a blob",
            "images",
            201,
            post(datasets::create_images),
        ),
        op(
            M::GET,
            "/v1/datasets/{dataset_id}/images",
            "/v1/datasets/{dataset_id}/images",
            "List a dataset's images",
            "images",
            200,
            get(datasets::list_images),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}/{action}",
            "/v1/datasets/{dataset_id}/images:batchCreate",
            "Create up to 1000 images",
            "images",
            201,
            post(datasets::post_action),
        ),
        op(
            M::DELETE,
            "/v1/datasets/{dataset_id}/images/{name}",
            "/v1/datasets/{dataset_id}/images/{name}",
            "Delete an image by name",
            "images",
            204,
            delete(datasets::delete_image),
        ),
        op(
            M::GET,
            "/v1/images/{image_id}",
            "/v1/images/{image_id}",
            "Get an image",
            "images",
            200,
            get(datasets::get_image),
        ),
        op(
            M::DELETE,
            "/v1/images/{image_id}",
            "/v1/images/{image_id}",
            "Delete an image by id",
            "images",
            204,
            delete(datasets::delete_image_by_id),
        ),
        op(
            M::GET,
            "/v1/images/{image_id}/bytes",
            "/v1/images/{image_id}/bytes",
            "Image bytes (Range, ETag, 304)",
            "images",
            200,
            get(datasets::image_bytes),
        ),
        op(
            M::GET,
            "/v1/images/{image_id}/thumbnail",
            "/v1/images/{image_id}/thumbnail",
            "A JPEG thumbnail (`?size=N`, 16..1024)",
            "images",
            200,
            get(datasets::thumbnail),
        ),
        op(
            M::GET,
            "/v1/images/{image_id}/exif",
            "/v1/images/{image_id}/exif",
            "EXIF fields as text",
            "images",
            200,
            get(datasets::exif),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}",
            "Get a reconstruction",
            "reconstructions",
            200,
            get(reconstructions::get),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/submodels",
            "/v1/reconstructions/{recon_id}/submodels",
            "The reconstruction's sub-models",
            "reconstructions",
            200,
            get(reconstructions::submodels),
        ),
        op(
            M::GET,
            "/v1/submodels/{submodel_id}",
            "/v1/submodels/{submodel_id}",
            "A sub-model",
            "reconstructions",
            200,
            get(reconstructions::get_submodel),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots",
            "/v1/reconstructions/{recon_id}/snapshots",
            "Sealed snapshot sequence numbers",
            "reconstructions",
            200,
            get(reconstructions::snapshots),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/submodels/{idx}/{name}",
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/submodels/{idx}/{name}",
            "A sealed snapshot's file for one sub-model (immutable; ETag, Range)",
            "reconstructions",
            200,
            get(reconstructions::submodel_file),
        ),
        op(
            M::POST,
            "/v1/reconstructions:merge",
            "/v1/reconstructions:merge",
            "Merge reconstructions (optional; 501: recon.merge)",
            "reconstructions",
            202,
            post(optional::merge),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}/localize",
            "/v1/reconstructions/{recon_id}/localize",
            "Localize a photo against a reconstruction (optional; 501: localize.from_memory)",
            "reconstructions",
            202,
            post(optional::localize),
        ),
        op(
            M::POST,
            "/v1/oneshot/localize",
            "/v1/oneshot/localize",
            "Localize a photo (optional; 501: localize.from_memory)",
            "reconstructions",
            202,
            post(optional::oneshot_localize),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/{name}",
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/{name}",
            "A sealed snapshot's file (immutable; ETag, Range)",
            "reconstructions",
            200,
            get(reconstructions::file),
        ),
        // sfmapi OPTIONAL endpoints not offered here: 404 for a missing resource, else 501.
        op(
            M::GET,
            "/v1/datasets/{dataset_id}/similarity",
            "/v1/datasets/{dataset_id}/similarity",
            "Image similarity (optional; 501: similarity.dhash)",
            "optional",
            200,
            get(optional::similarity),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}/{action}",
            "/v1/datasets/{dataset_id}/similarity:build",
            "Build a similarity index (optional; 501)",
            "optional",
            200,
            post(datasets::post_action),
        ),
        op(
            M::GET,
            "/v1/images/{image_id}/pose_prior",
            "/v1/images/{image_id}/pose_prior",
            "An image's pose prior (optional; 501: pose_priors.read_write)",
            "optional",
            200,
            get(optional::pose_prior),
        ),
        op(
            M::PUT,
            "/v1/images/{image_id}/pose_prior",
            "/v1/images/{image_id}/pose_prior",
            "Set an image's pose prior (optional; 501)",
            "optional",
            200,
            put(optional::pose_prior),
        ),
        op(
            M::DELETE,
            "/v1/images/{image_id}/pose_prior",
            "/v1/images/{image_id}/pose_prior",
            "Remove an image's pose prior (optional; 501)",
            "optional",
            204,
            delete(optional::pose_prior),
        ),
        op(
            M::GET,
            "/v1/datasets/{dataset_id}/pose_priors",
            "/v1/datasets/{dataset_id}/pose_priors",
            "A dataset's pose priors (optional; 501)",
            "optional",
            200,
            get(optional::pose_priors),
        ),
        op(
            M::PUT,
            "/v1/datasets/{dataset_id}/pose_priors",
            "/v1/datasets/{dataset_id}/pose_priors",
            "Set a dataset's pose priors (optional; 501)",
            "optional",
            200,
            put(optional::pose_priors),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}/georegister",
            "/v1/reconstructions/{recon_id}/georegister",
            "Sim(3) georegistration (optional; 501: georegister.sim3)",
            "optional",
            202,
            post(optional::georegister),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:toCubemap",
            "Spherical to cubemap (optional; 501: projection.equirectangular_to_cubemap)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:bundleAdjust",
            "Bundle adjustment of a finished reconstruction (optional; 501: ba.standard)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:triangulate",
            "Re-triangulation (optional; 501: triangulate.retri)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:relocalize",
            "Register new photos (optional; 501: relocalize.images)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:poseGraphOptimize",
            "Pose-graph optimisation (optional; 501: pgo.optimize)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:export",
            "Export (optional; 501: export.*)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/reconstructions/{recon_id}",
            "/v1/reconstructions/{recon_id}:undistort",
            "Undistort images (optional; 501: image.undistort)",
            "optional",
            202,
            post(optional::recon_action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}",
            "/v1/datasets/{dataset_id}:renderCubemap",
            "Render cubemaps (optional; 501: projection.equirectangular_to_cubemap)",
            "optional",
            202,
            post(optional::dataset_action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}",
            "/v1/datasets/{dataset_id}:projectImages",
            "Project images (optional; 501: projection.cubemap_rig)",
            "optional",
            202,
            post(optional::dataset_action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}",
            "/v1/datasets/{dataset_id}:renderEquirectangular",
            "Render equirectangular images (optional; 501: projection.cubemap_to_equirectangular)",
            "optional",
            202,
            post(optional::dataset_action),
        ),
        op(
            M::POST,
            "/v1/datasets/{dataset_id}",
            "/v1/datasets/{dataset_id}:renderPerspective",
            "Render perspective images (optional; 501: projection.equirectangular_to_perspective)",
            "optional",
            202,
            post(optional::dataset_action),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/index.json",
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/index.json",
            "Octree tile manifest (optional; 501: snapshots.tiles)",
            "optional",
            200,
            get(optional::tiles),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/{level}/{x}/{y}/{z}",
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/{level}/{x}/{y}/{z}.bin",
            "An octree tile (optional; 501)",
            "optional",
            200,
            get(optional::tiles),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/images/{image_id}/observations",
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/images/{image_id}/observations",
            "An image's observations (optional; 501: snapshots.observations)",
            "optional",
            200,
            get(optional::observations),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/points/{point3d_id}/visibility",
            "/v1/reconstructions/{recon_id}/snapshots/{seq}/points/{point3d_id}/visibility",
            "A point's visibility (optional; 501)",
            "optional",
            200,
            get(optional::observations),
        ),
        op(
            M::GET,
            "/v1/jobs",
            "/v1/jobs",
            "List jobs",
            "jobs",
            200,
            get(jobs::list),
        ),
        op(
            M::GET,
            "/v1/jobs/{job_id}",
            "/v1/jobs/{job_id}",
            "JobDetail",
            "jobs",
            200,
            get(jobs::get),
        ),
        op(
            M::DELETE,
            "/v1/jobs/{job_id}",
            "/v1/jobs/{job_id}",
            "Erase a run whose stages have all ended, with its files, tasks and events (409 while any runs)",
            "jobs",
            204,
            delete(jobs::delete),
        ),
        op(
            M::PATCH,
            "/v1/jobs/{job_id}",
            "/v1/jobs/{job_id}",
            "Rename a run (`{\"label\": …}`)",
            "jobs",
            200,
            patch(jobs::patch),
        ),
        op(
            M::POST,
            "/v1/jobs/{job_id}",
            "/v1/jobs/{job_id}:cancel",
            "Cancel (`?force=true`: revoke leases now)",
            "jobs",
            200,
            post(jobs::action),
        ),
        op(
            M::POST,
            "/v1/jobs/{job_id}",
            "/v1/jobs/{job_id}:resume",
            "Resume failed or cancelled tasks (202)",
            "jobs",
            202,
            post(jobs::action),
        ),
        op(
            M::GET,
            "/v1/jobs/{job_id}/progress",
            "/v1/jobs/{job_id}/progress",
            "JobProgress: a compact polling snapshot",
            "jobs",
            200,
            get(jobs::progress),
        ),
        op(
            M::GET,
            "/v1/jobs/{job_id}/artifacts",
            "/v1/jobs/{job_id}/artifacts",
            "The job's stage outputs (`?kind=`)",
            "jobs",
            200,
            get(artifacts::of_job),
        ),
        op(
            M::GET,
            "/v1/jobs/{job_id}/artifacts/{artifact_id}/files/{*name}",
            "/v1/jobs/{job_id}/artifacts/{artifact_id}/files/{name}",
            "One file of a sealed stage output, as an attachment (ETag, Range)",
            "jobs",
            200,
            get(downloads::artifact_file),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/report",
            "/v1/reconstructions/{recon_id}/report",
            "What the run was asked and did: stages, timings, photos left out, files to download",
            "reconstructions",
            200,
            get(downloads::report),
        ),
        op(
            M::GET,
            "/v1/reconstructions/{recon_id}/artifacts",
            "/v1/reconstructions/{recon_id}/artifacts",
            "The reconstruction's stage outputs (`?kind=`)",
            "reconstructions",
            200,
            get(artifacts::of_reconstruction),
        ),
        op(
            M::GET,
            "/v1/jobs/{job_id}/events",
            "/v1/jobs/{job_id}/events",
            "Progress events (SSE; Last-Event-ID)",
            "jobs",
            200,
            get(events::sse),
        ),
        op(
            M::GET,
            "/v1/x-tessera/projects/{project_id}/privacy",
            "/v1/x-tessera/projects/{project_id}/privacy",
            "Privacy settings, and how many photos are not yet re-decided at the current subjects",
            "x-tessera",
            200,
            get(privacy::get_settings),
        ),
        op(
            M::PUT,
            "/v1/x-tessera/projects/{project_id}/privacy",
            "/v1/x-tessera/projects/{project_id}/privacy",
            "Set the match threshold and blur growth; re-blurs every photo",
            "x-tessera",
            202,
            axum::routing::put(privacy::put_settings),
        ),
        op(
            M::POST,
            "/v1/x-tessera/projects/{project_id}/subjects",
            "/v1/x-tessera/projects/{project_id}/subjects",
            "Enrol an opted-out person from reference blobs; re-blurs every photo",
            "x-tessera",
            201,
            post(privacy::enrol),
        ),
        op(
            M::GET,
            "/v1/x-tessera/projects/{project_id}/subjects",
            "/v1/x-tessera/projects/{project_id}/subjects",
            "List opted-out people",
            "x-tessera",
            200,
            get(privacy::list_subjects),
        ),
        op(
            M::DELETE,
            "/v1/x-tessera/projects/{project_id}/subjects/{subject_id}",
            "/v1/x-tessera/projects/{project_id}/subjects/{subject_id}",
            "Remove an opted-out person; re-blurs every photo",
            "x-tessera",
            202,
            delete(privacy::remove_subject),
        ),
        op(
            M::POST,
            "/v1/x-tessera/projects/{project_id}/photos",
            "/v1/x-tessera/projects/{project_id}/photos",
            "Add a photo from a blob (ingest, then face processing)",
            "x-tessera",
            202,
            post(privacy::add_photo),
        ),
        op(
            M::GET,
            "/v1/x-tessera/projects/{project_id}/photos",
            "/v1/x-tessera/projects/{project_id}/photos",
            "A project's photos, newest first, each with its state (failed ones with the reason), faces and variants",
            "x-tessera",
            200,
            get(photo_review::list),
        ),
        op(
            M::GET,
            "/v1/x-tessera/photos/{photo_id}/original",
            "/v1/x-tessera/photos/{photo_id}/original",
            "The unblurred original as uploaded (admin keys only; audited)",
            "x-tessera",
            200,
            get(photo_review::original),
        ),
        op(
            M::POST,
            "/v1/x-tessera/projects/{project_id}/photos:presign",
            "/v1/x-tessera/projects/{project_id}/photos:presign",
            "A URL to upload a photo straight to the bucket (S3 only)",
            "x-tessera",
            201,
            post(privacy::presign_photo),
        ),
        op(
            M::GET,
            "/v1/x-tessera/photos/{photo_id}",
            "/v1/x-tessera/photos/{photo_id}",
            "A photo: faces, decisions, variants, publication",
            "x-tessera",
            200,
            get(privacy::get_photo),
        ),
        op(
            M::GET,
            "/v1/x-tessera/photos/{photo_id}/files/{variant}",
            "/v1/x-tessera/photos/{photo_id}/files/{variant}",
            "A published file or its thumbnail (`?thumbnail=true`)",
            "x-tessera",
            200,
            get(privacy::file),
        ),
        op(
            M::PUT,
            "/v1/x-tessera/photos/{photo_id}/blur-regions",
            "/v1/x-tessera/photos/{photo_id}/blur-regions",
            "Replace manual blur regions; re-blurs",
            "x-tessera",
            202,
            axum::routing::put(privacy::put_regions),
        ),
        op(
            M::DELETE,
            "/v1/x-tessera/photos/{photo_id}",
            "/v1/x-tessera/photos/{photo_id}",
            "Erase a photo, its upload and every file made from it",
            "x-tessera",
            204,
            delete(privacy::erase),
        ),
        op(
            M::GET,
            "/v1/x-tessera/audit",
            "/v1/x-tessera/audit",
            "The tenant's audit trail, newest first (admin)",
            "x-tessera",
            200,
            get(privacy::audit_trail),
        ),
        op(
            M::POST,
            "/v1/x-tessera/photos/{photo_id}",
            "/v1/x-tessera/photos/{photo_id}:reprocess",
            "Re-blur from stored faces",
            "x-tessera",
            202,
            post(privacy::action),
        ),
        op(
            M::GET,
            "/ws/v1/jobs/{job_id}",
            "/ws/v1/jobs/{job_id}",
            "Progress over WebSocket (hello, events, cancel_requested, terminal; ping and cancel)",
            "jobs",
            101,
            get(ws::upgrade),
        ),
        op(
            M::POST,
            "/v1/x-tessera/webhooks",
            "/v1/x-tessera/webhooks",
            "Create a webhook (the signing secret is in this answer only)",
            "x-tessera",
            201,
            post(webhooks::create),
        ),
        op(
            M::GET,
            "/v1/x-tessera/webhooks",
            "/v1/x-tessera/webhooks",
            "List webhooks",
            "x-tessera",
            200,
            get(webhooks::list),
        ),
        op(
            M::GET,
            "/v1/x-tessera/webhooks/{webhook_id}",
            "/v1/x-tessera/webhooks/{webhook_id}",
            "Get a webhook",
            "x-tessera",
            200,
            get(webhooks::get),
        ),
        op(
            M::DELETE,
            "/v1/x-tessera/webhooks/{webhook_id}",
            "/v1/x-tessera/webhooks/{webhook_id}",
            "Delete a webhook",
            "x-tessera",
            204,
            delete(webhooks::delete),
        ),
        op(
            M::GET,
            "/v1/x-tessera/webhooks/{webhook_id}/deliveries",
            "/v1/x-tessera/webhooks/{webhook_id}/deliveries",
            "Deliveries to a webhook, newest first, with their tries and last answer",
            "x-tessera",
            200,
            get(webhooks::deliveries),
        ),
        op(
            M::POST,
            "/v1/admin/api-keys",
            "/v1/admin/api-keys",
            "Create an API key (admin)",
            "admin",
            201,
            post(admin::create),
        ),
        op(
            M::GET,
            "/v1/admin/api-keys",
            "/v1/admin/api-keys",
            "List API keys (admin)",
            "admin",
            200,
            get(admin::list),
        ),
        op(
            M::DELETE,
            "/v1/admin/api-keys/{key_id}",
            "/v1/admin/api-keys/{key_id}",
            "Revoke an API key (admin)",
            "admin",
            200,
            delete(admin::revoke),
        ),
    ]
}

/// The OpenAPI 3.1 document of [`table`].
pub fn openapi() -> serde_json::Value {
    let mut paths = serde_json::Map::new();
    for o in table() {
        let params: Vec<serde_json::Value> = o
            .doc
            .split(['{', '}'])
            .skip(1)
            .step_by(2)
            .map(|p| serde_json::json!({ "name": p, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        let entry = paths
            .entry(o.doc.to_string())
            .or_insert_with(|| serde_json::json!({}));
        let ok_description = match o.ok {
            201 => "Created",
            202 => "Accepted; observe the job at Location",
            204 => "No content",
            101 => "Switching protocols (WebSocket)",
            _ => "OK",
        };
        entry[o.method.as_str().to_ascii_lowercase()] = serde_json::json!({
            "summary": o.summary,
            "tags": [o.tag],
            "operationId": format!("{}_{}", o.method.as_str().to_ascii_lowercase(), o.doc.trim_start_matches('/').replace(['/', '{', '}', ':', '.', '-'], "_")),
            "parameters": params,
            "responses": {
                o.ok.to_string(): { "description": ok_description },
                "default": { "description": "An error", "content": { "application/problem+json": { "schema": { "$ref": "#/components/schemas/Problem" } } } },
            },
        });
    }
    serde_json::json!({
        "openapi": "3.1.0",
        "info": { "title": "Tessera API (sfmapi v1)", "version": env!("CARGO_PKG_VERSION") },
        "paths": paths,
        "components": {
            "schemas": {
                "Problem": {
                    "type": "object",
                    "required": ["type", "title", "status"],
                    "properties": {
                        "type": { "type": "string" }, "title": { "type": "string" },
                        "status": { "type": "integer" }, "detail": { "type": "string" },
                        "instance": { "type": "string" },
                        "capability": { "type": "string" },
                    },
                },
            },
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
    })
}

async fn openapi_json() -> axum::Json<serde_json::Value> {
    axum::Json(openapi())
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
