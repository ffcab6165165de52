//! `tessera serve` as a user starts it: it prints where it listens (and, with API keys,
//! the first admin key once), answers HTTP, and enforces the keys.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use tessera_tests::{Killed, http, tessera_bin};

/// `tessera serve` on a free loopback port over the state in `dir`, stderr piped.
fn serve(dir: &std::path::Path, extra: &[&str]) -> Command {
    let mut c = Command::new(tessera_bin());
    c.args([
        "--state",
        dir.to_str().unwrap(),
        "serve",
        "--addr",
        "127.0.0.1:0",
    ])
    .args(extra)
    .stderr(Stdio::piped());
    c
}

#[test]
fn serve_listens_prints_its_first_admin_key_and_enforces_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve(dir.path(), &["--auth", "api_key", "--no-workers"])
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _guard = Killed(child);
    let mut key = None;
    let mut addr = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.starts_with("tsk_") {
            key = Some(line.trim().to_string());
        }
        if let Some(a) = line.strip_prefix("serving the Tessera API on http://") {
            addr = Some(a.trim().to_string());
            break;
        }
    }
    let addr = addr.expect("serve printed its address");
    let key = key.expect("the first admin key is printed once");
    assert_eq!(http(&addr, "GET /healthz", None).0, 200);
    let (status, body) = http(&addr, "GET /v1/projects", None);
    assert_eq!(status, 401);
    assert!(body.contains("application/problem+json"));
    assert_eq!(http(&addr, "GET /v1/projects", Some(&key)).0, 200);
    assert_eq!(
        http(&addr, "GET /v1/projects", Some("tsk_not-a-key")).0,
        401
    );
    let (status, body) = http(&addr, "GET /openapi.json", None);
    assert_eq!(status, 200);
    assert!(body.contains("\"openapi\":\"3.1.0\""));
}

/// A `tessera serve` whose worker loop dies does not go on answering HTTP while no job
/// runs: it exits non-zero, saying why, for its supervisor to restart it. The loop is
/// made to die by the one fault it has (`TESSERA_FAULT=worker-loop-dies`, a panic right
/// after it starts).
#[test]
fn serve_exits_non_zero_when_its_worker_loop_dies() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve(dir.path(), &[])
        .env("TESSERA_FAULT", "worker-loop-dies")
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            all.push_str(&line.unwrap());
            all.push('\n');
        }
        all
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept running with a dead worker loop");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let log = reader.join().unwrap();
    assert!(!status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("the worker loop stopped while the server was running"),
        "{log}"
    );
}

/// `--local-root` over the folder that holds the server's own state (the working folder,
/// where the state is by default): no dataset source reaches the state's objects, which
/// are every original unblurred. A source rooted inside the state is refused by name, and
/// one over the whole root imports the photos beside it and nothing of the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_root_over_the_state_folder_never_reaches_the_servers_own_objects() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let photos = tessera_tests::sample_photos(&root, 1);
    let state = root.join(".tessera");
    // An original where the folder store keeps one, before the server starts.
    let original = state.join("objects/uploads/p/ph/IMG_secret.jpg");
    std::fs::create_dir_all(original.parent().unwrap()).unwrap();
    let first = std::fs::read_dir(&photos).unwrap().next().unwrap().unwrap();
    std::fs::copy(first.path(), &original).unwrap();
    let root_arg = root.to_str().unwrap();
    let served = tessera_tests::serve_with(
        &state,
        "api_key",
        &["--no-workers", "--local-root", root_arg],
        &[],
    );
    let c = served.admin_client();
    let p = tessera_tests::post_json(
        &c,
        &format!("{}/v1/projects", served.base),
        serde_json::json!({ "name": "flight" }),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap();
    let create = |source: serde_json::Value| {
        c.post(format!("{}/v1/projects/{pid}/datasets", served.base))
            .json(&serde_json::json!({ "name": "d", "source": source }))
            .send()
    };
    for inside in [state.clone(), state.join("objects/uploads")] {
        let r = create(serde_json::json!({ "kind": "local", "root": inside, "recursive": true }))
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{}", inside.display());
        let v: serde_json::Value = r.json().await.unwrap();
        assert!(
            v["detail"].as_str().unwrap().contains("state folder"),
            "{v}"
        );
    }
    let r = create(serde_json::json!({ "kind": "local", "root": root, "recursive": true }))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let d: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        d["x-import"]["registered"], 1,
        "the photo beside the state only: {d}"
    );
    assert!(!d.to_string().contains("IMG_secret"), "{d}");
}
