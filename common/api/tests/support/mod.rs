//! What the HTTP tests share: a server on 127.0.0.1 over the real embedded adapters,
//! uploads, sample photos, face models, and dumps of the store.
#![allow(dead_code)]

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_api::server::ServerSetup;
use tessera_core::ports::ObjectStore;
use tessera_engine::{Engine, EngineConfig, Worker};
use tessera_local::StateDir;
use tessera_local::embedded::{self, Memory};
use tokio_util::sync::CancellationToken;

pub struct Server {
    pub base: String,
    pub engine: Engine,
    pub stop: CancellationToken,
    /// Stops only the worker loop (where the server runs one), as its death would.
    pub worker_stop: CancellationToken,
    pub _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn serve(auth: AuthMode, workers: bool) -> Server {
    serve_with(auth, workers, None).await
}

pub async fn serve_with(
    auth: AuthMode,
    workers: bool,
    faces: Option<Arc<tessera_jobs::photos::FaceService>>,
) -> Server {
    serve_sources(auth, workers, faces, Default::default()).await
}

pub async fn serve_sources(
    auth: AuthMode,
    workers: bool,
    faces: Option<Arc<tessera_jobs::photos::FaceService>>,
    sources: tessera_api::sources::Sources,
) -> Server {
    serve_over(auth, workers, faces, sources, |o| o).await
}

/// A server whose object store is the folder one as `wrap` returns it (one that makes a
/// race certain, say).
pub async fn serve_over(
    auth: AuthMode,
    workers: bool,
    faces: Option<Arc<tessera_jobs::photos::FaceService>>,
    sources: tessera_api::sources::Sources,
    wrap: impl FnOnce(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    // Embedded mode's ports and `tessera serve`'s server; what differs is named: a
    // memory budget that is the same on every machine, the object store as `wrap`
    // returns it, a worker that polls often, and one allowed cross-origin page.
    let ports =
        embedded::ports_wrapped(&state, Memory::Fixed { bytes: 8 << 30 }, |s| s, wrap).unwrap();
    let engine = Engine::new(
        ports,
        EngineConfig {
            scratch: state.work(),
            ..EngineConfig::default()
        },
        tessera_jobs::registry(),
    );
    engine.ensure_queue().await.unwrap();
    let running = tessera_api::server::start(
        engine.clone(),
        ServerSetup {
            cors_origins: vec![ALLOWED_PAGE.into()],
            workers: workers.then_some(2),
            worker_poll: Duration::from_millis(200),
            sources,
            faces,
            ..ServerSetup::new("127.0.0.1:0".parse().unwrap(), auth)
        },
    )
    .await
    .unwrap();
    let base = format!("http://{}", running.addr);
    let (stop, worker_stop) = (running.stop.clone(), running.worker_stop.clone());
    // Dropping the handle leaves the server running until `stop`.
    drop(running);
    Server {
        base,
        engine,
        stop,
        worker_stop,
        _dir: dir,
    }
}

/// The one cross-origin page the test servers allow.
pub const ALLOWED_PAGE: &str = "https://console.example";

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

pub async fn problem(r: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(r.status(), status);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], status.as_u16());
    assert!(
        v["type"]
            .as_str()
            .unwrap()
            .starts_with("https://sfmapi.github.io/errors/")
    );
    assert!(
        v["instance"].as_str().is_some_and(|i| i.starts_with('/')),
        "sfmapi §3.4: a problem names its instance: {v}"
    );
    v
}

/// Upload `bytes` in chunks of `chunk` bytes; returns the blob's SHA-256.
pub async fn upload(c: &reqwest::Client, base: &str, bytes: &[u8], chunk: usize) -> String {
    let u: Value = c
        .post(format!("{base}/v1/uploads"))
        .json(&json!({"expected_size": bytes.len()}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = u["upload_id"].as_str().unwrap().to_string();
    for (i, part) in bytes.chunks(chunk).enumerate() {
        let a = i * chunk;
        let r = c
            .patch(format!("{base}/v1/uploads/{id}"))
            .header(
                "content-range",
                format!("bytes {a}-{}/{}", a + part.len() - 1, bytes.len()),
            )
            .body(part.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let f: Value = c
        .post(format!("{base}/v1/uploads/{id}:finalize"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(f["state"], "finalized");
    f["blob_sha"].as_str().unwrap().to_string()
}

/// The JSON body of a GET of `url` by `c`.
pub async fn get_json(c: &reqwest::Client, url: &str) -> Value {
    json_of(c.get(url).send().await.unwrap()).await
}

/// A new project of `body` (`{"name": …, …}`) created by `c`: its id.
pub async fn new_project(c: &reqwest::Client, base: &str, body: Value) -> String {
    let r = c
        .post(format!("{base}/v1/projects"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "creating project {body}");
    let p: Value = r.json().await.unwrap();
    p["project_id"].as_str().unwrap().to_string()
}

/// A project with a dataset holding the first `n` sample photos, uploaded in chunks of
/// `chunk` bytes; returns (project id, dataset id).
pub async fn dataset_of_samples(
    c: &reqwest::Client,
    base: &str,
    name: &str,
    n: usize,
    chunk: usize,
) -> (String, String) {
    let pid = new_project(c, base, json!({"name": name})).await;
    let d: Value = c
        .post(format!("{base}/v1/projects/{pid}/datasets"))
        .json(&json!({"name": name}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let did = d["dataset_id"].as_str().unwrap().to_string();
    for (file, bytes) in sample_photos(n) {
        let sha = upload(c, base, &bytes, chunk).await;
        let r = c
            .post(format!("{base}/v1/datasets/{did}/images"))
            .json(&json!({"name": file, "blob_sha": sha}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    (pid, did)
}

pub fn sample_photos(n: usize) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../sample/images");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .take(n)
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

pub fn ulid_like() -> String {
    tessera_core::JobId::new().to_string()
}

pub fn face_models() -> Arc<tessera_jobs::photos::FaceService> {
    let shared = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../../shared/models");
    let rt = tessera_faces::OnnxRuntime::from_env().expect("ORT_DYLIB_PATH (scripts/env.sh)");
    let m = tessera_faces::FaceModels::load(
        &rt,
        &tessera_faces::ModelFiles::in_dir(shared),
        tessera_faces::DetectorKind::Yunet,
        1,
    )
    .unwrap();
    Arc::new(tessera_jobs::photos::FaceService::with_models(Arc::new(m)))
}

pub fn face_photo(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
            .join("../../../shared/testdata/faces")
            .join(name),
    )
    .unwrap()
}

/// Poll a photo until `done` holds.
pub async fn photo_when(c: &reqwest::Client, url: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let r = c.get(url).send().await.unwrap();
        if r.status() == 200 {
            let v: Value = r.json().await.unwrap();
            if done(&v) {
                return v;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "photo never reached the state wanted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every object key in the server's store.
pub async fn all_objects(s: &Server) -> Vec<String> {
    let objects = s.engine.ports().objects.clone();
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = objects.list("", after.as_deref(), 1000).await.unwrap();
        out.extend(page.into_iter().map(|m| m.key));
        match next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

/// Every state item of the server, as `pk | sk | body`.
pub fn all_items(s: &Server) -> Vec<String> {
    let state = StateDir::open(s._dir.path()).unwrap();
    let db = rusqlite::Connection::open(state.state_db()).unwrap();
    let mut q = db.prepare("SELECT pk, sk, body FROM items").unwrap();
    q.query_map([], |r| {
        Ok(format!(
            "{} | {} | {}",
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Start a worker on the server's engine until the returned token is cancelled (a test
/// that compares the store before and after needs nothing running in the background).
pub fn start_worker(s: &Server) -> CancellationToken {
    start_worker_joinable(s).0
}

/// [`start_worker`], and the worker's run: cancelled, it ends once the tasks it had in
/// flight have, so a test that awaits it knows nothing runs any more.
pub fn start_worker_joinable(s: &Server) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let w = Worker::new(s.engine.clone(), 2, Some(Duration::from_millis(200)));
    let t = stop.clone();
    let run = tokio::spawn(async move { w.run(t).await });
    (stop, run)
}

/// A client that sends `key` as its bearer token.
pub fn as_key(key: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("authorization", format!("Bearer {key}").parse().unwrap());
    reqwest::Client::builder()
        .default_headers(h)
        .build()
        .unwrap()
}

/// An admin client and a non-admin one of the local tenant.
pub async fn admin_and_viewer(s: &Server) -> (reqwest::Client, reqwest::Client) {
    let store = s.engine.ports().store.clone();
    let (_, admin) =
        tessera_api::auth::create_key(store.as_ref(), tessera_core::TenantId::local(), true)
            .await
            .unwrap();
    let (_, viewer) =
        tessera_api::auth::create_key(store.as_ref(), tessera_core::TenantId::local(), false)
            .await
            .unwrap();
    (as_key(&admin), as_key(&viewer))
}

/// A response's JSON body.
pub async fn json_of(r: reqwest::Response) -> serde_json::Value {
    r.json().await.unwrap()
}

/// A fresh admin key of the local tenant.
pub async fn admin_key(s: &Server) -> String {
    tessera_api::auth::create_key(
        s.engine.ports().store.as_ref(),
        tessera_core::TenantId::local(),
        true,
    )
    .await
    .unwrap()
    .1
}

/// A client with a fresh admin key of the local tenant: how the tests call a server by
/// default, as production's callers do (`api_key` mode).
pub async fn admin_client(s: &Server) -> reqwest::Client {
    as_key(&admin_key(s).await)
}

/// A WebSocket handshake to `url` carrying `key`, as a client of an `api_key` server
/// sends it.
pub fn ws_request(
    key: &str,
    url: String,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut r = url.into_client_request().unwrap();
    r.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

/// Parse SSE frames from a byte stream until `stop` frames or the stream ends.
pub async fn read_events(r: reqwest::Response, stop_after: Option<usize>) -> Vec<(u64, String)> {
    use futures_util::StreamExt;
    let mut stream = r.bytes_stream();
    let mut buf = String::new();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let id = frame
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .map(|v| v.trim().parse::<u64>().unwrap());
            let event = frame
                .lines()
                .find_map(|l| l.strip_prefix("event:"))
                .map(|v| v.trim().to_string());
            if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data:")) {
                let v: Value = serde_json::from_str(data.trim()).unwrap();
                assert_eq!(v["schema_version"], 1);
                assert!(v["ts"].as_str().unwrap().ends_with('Z'));
                assert_eq!(Some(v["kind"].as_str().unwrap().to_string()), event);
                // Every event, and the id-less `stream_end` notice, is sfmapi's v1.
                let wrong = tessera_conformance::sfmapi_event::violations(&v);
                assert!(wrong.is_empty(), "{v}: {wrong:?}");
                if id.is_some() {
                    assert_eq!(Some(v["seq"].as_u64().unwrap()), id);
                }
            }
            if let (Some(id), Some(event)) = (id, event) {
                out.push((id, event));
                if stop_after.is_some_and(|n| out.len() >= n) {
                    return out;
                }
            }
        }
    }
    out
}
