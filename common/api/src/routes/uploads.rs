//! `/v1/uploads`: chunked uploads. Chunks must arrive in order (`Content-Range: bytes
//! A-B/T` with A = bytes received so far); a chunk already received is acknowledged
//! again without change, so a client that lost an answer simply resends. `:finalize`
//! hashes the bytes (SHA-256), checks them against the expected hash, and stores the
//! blob under the tenant, content-addressed.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use tessera_core::ports::state_store::{Condition, Item, ItemKey, Write};
use tessera_core::{Millis, TenantId, records};

/// Largest upload accepted.
pub const MAX_UPLOAD: u64 = 1 << 30;

/// An upload's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Upload {
    /// Id.
    pub upload_id: String,
    /// Owner.
    pub tenant: TenantId,
    /// `open`, `received` or `finalized`.
    pub state: String,
    /// Total bytes announced.
    pub expected_size: u64,
    /// Hash announced, if any.
    pub expected_sha: Option<String>,
    /// Bytes received, contiguous from 0.
    pub received_bytes: u64,
    /// Offsets at which chunks were stored.
    pub chunks: Vec<u64>,
    /// Content address once finalized.
    pub blob_sha: Option<String>,
    /// When an unfinished upload may be discarded.
    pub expires_at: String,
}

fn key(tenant: &TenantId, id: &str) -> ItemKey {
    ItemKey::new(format!("UPLOAD#{tenant}#{id}"), "UPLOAD")
}

/// Object key of a tenant's blob.
pub fn blob_key(tenant: &TenantId, sha: &str) -> String {
    format!("blobs/{tenant}/{sha}")
}

fn chunk_key(id: &str, offset: u64) -> String {
    format!("upload-chunks/{id}/{offset:016}")
}

fn view(u: &Upload) -> serde_json::Value {
    json!({
        "upload_id": u.upload_id, "state": u.state, "expected_size": u.expected_size,
        "received_bytes": u.received_bytes, "blob_sha": u.blob_sha, "expires_at": u.expires_at,
        "_links": super::links(&format!("/v1/uploads/{}", u.upload_id), &[]),
    })
}

async fn load(s: &ApiState, caller: &Caller, id: &str) -> Result<(Upload, u64), Problem> {
    let item = s
        .engine
        .ports()
        .store
        .get(&key(&caller.tenant, id))
        .await?
        .ok_or_else(|| Problem::not_found(format!("upload {id} does not exist")))?;
    Ok((records::decode(&item)?, item.rev))
}

async fn save(s: &ApiState, u: &Upload, rev: u64) -> Result<(), Problem> {
    s.engine
        .ports()
        .store
        .transact(vec![Write::Put {
            item: Item::new(
                key(&u.tenant, &u.upload_id),
                serde_json::to_value(u).expect("serializable"),
            ),
            condition: Condition::Rev(rev),
        }])
        .await
        .map_err(|e| {
            if e.is_conflict() {
                Problem::conflict("the upload changed meanwhile; GET it and retry")
            } else {
                e.into()
            }
        })
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
    if body.expected_size == 0 || body.expected_size > MAX_UPLOAD {
        return Err(Problem::validation(format!(
            "expected_size must be 1..={MAX_UPLOAD} bytes"
        )));
    }
    if let Some(sha) = &body.expected_sha
        && (sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(Problem::validation(
            "expected_sha must be 64 hex characters (SHA-256)",
        ));
    }
    let store = s.engine.ports().store.as_ref();
    let idem = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|k| ItemKey::new(format!("IDEM#{}#uploads#{k}", caller.tenant), "IDEM"));
    if let Some(k) = &idem
        && let Some(item) = store.get(k).await?
    {
        let id = item.body["upload"].as_str().unwrap_or_default().to_string();
        let (u, _) = load(&s, &caller, &id).await?;
        return Ok((StatusCode::OK, Json(view(&u))).into_response());
    }
    let u = Upload {
        upload_id: ulid::Ulid::new().to_string(),
        tenant: caller.tenant.clone(),
        state: "open".into(),
        expected_size: body.expected_size,
        expected_sha: body.expected_sha.map(|s| s.to_ascii_lowercase()),
        received_bytes: 0,
        chunks: Vec::new(),
        blob_sha: None,
        expires_at: Millis::now()
            .plus(std::time::Duration::from_secs(86_400))
            .to_rfc3339(),
    };
    let mut writes = vec![Write::Put {
        item: Item::new(
            key(&caller.tenant, &u.upload_id),
            serde_json::to_value(&u).expect("serializable"),
        ),
        condition: Condition::Absent,
    }];
    if let Some(k) = idem {
        writes.push(Write::Put {
            item: Item::new(k, json!({ "upload": u.upload_id })),
            condition: Condition::Absent,
        });
    }
    store.transact(writes).await.map_err(|e| {
        if e.is_conflict() {
            Problem::conflict("the same Idempotency-Key is being used concurrently; retry")
        } else {
            e.into()
        }
    })?;
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
    Ok(Json(view(&load(&s, &caller, &id).await?.0)))
}

fn content_range(h: &HeaderMap) -> Result<(u64, u64, u64), Problem> {
    let v = h
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Problem::bad_request("a chunk needs `Content-Range: bytes A-B/TOTAL`"))?;
    let bad = || Problem::bad_request(format!("Content-Range `{v}` is not `bytes A-B/TOTAL`"));
    let rest = v.strip_prefix("bytes ").ok_or_else(bad)?;
    let (range, total) = rest.split_once('/').ok_or_else(bad)?;
    let (a, b) = range.split_once('-').ok_or_else(bad)?;
    Ok((
        a.parse().map_err(|_| bad())?,
        b.parse().map_err(|_| bad())?,
        total.parse().map_err(|_| bad())?,
    ))
}

/// `PATCH /v1/uploads/{id}`: one chunk.
pub async fn chunk(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>, Problem> {
    let (mut u, rev) = load(&s, &caller, &id).await?;
    let (a, b, total) = content_range(&headers)?;
    if u.state == "finalized" {
        return Err(Problem::conflict(format!("upload {id} is finalized")));
    }
    let out_of_range = || {
        Problem::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "bad_request",
            format!(
                "chunk {a}-{b}/{total} does not fit: {} of {} bytes received; send `bytes {}-…/{}` next",
                u.received_bytes, u.expected_size, u.received_bytes, u.expected_size
            ),
        )
    };
    if total != u.expected_size || b < a || b >= total || body.len() as u64 != b - a + 1 {
        return Err(Problem::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "bad_request",
            format!(
                "chunk {a}-{b}/{total} with {} bytes does not match the upload of {} bytes",
                body.len(),
                u.expected_size
            ),
        ));
    }
    if b < u.received_bytes {
        // Received already (a resend after a lost answer).
        return Ok(Json(view(&u)));
    }
    if a != u.received_bytes {
        return Err(out_of_range());
    }
    s.engine
        .ports()
        .objects
        .put(&chunk_key(&id, a), body)
        .await
        .map_err(Problem::internal)?;
    u.received_bytes = b + 1;
    u.chunks.push(a);
    if u.received_bytes == u.expected_size {
        u.state = "received".into();
    }
    save(&s, &u, rev).await?;
    Ok(Json(view(&u)))
}

/// `POST /v1/uploads/{id}:finalize` (routed through the `{id}:action` path).
pub async fn finalize(
    s: &ApiState,
    caller: &Caller,
    id: &str,
    headers: &HeaderMap,
) -> Result<Json<serde_json::Value>, Problem> {
    let (mut u, rev) = load(s, caller, id).await?;
    if u.state == "finalized" {
        return Ok(Json(view(&u)));
    }
    if u.received_bytes != u.expected_size {
        return Err(Problem::conflict(format!(
            "upload {id} has {} of {} bytes; send the rest first",
            u.received_bytes, u.expected_size
        )));
    }
    let objects = s.engine.ports().objects.clone();
    let mut all = Vec::with_capacity(u.expected_size as usize);
    for offset in &u.chunks {
        all.extend_from_slice(
            &objects
                .get(&chunk_key(id, *offset))
                .await
                .map_err(Problem::internal)?,
        );
    }
    let sha = hex::encode(Sha256::digest(&all));
    let wanted = headers
        .get("x-content-sha256")
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .or(u.expected_sha.clone());
    if let Some(w) = wanted
        && w != sha
    {
        return Err(Problem::validation(format!(
            "the bytes hash to {sha}, not the expected {w}; upload again"
        )));
    }
    match objects
        .put_if_absent(&blob_key(&u.tenant, &sha), all.into())
        .await
    {
        Ok(_) | Err(tessera_core::ports::ObjectStoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(Problem::internal(e)),
    }
    u.state = "finalized".into();
    u.blob_sha = Some(sha);
    save(s, &u, rev).await?;
    for offset in &u.chunks {
        let _ = objects.delete(&chunk_key(id, *offset)).await;
    }
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
