//! The web console (`console/` at the repository root), built into the binary: `/`
//! serves its page and `/console/…` its files, the same from `tessera serve` and the
//! `api` function. Nothing is fetched at run time and nothing is built by cargo: the
//! files are plain ES modules and CSS, so what is in the repository is what is served.
//! A file missing from `console/` fails the build here, naming it.
//!
//! The console calls only the public API, with the caller's key; these files need no
//! key (they hold no data). A strict Content-Security-Policy keeps the page to its own
//! origin: no inline script, no third-party anything.

use ::bytes::Bytes;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

macro_rules! assets {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_bytes!(concat!("../../../console/", $path)) as &[u8])),*]
    };
}

/// Every file the console serves, by path under `console/`.
pub const ASSETS: &[(&str, &[u8])] = assets![
    "index.html",
    "app.css",
    "src/api.js",
    "src/dom.js",
    "src/main.js",
    "src/sse.js",
    "src/upload.js",
    "src/gl/math.js",
    "src/gl/points.js",
    "src/views/dataset.js",
    "src/views/job.js",
    "src/views/map.js",
    "src/views/privacy.js",
    "src/views/projects.js",
    "src/views/viewer.js",
    "src/views/webhooks.js",
];

/// The page may load only its own files and call only its own origin; images also from
/// `blob:` (photos fetched with the key) and `data:` (the empty favicon).
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Strong validators, computed once: the files change only with the binary.
fn etags() -> &'static Vec<String> {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|(_, b)| hex::encode(Sha256::digest(b))[..32].to_string())
            .collect()
    })
}

fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|(p, _)| *p == path) else {
        return crate::Problem::not_found(format!("the console has no file `{path}`"))
            .into_response();
    };
    // Revalidated every time: file names carry no hash, and a new binary must not be
    // paired with a cached old module.
    let mut r = crate::bytes::serve(
        headers,
        Bytes::from_static(ASSETS[i].1),
        content_type(path),
        Some(etags()[i].clone()),
        crate::bytes::Freshness::Revalidate,
    );
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `GET /`: the console's page.
pub async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /console/{*path}`.
pub async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}
