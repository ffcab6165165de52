//! Chunked uploads and the blobs they finalize into.
//!
//! An upload takes chunks in order (`A-B/TOTAL`, A = bytes received so far; a chunk
//! already received is acknowledged again unchanged, so a client that lost an answer
//! resends), and `finalize` hashes the bytes into a blob addressed by content under the
//! tenant. Everything is bounded: the size, the chunk size and count (the record lists
//! the chunk offsets and must stay far below DynamoDB's 400 KB item limit), and time —
//! an unfinished upload expires after [`UPLOAD_LIFETIME`] and a blob is kept
//! [`BLOB_LIFETIME`] after its last finalize, which is long enough to register it as an
//! image or a photo (both copy the bytes) and short enough that nothing piles up.
//!
//! Collection runs from the reaper ([`super::collect::collect_expired`]): expired uploads lose their
//! chunks and record, expired blobs their object. A blob being collected is marked
//! first, so a finalize racing the collection is told to retry instead of pointing at
//! bytes about to vanish.
//!
//! Over 600 lines only with its tests (the code is about 560): uploads and the blobs
//! they finalize into share one record's life cycle and its quota counters.

use super::CatalogError;
use crate::Millis;
use crate::ids::TenantId;
use crate::ports::object_store::ObjectStoreError;
use crate::ports::state_store::{Condition, Item, ItemKey, Write};
use crate::ports::{ObjectStore, StateStore};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

/// Largest upload accepted.
pub const MAX_UPLOAD: u64 = 1 << 30;
/// Largest chunk (the HTTP body limit; a Lambda function URL takes at most 6 MB).
pub const MAX_CHUNK: u64 = 2 << 20;
/// Most chunks one upload may have (2,048 offsets are ~40 KB of record).
pub const MAX_CHUNKS: usize = 2048;
/// How long an unfinished upload lives.
pub const UPLOAD_LIFETIME: Duration = Duration::from_secs(86_400);
/// How long a blob is kept after its last finalize.
pub const BLOB_LIFETIME: Duration = Duration::from_secs(7 * 86_400);

/// Where an upload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UploadState {
    /// Taking chunks.
    Open,
    /// Every byte is in; waiting for finalize.
    Received,
    /// Hashed into a blob.
    Finalized,
}

/// An upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upload {
    /// Id (a ULID).
    pub upload_id: String,
    /// Owner.
    pub tenant: TenantId,
    /// Where it is.
    pub state: UploadState,
    /// Total bytes announced.
    pub expected_size: u64,
    /// Hash announced, if any (lowercase hex).
    pub expected_sha: Option<String>,
    /// Bytes received, contiguous from 0.
    pub received_bytes: u64,
    /// Offsets at which chunks were stored.
    pub chunks: Vec<u64>,
    /// Content address once finalized.
    pub blob_sha: Option<String>,
    /// When it (unfinished) or its record (finalized) is collected, RFC 3339.
    pub expires_at: String,
}

/// How an upload record's key begins (the collector tells its items by it).
pub(super) const UPLOAD_PREFIX: &str = "UPLOAD#";
/// How a blob record's key begins.
pub(super) const BLOB_PREFIX: &str = "BLOB#";

pub(super) fn upload_key(tenant: &TenantId, id: &str) -> ItemKey {
    ItemKey::new(format!("{UPLOAD_PREFIX}{tenant}#{id}"), "UPLOAD")
}

pub(super) fn blob_record_key(tenant: &TenantId, sha: &str) -> ItemKey {
    ItemKey::new(format!("{BLOB_PREFIX}{tenant}#{sha}"), "BLOB")
}

/// Object key of a tenant's blob.
pub fn blob_key(tenant: &TenantId, sha: &str) -> String {
    format!("blobs/{tenant}/{sha}")
}

fn chunk_key(id: &str, offset: u64) -> String {
    format!("upload-chunks/{id}/{offset:016}")
}

pub(super) fn chunks_prefix(id: &str) -> String {
    format!("upload-chunks/{id}/")
}

/// A SHA-256 given by a client, checked (64 hex digits) and lowercased; `field` names
/// it in the error.
pub fn check_sha(field: &str, sha: &str) -> Result<String, CatalogError> {
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CatalogError::Invalid(format!(
            "{field} `{}` must be 64 hex characters (a SHA-256)",
            sha.chars().take(80).collect::<String>()
        )));
    }
    Ok(sha.to_ascii_lowercase())
}

/// An upload id as a client sends it: a ULID, or nothing of ours.
fn check_id(id: &str) -> Result<(), CatalogError> {
    if id.len() == 26 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(CatalogError::NotFound(format!(
            "upload `{}` does not exist",
            id.chars().take(80).collect::<String>()
        )))
    }
}

fn upload_item(u: &Upload) -> Item {
    let mut item = Item::new(
        upload_key(&u.tenant, &u.upload_id),
        serde_json::to_value(u).expect("serializable"),
    );
    let at = Millis::parse_rfc3339(&u.expires_at).unwrap_or_else(Millis::now);
    item.by_due = Some(super::expiry_index_key(at, &item.key.pk));
    item
}

/// Open an upload. With an idempotency key, a second call answers the first upload
/// (`false`: not created now).
pub async fn create(
    store: &dyn StateStore,
    tenant: &TenantId,
    expected_size: u64,
    expected_sha: Option<&str>,
    idempotency: Option<&super::idempotency::IdempotencyKey>,
) -> Result<(Upload, bool), CatalogError> {
    if expected_size == 0 || expected_size > MAX_UPLOAD {
        return Err(CatalogError::Invalid(format!(
            "expected_size must be 1..={MAX_UPLOAD} bytes, not {expected_size}"
        )));
    }
    let expected_sha = expected_sha
        .map(|s| check_sha("expected_sha", s))
        .transpose()?;
    if let Some(k) = idempotency
        && let Some(id) = k.earlier(store, tenant, "uploads").await?
    {
        return Ok((get(store, tenant, &id).await?, false));
    }
    let u = Upload {
        upload_id: ulid::Ulid::new().to_string(),
        tenant: tenant.clone(),
        state: UploadState::Open,
        expected_size,
        expected_sha,
        received_bytes: 0,
        chunks: Vec::new(),
        blob_sha: None,
        expires_at: Millis::now().plus(UPLOAD_LIFETIME).to_rfc3339(),
    };
    super::quotas::check(
        store,
        tenant,
        super::quotas::counters::OPEN_UPLOADS,
        1,
        super::quotas::MAX_OPEN_UPLOADS,
        "unfinished uploads",
    )
    .await?;
    let mut writes = vec![
        Write::Put {
            item: upload_item(&u),
            condition: Condition::Absent,
        },
        super::quotas::add(tenant, super::quotas::counters::OPEN_UPLOADS, 1),
    ];
    if let Some(k) = idempotency {
        writes.push(k.record(tenant, "uploads", &u.upload_id));
    }
    store.transact(writes).await.map_err(|e| {
        if e.is_conflict() {
            CatalogError::Conflict(
                "the same Idempotency-Key is being used concurrently; retry".into(),
            )
        } else {
            e.into()
        }
    })?;
    Ok((u, true))
}

/// One of the tenant's uploads (another tenant's does not exist).
pub async fn get(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<Upload, CatalogError> {
    Ok(load(store, tenant, id).await?.0)
}

async fn load(
    store: &dyn StateStore,
    tenant: &TenantId,
    id: &str,
) -> Result<(Upload, u64), CatalogError> {
    check_id(id)?;
    let item = store
        .get(&upload_key(tenant, id))
        .await?
        .ok_or_else(|| CatalogError::NotFound(format!("upload {id} does not exist")))?;
    Ok((crate::records::decode(&item)?, item.rev))
}

async fn save(store: &dyn StateStore, u: &Upload, rev: u64) -> Result<(), CatalogError> {
    save_with(store, u, rev, Vec::new()).await
}

/// Save the upload at `rev` with `more` writes in the same transaction.
async fn save_with(
    store: &dyn StateStore,
    u: &Upload,
    rev: u64,
    more: Vec<Write>,
) -> Result<(), CatalogError> {
    let mut writes = vec![Write::Put {
        item: upload_item(u),
        condition: Condition::Rev(rev),
    }];
    writes.extend(more);
    store.transact(writes).await.map_err(|e| {
        if e.is_conflict() {
            CatalogError::Conflict("the upload changed meanwhile; GET it and retry".into())
        } else {
            e.into()
        }
    })
}

fn refuse_expired(u: &Upload, now: Millis) -> Result<(), CatalogError> {
    if u.state != UploadState::Finalized
        && Millis::parse_rfc3339(&u.expires_at).is_some_and(|at| at <= now)
    {
        return Err(CatalogError::Gone(format!(
            "upload {} expired at {}; start a new upload",
            u.upload_id, u.expires_at
        )));
    }
    Ok(())
}

/// A `Content-Range: bytes A-B/TOTAL` header, parsed.
pub fn parse_content_range(v: &str) -> Result<(u64, u64, u64), CatalogError> {
    let bad = || {
        CatalogError::Invalid(format!(
            "Content-Range `{}` is not `bytes A-B/TOTAL`",
            v.chars().take(80).collect::<String>()
        ))
    };
    let rest = v.strip_prefix("bytes ").ok_or_else(bad)?;
    let (range, total) = rest.split_once('/').ok_or_else(bad)?;
    let (a, b) = range.split_once('-').ok_or_else(bad)?;
    let num = |s: &str| -> Result<u64, CatalogError> {
        if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let (a, b, total) = (num(a)?, num(b)?, num(total)?);
    if b < a || b >= total {
        return Err(bad());
    }
    Ok((a, b, total))
}

/// Take one chunk (`a..=b` of `total`).
pub async fn accept_chunk(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    id: &str,
    (a, b, total): (u64, u64, u64),
    body: Bytes,
) -> Result<Upload, CatalogError> {
    let (mut u, rev) = load(store, tenant, id).await?;
    if u.state == UploadState::Finalized {
        return Err(CatalogError::Conflict(format!("upload {id} is finalized")));
    }
    refuse_expired(&u, Millis::now())?;
    if total != u.expected_size || b < a || b >= total || body.len() as u64 != b - a + 1 {
        return Err(CatalogError::RangeNotSatisfiable(format!(
            "chunk {a}-{b}/{total} with {} bytes does not match the upload of {} bytes",
            body.len(),
            u.expected_size
        )));
    }
    if b < u.received_bytes {
        // Received already (a resend after a lost answer).
        return Ok(u);
    }
    if a != u.received_bytes {
        return Err(CatalogError::RangeNotSatisfiable(format!(
            "chunk {a}-{b}/{total} does not fit: {} of {} bytes received; send `bytes {}-…/{}` next",
            u.received_bytes, u.expected_size, u.received_bytes, u.expected_size
        )));
    }
    if u.chunks.len() + 1 >= MAX_CHUNKS && b + 1 != u.expected_size {
        return Err(CatalogError::TooLarge(format!(
            "upload {id} has {} chunks; at most {MAX_CHUNKS} are kept, so send the remaining {} bytes in one chunk, or start again with chunks of up to {MAX_CHUNK} bytes",
            u.chunks.len(),
            u.expected_size - u.received_bytes
        )));
    }
    objects.put(&chunk_key(id, a), body).await?;
    u.received_bytes = b + 1;
    u.chunks.push(a);
    if u.received_bytes == u.expected_size {
        u.state = UploadState::Received;
    }
    save(store, &u, rev).await?;
    Ok(u)
}

/// Hash the received bytes into the tenant's blob. `wanted` (a header) overrides the
/// announced hash. Chunks are joined in a file under `scratch`, one chunk in memory at a
/// time.
pub async fn finalize(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    scratch: &Path,
    tenant: &TenantId,
    id: &str,
    wanted: Option<&str>,
) -> Result<Upload, CatalogError> {
    let (mut u, rev) = load(store, tenant, id).await?;
    if u.state == UploadState::Finalized {
        return Ok(u);
    }
    refuse_expired(&u, Millis::now())?;
    if u.received_bytes != u.expected_size {
        return Err(CatalogError::Conflict(format!(
            "upload {id} has {} of {} bytes; send the rest first",
            u.received_bytes, u.expected_size
        )));
    }
    let wanted = wanted
        .map(|w| check_sha("X-Content-SHA256", w))
        .transpose()?
        .or(u.expected_sha.clone());
    std::fs::create_dir_all(scratch).map_err(|e| CatalogError::io(scratch, e))?;
    let joined = scratch.join(format!("upload-{id}-{}", ulid::Ulid::new()));
    let result = join_and_store(store, objects, &u, &joined, wanted.as_deref()).await;
    let _ = std::fs::remove_file(&joined);
    let sha = result?;
    u.state = UploadState::Finalized;
    u.blob_sha = Some(sha);
    u.expires_at = Millis::now().plus(BLOB_LIFETIME).to_rfc3339();
    // No longer open: counted once, by the write that finalizes it.
    super::quotas::ensure_usage(store, tenant).await?;
    save_with(
        store,
        &u,
        rev,
        vec![super::quotas::add(
            tenant,
            super::quotas::counters::OPEN_UPLOADS,
            -1,
        )],
    )
    .await?;
    for offset in &u.chunks {
        let _ = objects.delete(&chunk_key(id, *offset)).await;
    }
    Ok(u)
}

async fn join_and_store(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    u: &Upload,
    joined: &Path,
    wanted: Option<&str>,
) -> Result<String, CatalogError> {
    use std::io::Write as _;
    let mut out = std::fs::File::create(joined).map_err(|e| CatalogError::io(joined, e))?;
    let mut hasher = Sha256::new();
    for offset in &u.chunks {
        let part = objects.get(&chunk_key(&u.upload_id, *offset)).await?;
        hasher.update(&part);
        out.write_all(&part)
            .map_err(|e| CatalogError::io(joined, e))?;
    }
    out.sync_all().map_err(|e| CatalogError::io(joined, e))?;
    drop(out);
    let sha = hex::encode(hasher.finalize());
    if let Some(w) = wanted
        && w != sha
    {
        return Err(CatalogError::Invalid(format!(
            "the bytes hash to {sha}, not the expected {w}; upload again"
        )));
    }
    keep_blob(store, &u.tenant, &sha, u.expected_size).await?;
    objects.put_file(&blob_key(&u.tenant, &sha), joined).await?;
    Ok(sha)
}

/// Mark the blob live until [`BLOB_LIFETIME`] from now, before its bytes are written: a
/// collection already under way makes this fail (retry), and once marked, a collection
/// that read the older mark fails its own condition.
async fn keep_blob(
    store: &dyn StateStore,
    tenant: &TenantId,
    sha: &str,
    bytes: u64,
) -> Result<(), CatalogError> {
    let key = blob_record_key(tenant, sha);
    let until = Millis::now().plus(BLOB_LIFETIME);
    let mut item = Item::new(
        key.clone(),
        serde_json::json!({ "tenant": tenant, "sha": sha, "state": "live", "live_until": until, "bytes": bytes }),
    );
    item.by_due = Some(super::expiry_index_key(until, &key.pk));
    let put = |condition, more: Vec<Write>| {
        let mut writes = vec![Write::Put {
            item: item.clone(),
            condition,
        }];
        writes.extend(more);
        store.transact(writes)
    };
    // A new blob counts its bytes against the tenant's quota, once: the write that
    // creates its record adds them, the one that deletes it takes them back.
    let exists = store.get(&key).await?.is_some();
    if !exists {
        super::quotas::check(
            store,
            tenant,
            super::quotas::counters::BLOB_BYTES,
            bytes,
            super::quotas::MAX_BLOB_BYTES,
            "bytes of finalized uploads",
        )
        .await?;
    }
    let count = vec![super::quotas::add(
        tenant,
        super::quotas::counters::BLOB_BYTES,
        bytes as i64,
    )];
    match put(Condition::Absent, count).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_conflict() => put(Condition::field_eq("state", "live"), Vec::new())
            .await
            .map(|_| ())
            .map_err(|e| {
                if e.is_conflict() {
                    CatalogError::Unavailable(format!(
                        "blob {sha} is being collected right now; finalize again in a moment"
                    ))
                } else {
                    e.into()
                }
            }),
        Err(e) => Err(e.into()),
    }
}

/// A blob's bytes, if it is at most `max` bytes: its size is read first, so naming a
/// 1 GiB blob where a photo is expected costs nothing. `field` names it in errors.
pub async fn read_blob(
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    field: &str,
    sha: &str,
    max: u64,
) -> Result<Bytes, CatalogError> {
    let key = check_blob(objects, tenant, field, sha, max).await?;
    match objects.get(&key).await {
        Err(ObjectStoreError::NotFound(_)) => Err(missing_blob(field, sha)),
        other => Ok(other?),
    }
}

/// That a finalized upload `sha` of `tenant` exists and is at most `max` bytes, without
/// reading it: its object key.
pub async fn check_blob(
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    field: &str,
    sha: &str,
    max: u64,
) -> Result<String, CatalogError> {
    let sha = check_sha(field, sha)?;
    let key = blob_key(tenant, &sha);
    let meta = objects
        .head(&key)
        .await?
        .ok_or_else(|| missing_blob(field, &sha))?;
    if meta.size > max {
        return Err(CatalogError::TooLarge(format!(
            "{field}: blob {sha} is {} MiB; at most {} MiB is accepted here",
            meta.size >> 20,
            max >> 20
        )));
    }
    Ok(key)
}

/// The blob is not stored. An upload record may still say `finalized` with this hash:
/// a photo that took the upload in erased its bytes (so the unblurred file cannot be
/// added again or read back), and an expired blob is collected before its record.
fn missing_blob(field: &str, sha: &str) -> CatalogError {
    CatalogError::Invalid(format!(
        "{field}: no finalized upload has blob_sha {} stored: it was never uploaded, it \
         expired, or a photo already took it in (which erases the upload's bytes); upload \
         the file first",
        sha.to_ascii_lowercase()
    ))
}

/// Erase a blob now (a removed subject's reference photo, a photo's upload once taken
/// in): its bytes and its record, the way the collector does ([`collect_blob`]). A
/// finalize of the same bytes racing it wins: that upload's blob stays.
pub async fn erase_blob(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    tenant: &TenantId,
    sha: &str,
) -> Result<(), CatalogError> {
    let sha = check_sha("blob_sha", sha)?;
    match store.get(&blob_record_key(tenant, &sha)).await? {
        Some(record) => {
            collect_blob(store, objects, &record).await?;
        }
        // Bytes with no record (a collection that stopped between its two deletes).
        None => objects.delete(&blob_key(tenant, &sha)).await?,
    }
    Ok(())
}

/// Collect the blob of `record` (as it was read): mark it `collecting` on that revision,
/// delete its bytes, then delete its record and give its bytes back to the tenant's
/// quota. Marked first, so that a finalize of the same bytes that comes now is told to
/// retry, and one that marked the blob live after `record` was read makes the mark fail:
/// then nothing is deleted and this answers `false`. Deleting the bytes first without
/// the mark could delete a new upload's bytes under its live record, or leave bytes a
/// racing finalize wrote back with no record to collect or count them.
pub(super) async fn collect_blob(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    record: &Item,
) -> Result<bool, CatalogError> {
    let tenant: TenantId = serde_json::from_value(record.body["tenant"].clone())
        .map_err(|e| CatalogError::Invalid(format!("blob record: {e}")))?;
    let sha = check_sha(
        "blob record",
        record.body["sha"].as_str().unwrap_or_default(),
    )?;
    let marked = store
        .transact(vec![Write::Set {
            key: record.key.clone(),
            fields: vec![("state".into(), "collecting".into())],
            condition: Condition::Rev(record.rev),
        }])
        .await;
    match marked {
        Err(e) if e.is_conflict() => return Ok(false),
        other => other?,
    };
    objects.delete(&blob_key(&tenant, &sha)).await?;
    super::quotas::ensure_usage(store, &tenant).await?;
    store
        .transact(vec![
            Write::Delete {
                key: record.key.clone(),
                condition: Condition::field_eq("state", "collecting"),
            },
            release_blob(&tenant, record),
        ])
        .await?;
    Ok(true)
}

/// The counter write that gives a blob record's bytes back to its tenant's quota.
pub(super) fn release_blob(tenant: &TenantId, record: &Item) -> Write {
    super::quotas::add(
        tenant,
        super::quotas::counters::BLOB_BYTES,
        -record.body["bytes"].as_i64().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests;
