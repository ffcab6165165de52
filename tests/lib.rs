//! Helpers for the workspace-level tests: they run the real `tessera` binary, built by
//! `cargo test --workspace` (or `cargo build -p tessera-cli`) next to the test binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `tessera` binary under test: `$TESSERA_BIN`, or the one in this target directory.
pub fn tessera_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join("tessera");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p tessera-cli` (or `cargo test --workspace`) first",
        bin.display()
    );
    bin
}

/// The repository root. Read at run time (cargo sets `CARGO_MANIFEST_DIR` when it runs
/// tests), so a test binary built from another checkout that shares the target
/// directory still looks at this one.
pub fn repo_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests");
    manifest
        .parent()
        .expect("tests/ is in the repo root")
        .to_path_buf()
}

/// The first `n` bundled sample photos (by name) copied into `DIR/photos`: geotagged
/// drone photos, the reconstruction tests' input.
/// The fixed-wing survey's photos `IMG_<first>` … `IMG_<last - 1>` copied into
/// `dir/photos`, which is returned.
pub fn survey_photos(dir: &Path, numbers: std::ops::Range<u32>) -> PathBuf {
    let out = dir.join("photos");
    std::fs::create_dir_all(&out).unwrap();
    let survey = repo_root().join("../shared/datasets/odm_seneca_80/images");
    for n in numbers {
        let name = format!("IMG_{n:04}.jpg");
        std::fs::copy(survey.join(&name), out.join(&name)).unwrap();
    }
    out
}

pub fn sample_photos(dir: &Path, n: usize) -> PathBuf {
    let out = dir.join("photos");
    std::fs::create_dir_all(&out).unwrap();
    let mut all: Vec<_> = std::fs::read_dir(repo_root().join("sample/images"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    for p in all.into_iter().take(n) {
        std::fs::copy(&p, out.join(p.file_name().unwrap())).unwrap();
    }
    out
}

/// Run `tessera --state STATE ARGS…` and capture its output.
pub fn tessera(state: &Path, args: &[&str]) -> Output {
    Command::new(tessera_bin())
        .arg("--state")
        .arg(state)
        .args(args)
        .env_remove("TESSERA_STATE")
        .output()
        .expect("run tessera")
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard output parsed as one JSON value.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            stdout(o),
            stderr(o)
        )
    })
}

/// One HTTP/1.1 request over a fresh connection (`GET /path`), with an optional bearer
/// key: the status and the whole response, headers included.
pub fn http(addr: &str, request_line: &str, auth: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let auth = auth
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{request_line} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    (status, out)
}

/// A child process killed and reaped when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// POST `body` as JSON to `url`; the answer's JSON, which must be a success.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let r = client.post(url).json(&body).send().await.unwrap();
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {v}");
    v
}

/// A finalized upload of `bytes` (one chunk); its blob's SHA-256.
pub async fn blob(client: &reqwest::Client, base: &str, bytes: &[u8]) -> String {
    let u = post_json(
        client,
        &format!("{base}/v1/uploads"),
        serde_json::json!({"expected_size": bytes.len()}),
    )
    .await;
    let id = u["upload_id"].as_str().unwrap();
    let r = client
        .patch(format!("{base}/v1/uploads/{id}"))
        .header(
            "content-range",
            format!("bytes 0-{}/{}", bytes.len() - 1, bytes.len()),
        )
        .body(bytes.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let f = post_json(
        client,
        &format!("{base}/v1/uploads/{id}:finalize"),
        serde_json::json!({}),
    )
    .await;
    f["blob_sha"].as_str().unwrap().to_string()
}

/// `tessera serve` running on a free loopback port, killed and reaped when dropped.
pub struct Served {
    /// The server process (its pid for /proc reads).
    pub child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The first admin key, printed once by a server started with `--auth api_key`.
    pub first_key: Option<String>,
}

impl Served {
    /// A client carrying the first admin key: how a test calls an `api_key` server, as
    /// production's callers do.
    pub fn admin_client(&self) -> reqwest::Client {
        keyed_client(
            self.first_key
                .as_deref()
                .expect("a server started with --auth api_key prints its first key"),
        )
    }
}

/// A client that sends `key` as its bearer token.
pub fn keyed_client(key: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}")
            .parse()
            .expect("a key is a header value"),
    );
    reqwest::Client::builder()
        .default_headers(h)
        .build()
        .expect("a client")
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `tessera serve --auth <auth>` over the state in `state`, with the repository's
/// face models and `env` set; returns once it listens. Its log is drained in the
/// background so it never blocks on a full pipe.
pub fn serve(state: &Path, auth: &str, env: &[(&str, &str)]) -> Served {
    serve_with(state, auth, &[], env)
}

/// [`serve`] with more of `tessera serve`'s arguments.
pub fn serve_with(state: &Path, auth: &str, args: &[&str], env: &[(&str, &str)]) -> Served {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(tessera_bin())
        .args(["--state", state.to_str().expect("a UTF-8 path")])
        .args(["serve", "--addr", "127.0.0.1:0", "--auth", auth])
        .args(args)
        .env("TESSERA_MODELS", repo_root().join("../shared/models"))
        .envs(env.iter().copied())
        .env_remove("TESSERA_FAULT")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tessera serve starts");
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let (mut first_key, mut base) = (None, None);
    for line in lines.by_ref() {
        let line = line.expect("a log line");
        if line.starts_with("tsk_") {
            first_key = Some(line.trim().to_string());
        }
        if let Some(a) = line.strip_prefix("serving the Tessera API on ") {
            base = Some(a.trim().to_string());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Served {
        child,
        base: base.expect("tessera serve printed its address"),
        first_key,
    }
}

/// GET `url`; the answer's JSON, which must be a success.
pub async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    let r = client.get(url).send().await.unwrap();
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {v}");
    v
}

/// Every file under `dir`, at any depth (none where it does not exist).
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
