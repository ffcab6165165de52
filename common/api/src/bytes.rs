//! Serving immutable bytes: strong ETag (the content's SHA-256), `If-None-Match` → 304,
//! `Range: bytes=A-B` → 206 with `Content-Range`, unsatisfiable ranges → 416.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// Answer a GET for `bytes` of `content_type`, honouring the request's validators and
/// range; `etag` defaults to the bytes' SHA-256.
pub fn serve(
    req: &HeaderMap,
    bytes: ::bytes::Bytes,
    content_type: &str,
    etag: Option<String>,
) -> Response {
    let etag = format!(
        "\"{}\"",
        etag.unwrap_or_else(|| hex::encode(Sha256::digest(&bytes)))
    );
    let mut base = HeaderMap::new();
    base.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex is a valid header"),
    );
    base.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    base.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(inm) = req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok())
        && inm.split(',').any(|t| t.trim() == etag || t.trim() == "*")
    {
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
        None => {
            base.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{len}")).expect("ascii"),
            );
            (StatusCode::RANGE_NOT_SATISFIABLE, base).into_response()
        }
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
