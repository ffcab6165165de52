//! `/v1/uploads`: chunked uploads, translated to and from `tessera_core::catalog::uploads`
//! (where the rules live: order, limits, expiry, content addressing).

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tessera_core::TenantId;
use tessera_core::catalog::uploads::{self, MAX_CHUNK, MAX_CHUNKS, Upload, UploadState};

fn view(u: &Upload) -> serde_json::Value {
    let state = match u.state {
        UploadState::Open => "open",
        UploadState::Received => "received",
        UploadState::Finalized => "finalized",
    };
    json!({
        "upload_id": u.upload_id, "state": state, "expected_size": u.expected_size,
        "received_bytes": u.received_bytes, "blob_sha": u.blob_sha, "expires_at": u.expires_at,
        "max_chunk_bytes": MAX_CHUNK, "max_chunks": MAX_CHUNKS,
        "_links": super::links(&format!("/v1/uploads/{}", u.upload_id), &[]),
    })
}

/// A finalized upload's bytes, if the blob is at most `max` bytes (`field` names the
/// request field in errors).
pub async fn read_blob(
    s: &ApiState,
    tenant: &TenantId,
    field: &str,
    sha: &str,
    max: u64,
) -> Result<Bytes, Problem> {
    Ok(uploads::read_blob(s.engine.ports().objects.as_ref(), tenant, field, sha, max).await?)
}

/// That a finalized upload exists and is at most `max` bytes, without reading it.
pub async fn check_blob(
    s: &ApiState,
    tenant: &TenantId,
    field: &str,
    sha: &str,
    max: u64,
) -> Result<(), Problem> {
    uploads::check_blob(s.engine.ports().objects.as_ref(), tenant, field, sha, max).await?;
    Ok(())
}

/// The body of `POST /v1/uploads`.
#[derive(Debug, Deserialize)]
pub struct CreateUpload {
    /// Total size in bytes.
    pub expected_size: u64,
    /// SHA-256 the bytes must have (hex).
    #[serde(default)]
    pub expected_sha: Option<String>,
}

/// `POST /v1/uploads`.
pub async fn create(
    State(s): State<ApiState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Json<CreateUpload>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"expected_size\": N}}: {e}"
        ))
    })?;
    let idem = super::idempotency(&headers)?;
    // A replay of the same Idempotency-Key answers as the first request did (201), with
    // the upload's state now (sfmapi §3.7: "the original resource (or upload state)").
    let (u, _created) = uploads::create(
        s.engine.ports().store.as_ref(),
        &caller.tenant,
        body.expected_size,
        body.expected_sha.as_deref(),
        idem.as_ref(),
    )
    .await?;
    let mut r = (StatusCode::CREATED, Json(view(&u))).into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/uploads/{}", u.upload_id)).expect("ascii"),
    );
    Ok(r)
}

/// `GET /v1/uploads/{id}`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, Problem> {
    let u = uploads::get(s.engine.ports().store.as_ref(), &caller.tenant, &id).await?;
    Ok(Json(view(&u)))
}

/// `PATCH /v1/uploads/{id}`: one chunk.
pub async fn chunk(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<serde_json::Value>, Problem> {
    // Ownership before validation: another tenant's upload is a 404 whatever the range.
    uploads::get(s.engine.ports().store.as_ref(), &caller.tenant, &id).await?;
    let body = read_chunk(body).await?;
    let range = headers
        .get(header::CONTENT_RANGE)
        .ok_or_else(|| Problem::bad_request("a chunk needs `Content-Range: bytes A-B/TOTAL`"))?
        .to_str()
        .map_err(|_| Problem::bad_request("Content-Range must be ASCII `bytes A-B/TOTAL`"))?;
    let range =
        uploads::parse_content_range(range).map_err(|e| Problem::bad_request(e.to_string()))?;
    let u = uploads::accept_chunk(
        s.engine.ports().store.as_ref(),
        s.engine.ports().objects.as_ref(),
        &caller.tenant,
        &id,
        range,
        body,
    )
    .await?;
    Ok(Json(view(&u)))
}

/// How much of a chunk over [`MAX_CHUNK`] is read and thrown away before the refusal is
/// sent. A server that answers before the body is read closes the connection under a
/// client still sending it, and most clients then report the reset, not the answer; a
/// client sending more than this gets the reset all the same.
pub const OVERSIZE_DRAIN: u64 = 4 * MAX_CHUNK;

/// A chunk's body, at most [`MAX_CHUNK`] bytes held; one over that is a 413, sent once
/// the body is read to its end or [`OVERSIZE_DRAIN`] bytes, whichever comes first, with
/// nothing past [`MAX_CHUNK`] kept.
async fn read_chunk(body: axum::body::Body) -> Result<Bytes, Problem> {
    use futures_util::StreamExt;
    let refused = |why: String| {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "quota_exceeded",
            format!("{why}; send chunks of at most {MAX_CHUNK} bytes"),
        )
    };
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen: u64 = 0;
    while let Some(frame) = stream.next().await {
        let frame =
            frame.map_err(|e| refused(format!("the chunk body could not be read ({e})")))?;
        seen += frame.len() as u64;
        if seen <= MAX_CHUNK {
            kept.extend_from_slice(&frame);
        } else if seen > OVERSIZE_DRAIN {
            break;
        } else if !kept.is_empty() {
            // Refused whatever follows: nothing kept while the rest drains.
            kept = Vec::new();
        }
    }
    if seen > MAX_CHUNK {
        return Err(refused(format!(
            "the chunk body is over {MAX_CHUNK} bytes ({} read)",
            if seen > OVERSIZE_DRAIN {
                format!("more than {OVERSIZE_DRAIN}")
            } else {
                seen.to_string()
            }
        )));
    }
    Ok(Bytes::from(kept))
}

/// `POST /v1/uploads/{id}:finalize` (routed through the `{id}:action` path).
pub async fn finalize(
    s: &ApiState,
    caller: &Caller,
    id: &str,
    headers: &HeaderMap,
) -> Result<Json<serde_json::Value>, Problem> {
    let wanted = headers
        .get("x-content-sha256")
        .map(|v| {
            v.to_str()
                .map_err(|_| Problem::validation("X-Content-SHA256 must be 64 hex characters"))
        })
        .transpose()?;
    // Joining chunks takes scratch space the size of the upload: two at a time per server.
    static JOINS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let _join = JOINS
        .get_or_init(|| tokio::sync::Semaphore::new(2))
        .acquire()
        .await
        .map_err(Problem::internal)?;
    let u = uploads::finalize(
        s.engine.ports().store.as_ref(),
        s.engine.ports().objects.as_ref(),
        &s.engine.config().scratch.join("uploads"),
        &caller.tenant,
        id,
        wanted,
    )
    .await?;
    Ok(Json(view(&u)))
}

/// `POST /v1/uploads/{id}:finalize`.
pub async fn action(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id_action): Path<String>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, Problem> {
    match id_action.split_once(':') {
        Some((id, "finalize")) => finalize(&s, &caller, id, &headers).await,
        _ => Err(Problem::not_found("POST /v1/uploads/{id}:finalize")),
    }
}
