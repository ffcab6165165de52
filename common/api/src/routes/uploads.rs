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
/// Largest chunk body (the router's body limit; a function URL takes at most 6 MB).
pub const MAX_CHUNK: u64 = 2 << 20;
/// Most chunks one upload may have: the upload record lists their offsets and must stay
/// far below DynamoDB's 400 KB item limit (2,048 offsets are ~40 KB).
pub const MAX_CHUNKS: usize = 2048;
/// How long an unfinished upload lives.
pub const UPLOAD_LIFETIME: std::time::Duration = std::time::Duration::from_secs(86_400);

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

/// A `blob_sha` field checked (64 hex digits), lowercased.
pub fn check_blob_sha(field: &str, sha: &str) -> Result<String, Problem> {
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Problem::validation(format!(
            "{field} `{}` must be 64 hex characters (a finalized upload's SHA-256)",
            sha.chars().take(80).collect::<String>()
        )));
    }
    Ok(sha.to_ascii_lowercase())
}

/// A finalized upload's bytes, if it is at most `max` bytes: the size is read first, so
/// naming a 1 GiB blob where a photo is expected costs nothing.
pub async fn read_blob(
    s: &ApiState,
    tenant: &TenantId,
    field: &str,
    sha: &str,
    max: u64,
) -> Result<Bytes, Problem> {
    let sha = check_blob_sha(field, sha)?;
    let objects = s.engine.ports().objects.as_ref();
    let key = blob_key(tenant, &sha);
    let meta = objects
        .head(&key)
        .await
        .map_err(Problem::internal)?
        .ok_or_else(|| {
            Problem::validation(format!(
                "{field}: no finalized upload has blob_sha {sha}; upload the file first"
            ))
        })?;
    if meta.size > max {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "{field}: blob {sha} is {} MiB; at most {} MiB is accepted here",
                meta.size >> 20,
                max >> 20
            ),
        ));
    }
    objects.get(&key).await.map_err(Problem::internal)
}

fn chunk_key(id: &str, offset: u64) -> String {
    format!("upload-chunks/{id}/{offset:016}")
}

fn view(u: &Upload) -> serde_json::Value {
    json!({
        "upload_id": u.upload_id, "state": u.state, "expected_size": u.expected_size,
        "received_bytes": u.received_bytes, "blob_sha": u.blob_sha, "expires_at": u.expires_at,
        "max_chunk_bytes": MAX_CHUNK, "max_chunks": MAX_CHUNKS,
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
        expires_at: Millis::now().plus(UPLOAD_LIFETIME).to_rfc3339(),
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
    refuse_expired(&u)?;
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
    if u.chunks.len() + 1 >= MAX_CHUNKS && b + 1 != u.expected_size {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "upload {id} has {} chunks; at most {MAX_CHUNKS} are kept, so send the remaining {} bytes in one chunk, or start again with chunks of up to {MAX_CHUNK} bytes",
                u.chunks.len(),
                u.expected_size - u.received_bytes
            ),
        ));
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

/// An unfinished upload past its `expires_at` takes nothing more (its chunks are
/// collected by `collect_expired`).
fn refuse_expired(u: &Upload) -> Result<(), Problem> {
    if expired(u, Millis::now()) {
        return Err(Problem::new(
            StatusCode::GONE,
            "gone",
            format!(
                "upload {} expired at {}; start a new upload",
                u.upload_id, u.expires_at
            ),
        ));
    }
    Ok(())
}

fn expired(u: &Upload, now: Millis) -> bool {
    u.state != "finalized" && Millis::parse_rfc3339(&u.expires_at).is_some_and(|at| at.0 <= now.0)
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
    refuse_expired(&u)?;
    if u.received_bytes != u.expected_size {
        return Err(Problem::conflict(format!(
            "upload {id} has {} of {} bytes; send the rest first",
            u.received_bytes, u.expected_size
        )));
    }
    // Chunks are hashed and joined in a temporary file, one chunk in memory at a time:
    // a 1 GiB upload costs one chunk of memory, not 1 GiB.
    let objects = s.engine.ports().objects.clone();
    let joined = tempfile::NamedTempFile::new().map_err(Problem::internal)?;
    let mut out = tokio::fs::File::from_std(joined.reopen().map_err(Problem::internal)?);
    let mut hasher = Sha256::new();
    for offset in &u.chunks {
        let part = objects
            .get(&chunk_key(id, *offset))
            .await
            .map_err(Problem::internal)?;
        hasher.update(&part);
        tokio::io::AsyncWriteExt::write_all(&mut out, &part)
            .await
            .map_err(Problem::internal)?;
    }
    tokio::io::AsyncWriteExt::flush(&mut out)
        .await
        .map_err(Problem::internal)?;
    drop(out);
    let sha = hex::encode(hasher.finalize());
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
    // Content-addressed: a blob already there has these very bytes.
    let blob = blob_key(&u.tenant, &sha);
    if objects
        .head(&blob)
        .await
        .map_err(Problem::internal)?
        .is_none()
    {
        objects
            .put_file(&blob, joined.path())
            .await
            .map_err(Problem::internal)?;
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
