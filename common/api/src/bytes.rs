//! Serving immutable bytes: strong ETag (the content's SHA-256), `If-None-Match` → 304,
//! `Range: bytes=A-B` → 206 with `Content-Range`, unsatisfiable ranges → 416.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tessera_core::ports::{ObjectStore, ObjectStoreError};

/// Answer a GET for the stored object `key`, reading only what is asked, as the client
/// takes it: nothing for a 304, the requested bytes for a range (only a range needs the
/// object's size first), the whole object otherwise, streamed from the store a chunk at a
/// time (a client that stalls holds one chunk of the server's memory, not the object).
///
/// An answer larger than `limit` (where the server has one: the `api` function's) is a
/// `307` to a presigned URL of the object that lives [`REDIRECT_URL_LIFETIME`], which
/// honours the same `Range`.
pub async fn serve_object(
    req: &HeaderMap,
    objects: &dyn ObjectStore,
    key: &str,
    content_type: &str,
    etag: &str,
    freshness: Freshness,
    limit: Option<u64>,
) -> Result<Response, ObjectStoreError> {
    let (etag, mut base) = validators(etag, freshness);
    if not_modified(req, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, base).into_response());
    }
    base.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    let (status, stream, length) = match req.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        None => {
            // Where answers are capped, the size decides before a read is started.
            if let Some(max) = limit {
                let size = size_of(objects, key).await?;
                if size > max {
                    return redirect(objects, key, size, max).await;
                }
            }
            let stream = objects.get_stream(key, None).await?;
            let n = stream.size;
            (StatusCode::OK, stream, n)
        }
        Some(range) => {
            let len = size_of(objects, key).await?;
            let Some((a, b)) = parse_range(range, len) else {
                return Ok(unsatisfiable(base, len));
            };
            base.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes {a}-{b}/{len}")).expect("ascii"),
            );
            // The length came from one request and the bytes come from another: an
            // object replaced in between (a checkpoint published again under its name)
            // must not be answered as a part of the old one.
            let stream = match objects.get_stream(key, Some(a..b + 1)).await {
                Ok(s) if s.size == len => s,
                Ok(_) | Err(ObjectStoreError::BadRange { .. }) => {
                    let mut p = crate::problem::Problem::unavailable(
                        "the file changed while it was being read; ask again",
                    )
                    .into_response();
                    p.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    return Ok(p);
                }
                Err(e) => return Err(e),
            };
            (StatusCode::PARTIAL_CONTENT, stream, b + 1 - a)
        }
    };
    if let Some(max) = limit.filter(|max| length > *max) {
        drop(stream);
        return redirect(objects, key, length, max).await;
    }
    base.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    Ok((status, base, Body::from_stream(stream.body)).into_response())
}

async fn size_of(objects: &dyn ObjectStore, key: &str) -> Result<u64, ObjectStoreError> {
    Ok(objects
        .head(key)
        .await?
        .ok_or_else(|| ObjectStoreError::NotFound(key.to_string()))?
        .size)
}

/// How long the URL of a [`serve_object`] redirect works: the client follows it at once,
/// and a URL that outlives that moment would outlive an unpublish or an erasure as well.
pub const REDIRECT_URL_LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

async fn redirect(
    objects: &dyn ObjectStore,
    key: &str,
    length: u64,
    max: u64,
) -> Result<Response, ObjectStoreError> {
    let Some(url) = objects.presigned_get(key, REDIRECT_URL_LIFETIME).await? else {
        return Err(ObjectStoreError::TooLarge {
            key: key.to_string(),
            size: length,
            max,
        });
    };
    let mut h = HeaderMap::new();
    h.insert(
        header::LOCATION,
        HeaderValue::from_str(&url).map_err(|e| ObjectStoreError::Io {
            key: key.to_string(),
            source: std::io::Error::other(e.to_string()),
        })?,
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok((StatusCode::TEMPORARY_REDIRECT, h).into_response())
}

/// How long a client may keep an answer without asking again. Always `private`: every
/// answer here was read with a key, and a shared cache must never hand it to another
/// caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The URL's bytes never change (an image by id, a sealed snapshot's file).
    Immutable,
    /// The URL's bytes may change or stop being served (a photo's published file after a
    /// re-blur or an unpublish), or each read must reach the server (audited reads):
    /// revalidated every time, a 304 while unchanged.
    Revalidate,
}

fn validators(etag: &str, freshness: Freshness) -> (String, HeaderMap) {
    let etag = format!("\"{etag}\"");
    let mut base = HeaderMap::new();
    base.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\"")),
    );
    base.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(match freshness {
            Freshness::Immutable => "private, max-age=31536000, immutable",
            Freshness::Revalidate => "private, no-cache",
        }),
    );
    base.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // Served bytes are whatever a client uploaded (an image registered undecoded, say):
    // a browser must take the declared type, never sniff one (HTML, script) from them.
    base.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    (etag, base)
}

fn not_modified(req: &HeaderMap, etag: &str) -> bool {
    req.get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|inm| inm.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

fn unsatisfiable(mut base: HeaderMap, len: u64) -> Response {
    base.insert(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"),
    );
    (StatusCode::RANGE_NOT_SATISFIABLE, base).into_response()
}

/// Answer a GET for `bytes` of `content_type`, honouring the request's validators and
/// range; `etag` defaults to the bytes' SHA-256.
pub fn serve(
    req: &HeaderMap,
    bytes: ::bytes::Bytes,
    content_type: &str,
    etag: Option<String>,
    freshness: Freshness,
) -> Response {
    let (etag, mut base) = validators(
        &etag.unwrap_or_else(|| hex::encode(Sha256::digest(&bytes))),
        freshness,
    );
    if not_modified(req, &etag) {
        return (StatusCode::NOT_MODIFIED, base).into_response();
    }
    base.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    let len = bytes.len() as u64;
    let Some(range) = req.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return (StatusCode::OK, base, Body::from(bytes)).into_response();
    };
    match parse_range(range, len) {
        Some((a, b)) => {
            base.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes {a}-{b}/{len}")).expect("ascii"),
            );
            (
                StatusCode::PARTIAL_CONTENT,
                base,
                Body::from(bytes.slice(a as usize..=b as usize)),
            )
                .into_response()
        }
        None => unsatisfiable(base, len),
    }
}

/// One `bytes=A-B`, `bytes=A-` or `bytes=-N` range within `len`, inclusive.
pub fn parse_range(h: &str, len: u64) -> Option<(u64, u64)> {
    let spec = h.strip_prefix("bytes=")?.trim();
    if spec.contains(',') || len == 0 {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().ok()?;
            (len.saturating_sub(n), len - 1)
        }
        (a, "") => (a.parse().ok()?, len - 1),
        (a, b) => (a.parse().ok()?, b.parse::<u64>().ok()?.min(len - 1)),
    };
    (start <= end && start < len).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::parse_range;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any `Range` text, against any length, is a range inside the object or none.
        #[test]
        fn any_range_is_inside_the_object_or_refused(h in "(bytes=)?[0-9,-]{0,24}|\\PC{0,30}", len in 0u64..1 << 40) {
            if let Some((a, b)) = parse_range(&h, len) {
                prop_assert!(a <= b && b < len);
            }
        }
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 9)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=-10", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=95-200", 100), Some((95, 99)));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=5-2", 100), None);
        assert_eq!(parse_range("bytes=0-1,4-5", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
    }
}
