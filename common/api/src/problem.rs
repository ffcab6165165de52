//! `application/problem+json` errors (RFC 7807), the only shape a non-2xx answer has.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tessera_engine::EngineError;

/// An error answer.
#[derive(Debug, Clone)]
pub struct Problem {
    /// HTTP status.
    pub status: StatusCode,
    /// Error class slug (`not_found`, `validation`, …).
    pub slug: &'static str,
    /// What went wrong and what to do.
    pub detail: String,
    /// Extra members (for example `capability`).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Problem {
    /// A problem with this status, class and detail.
    pub fn new(status: StatusCode, slug: &'static str, detail: impl Into<String>) -> Self {
        Problem {
            status,
            slug,
            detail: detail.into(),
            extra: Default::default(),
        }
    }
    /// 501 naming the sfmapi capability a request needs and this server lacks
    /// (`capability_unavailable`, with `capability` for clients to match on).
    pub fn capability_unavailable(capability: &str) -> Self {
        let mut p = Self::new(
            StatusCode::NOT_IMPLEMENTED,
            "capability_unavailable",
            format!(
                "capability '{capability}' not supported by the current backend; see /v1/capabilities"
            ),
        );
        p.extra.insert("capability".into(), capability.into());
        p
    }
    /// 404.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }
    /// 400.
    pub fn bad_request(what: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", what)
    }
    /// 422.
    pub fn validation(what: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "validation", what)
    }
    /// 409.
    pub fn conflict(what: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", what)
    }
    /// 401.
    pub fn unauthorized(what: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "auth", what)
    }
    /// 403.
    pub fn forbidden(what: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "auth", what)
    }
    /// 500, logged; the caller sees no internals.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "internal error answering a request");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the server log",
        )
    }
    /// 503: a dependency is unavailable.
    pub fn unavailable(what: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", what)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut body = json!({
            "type": format!("https://sfmapi.github.io/errors/{}", self.slug),
            "title": match self.slug {
                "capability_unavailable" => "Capability not available in this deployment",
                _ => self.status.canonical_reason().unwrap_or("error"),
            },
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Some(obj) = body.as_object_mut() {
            obj.extend(self.extra);
        }
        let mut r = (self.status, body.to_string()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        r
    }
}

impl From<EngineError> for Problem {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NoSuchJob(id) => Problem::not_found(format!("job {id} does not exist")),
            EngineError::NoSuchTask(id) => Problem::not_found(format!("task {id} does not exist")),
            EngineError::InvalidPlan(m) => Problem::validation(m),
            EngineError::Refused(m) => Problem::conflict(m),
            EngineError::Store(tessera_core::ports::StoreError::Unavailable(m)) => {
                Problem::unavailable(m)
            }
            other => Problem::internal(other),
        }
    }
}

impl From<tessera_core::ports::StoreError> for Problem {
    fn from(e: tessera_core::ports::StoreError) -> Self {
        Problem::from(EngineError::from(e))
    }
}

impl From<tessera_core::catalog::CatalogError> for Problem {
    fn from(e: tessera_core::catalog::CatalogError) -> Self {
        use tessera_core::catalog::CatalogError;
        match e {
            CatalogError::NotFound(m) => Problem::not_found(m),
            CatalogError::Unauthorized(m) => Problem::unauthorized(m),
            CatalogError::Forbidden(m) => Problem::forbidden(m),
            CatalogError::Invalid(m) => Problem::validation(m),
            CatalogError::Conflict(m) => Problem::conflict(m),
            CatalogError::Gone(m) => Problem::new(StatusCode::GONE, "conflict", m),
            CatalogError::TooLarge(m) => {
                Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "quota_exceeded", m)
            }
            CatalogError::RangeNotSatisfiable(m) => {
                Problem::new(StatusCode::RANGE_NOT_SATISFIABLE, "bad_request", m)
            }
            CatalogError::Quota(m) => {
                Problem::new(StatusCode::TOO_MANY_REQUESTS, "quota_exceeded", m)
            }
            CatalogError::Unavailable(m) => Problem::unavailable(m),
            CatalogError::Store(e) => e.into(),
            CatalogError::Objects(e) => Problem::internal(e),
        }
    }
}

impl From<tessera_jobs::photos::intake::IntakeError> for Problem {
    fn from(e: tessera_jobs::photos::intake::IntakeError) -> Self {
        use tessera_jobs::photos::intake::IntakeError;
        match e {
            IntakeError::BadName { .. } | IntakeError::Missing { .. } => {
                Problem::validation(e.to_string())
            }
            IntakeError::TooLarge { .. } => Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                e.to_string(),
            ),
            IntakeError::Catalog(c) => c.into(),
            IntakeError::Objects(o) => Problem::internal(o),
            IntakeError::Engine(g) => g.into(),
        }
    }
}

/// Give a problem answer its `instance` (the request's path, sfmapi §3.4) where the
/// handler could not know it; any other answer passes unchanged.
pub async fn with_instance(res: Response, path: &str) -> Response {
    let is_problem = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/problem+json");
    if !is_problem {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let bytes = match axum::body::to_bytes(body, 1 << 20).await {
        Ok(b) => b,
        Err(_) => return Response::from_parts(parts, axum::body::Body::empty()),
    };
    let body = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(mut v) => {
            if let Some(o) = v.as_object_mut() {
                o.entry("instance").or_insert_with(|| path.into());
            }
            v.to_string().into_bytes()
        }
        Err(_) => bytes.to_vec(),
    };
    Response::from_parts(parts, axum::body::Body::from(body))
}
