//! The API over real HTTP (a TCP port on 127.0.0.1) on the real embedded adapters:
//! meta and errors, projects, tenancy under API keys, jobs, and SSE resumed with
//! Last-Event-ID.

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_core::TenantId;
use tessera_engine::Engine;

mod support;
use support::*;

/// Health tells the truth about the worker loop the process runs: 200 while it runs,
/// 503 naming why once it has stopped (here stopped alone, as its death would leave it),
/// and readiness with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_worker_loop() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let status = |path: &'static str| {
        let c = c.clone();
        let url = format!("{}{path}", s.base);
        async move { c.get(url).send().await.unwrap().status() }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status("/healthz").await != StatusCode::OK {
        assert!(std::time::Instant::now() < deadline, "the loop never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status("/readyz").await, StatusCode::OK);
    s.worker_stop.cancel();
    while status("/healthz").await == StatusCode::OK {
        assert!(
            std::time::Instant::now() < deadline,
            "still healthy with no loop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = c.get(format!("{}/healthz", s.base)).send().await.unwrap();
    let v = problem(r, StatusCode::SERVICE_UNAVAILABLE).await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("worker loop has stopped"),
        "{v}"
    );
    assert_eq!(status("/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_routes_cors_and_errors() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let r = c.get(format!("{}/healthz", s.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("warning").is_none(), "{:?}", r.headers());
    // A server where every caller is the local admin says so on every answer.
    let open = serve(AuthMode::None, false).await;
    let r = client()
        .get(format!("{}/healthz", open.base))
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()["warning"]
            .to_str()
            .unwrap()
            .contains("auth mode none")
    );
    assert_eq!(
        c.get(format!("{}/readyz", s.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let v: Value = c
        .get(format!("{}/version", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["api"], "v1");
    let caps: Value = c
        .get(format!("{}/v1/capabilities", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The engine `tessera serve` would plan for on this machine (the setup installs
    // pycolmap, the default).
    assert_eq!(caps["backend"]["name"], "pycolmap", "{caps}");
    for f in [
        "projects.crud",
        "jobs.read",
        "events.sse",
        "map.incremental",
    ] {
        assert_eq!(caps["features"][f], true, "{f}");
    }
    // COLMAP 4 maps globally on a CPU; its hierarchical mapper is not wired.
    assert_eq!(caps["features"]["map.global"], true, "{caps}");
    assert!(caps["features"].get("map.hierarchical").is_none());
    problem(
        c.get(format!("{}/v1/nothing-here", s.base))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    // A page of another site gets a preflight answer with nothing that lets it go on, and
    // its request itself is refused — a form post, a fetch, a WebSocket alike.
    let pre = c
        .request(reqwest::Method::OPTIONS, format!("{}/v1/projects", s.base))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 200);
    assert!(pre.headers().get("access-control-allow-origin").is_none());
    for (method, path) in [
        (reqwest::Method::POST, "/v1/projects"),
        (reqwest::Method::GET, "/v1/projects"),
        (
            reqwest::Method::GET,
            "/ws/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV",
        ),
    ] {
        let v = problem(
            c.request(method.clone(), format!("{}{path}", s.base))
                .header("origin", "http://evil.example")
                .header("content-type", "application/json")
                .body(r#"{"name":"from-a-page"}"#)
                .send()
                .await
                .unwrap(),
            StatusCode::FORBIDDEN,
        )
        .await;
        assert!(
            v["detail"].as_str().unwrap().contains("--cors-origin"),
            "{v}"
        );
    }
    let listed: Value = c
        .get(format!("{}/v1/projects", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!listed.to_string().contains("from-a-page"), "{listed}");
    // A DNS name rebound to 127.0.0.1 carries its own Host: refused.
    let port = s.base.rsplit(':').next().unwrap();
    problem(
        c.get(format!("{}/v1/projects", s.base))
            .header("host", format!("rebound.example:{port}"))
            .send()
            .await
            .unwrap(),
        StatusCode::FORBIDDEN,
    )
    .await;
    // The server's own pages, under any of its names, and the allowed page.
    for origin in [s.base.clone(), format!("http://localhost:{port}")] {
        let r = c
            .get(format!("{}/v1/projects", s.base))
            .header("host", format!("localhost:{port}"))
            .header("origin", origin.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{origin}");
    }
    let pre = c
        .request(reqwest::Method::OPTIONS, format!("{}/v1/projects", s.base))
        .header("origin", ALLOWED_PAGE)
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 200);
    assert_eq!(pre.headers()["access-control-allow-origin"], ALLOWED_PAGE);
    assert!(
        pre.headers()["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("Location")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_are_created_idempotently_listed_and_validated() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let url = format!("{}/v1/projects", s.base);
    let r = c
        .post(&url)
        .header("idempotency-key", "k1")
        .json(&json!({"name": "alpha", "unknown": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let a: Value = r.json().await.unwrap();
    assert_eq!(
        location,
        format!("/v1/projects/{}", a["project_id"].as_str().unwrap())
    );
    assert_eq!(a["_links"]["self"]["href"], location);
    // Same key: the same project back, not a second one.
    let again: Value = c
        .post(&url)
        .header("idempotency-key", "k1")
        .json(&json!({"name": "alpha"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["project_id"], a["project_id"]);
    // Same name without the key: conflict.
    problem(
        c.post(&url)
            .json(&json!({"name": "alpha"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    problem(
        c.post(&url)
            .json(&json!({"name": "a/b"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    problem(
        c.post(&url)
            .json(&json!({"match_threshold": 7}))
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
    )
    .await;
    problem(
        c.post(&url)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
    )
    .await;
    c.post(&url)
        .json(&json!({"name": "beta"}))
        .send()
        .await
        .unwrap();
    c.post(&url)
        .json(&json!({"name": "gamma"}))
        .send()
        .await
        .unwrap();
    // AIP-158 paging.
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut req = c.get(&url).query(&[("page_size", "2")]);
        if let Some(t) = &token {
            req = req.query(&[("page_token", t)]);
        }
        let page: Value = req.send().await.unwrap().json().await.unwrap();
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap().to_string()),
        );
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    let created: Value = c
        .post(&url)
        .json(&json!({"name": "delta", "description": "with words"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["description"], "with words");
    let got: Value = c
        .get(format!("{}{location}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["name"], "alpha");
    problem(
        c.get(format!("{url}/not-an-id")).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
}

/// A demo job over a few tiny images, submitted for `tenant` straight to the engine.
async fn demo_job(engine: &Engine, tenant: TenantId, images: usize) -> tessera_core::JobId {
    let mut keys = Vec::new();
    for i in 0..images {
        let mut png = Vec::new();
        image::RgbImage::from_pixel(8 + i as u32, 6, image::Rgb([i as u8, 2, 3]))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let key = format!("uploads/demo/{}/{i}.png", tessera_core::JobId::new());
        engine.ports().objects.put(&key, png.into()).await.unwrap();
        keys.push(key);
    }
    let spec = tessera_jobs::demo::DemoSpec {
        images: keys,
        manifest_key: format!("demo/{}/manifest.json", tessera_core::JobId::new()),
    };
    engine
        .submit(spec.plan(tenant, None, "demo").unwrap())
        .await
        .unwrap()
        .job_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_cannot_see_each_other_and_keys_are_enforced() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = client();
    let store = s.engine.ports().store.clone();
    let (_, admin) = tessera_api::auth::create_key(store.as_ref(), TenantId::local(), true)
        .await
        .unwrap();
    // Keys for other tenants are the operator's (the store itself); an admin key of
    // `local` may not make them.
    let r = c
        .post(format!("{}/v1/admin/api-keys", s.base))
        .bearer_auth(&admin)
        .json(&json!({"tenant": "tenant-a", "admin": true}))
        .send()
        .await
        .unwrap();
    assert!(
        problem(r, StatusCode::FORBIDDEN).await["detail"]
            .as_str()
            .unwrap()
            .contains("operator")
    );
    let mint = |tenant: &'static str, admin: bool| {
        let store = store.clone();
        async move {
            let (k, secret) =
                tessera_api::auth::create_key(store.as_ref(), tenant.parse().unwrap(), admin)
                    .await
                    .unwrap();
            (k.key_id, secret)
        }
    };
    let (_, a) = mint("tenant-a", false).await;
    let (b_id, b) = mint("tenant-b", true).await;
    let projects = format!("{}/v1/projects", s.base);
    problem(
        c.get(&projects).send().await.unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    problem(
        c.get(&projects)
            .bearer_auth("tsk_wrong")
            .send()
            .await
            .unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    let pa: Value = c
        .post(&projects)
        .bearer_auth(&a)
        .json(&json!({"name": "shared-name"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pa["tenant_id"], "tenant-a");
    // Tenant b: the same name is free, a's project does not exist, its list is its own.
    let pb = c
        .post(&projects)
        .bearer_auth(&b)
        .json(&json!({"name": "shared-name"}))
        .send()
        .await
        .unwrap();
    assert_eq!(pb.status(), 201);
    let a_href = format!(
        "{}/v1/projects/{}",
        s.base,
        pa["project_id"].as_str().unwrap()
    );
    problem(
        c.get(&a_href).bearer_auth(&b).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(
        c.get(&a_href)
            .bearer_auth(&a)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let listed: Value = c
        .get(&projects)
        .bearer_auth(&b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(listed["items"][0]["tenant_id"], "tenant-b");
    // Jobs and events too.
    let job = demo_job(&s.engine, "tenant-a".parse().unwrap(), 1).await;
    let job_href = format!("{}/v1/jobs/{job}", s.base);
    assert_eq!(
        c.get(&job_href)
            .bearer_auth(&a)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    problem(
        c.get(&job_href).bearer_auth(&b).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    problem(
        c.get(format!("{job_href}/events"))
            .bearer_auth(&b)
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    problem(
        c.post(format!("{job_href}:cancel"))
            .bearer_auth(&b)
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    let b_jobs: Value = c
        .get(format!("{}/v1/jobs", s.base))
        .bearer_auth(&b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(b_jobs["items"].as_array().unwrap().is_empty());
    // Only admins manage keys; a revoked key stops working.
    problem(
        c.get(format!("{}/v1/admin/api-keys", s.base))
            .bearer_auth(&a)
            .send()
            .await
            .unwrap(),
        StatusCode::FORBIDDEN,
    )
    .await;
    let keys: Value = c
        .get(format!("{}/v1/admin/api-keys", s.base))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        keys["items"].as_array().unwrap().len(),
        1,
        "an admin lists its own tenant's keys only: {keys}"
    );
    assert!(
        !keys.to_string().contains(&admin),
        "secrets are never listed"
    );
    // Another tenant's key does not exist for local's admin.
    problem(
        c.delete(format!("{}/v1/admin/api-keys/{b_id}", s.base))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    // b's admin makes a second admin key, then revokes its first; the last one stays.
    let r = c
        .post(format!("{}/v1/admin/api-keys", s.base))
        .bearer_auth(&b)
        .json(&json!({"admin": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let second: Value = r.json().await.unwrap();
    let (b2_id, b2) = (
        second["key"]["key_id"].as_str().unwrap().to_string(),
        second["api_key"].as_str().unwrap().to_string(),
    );
    assert_eq!(second["key"]["tenant"], "tenant-b");
    let r = c
        .delete(format!("{}/v1/admin/api-keys/{b_id}", s.base))
        .bearer_auth(&b2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    problem(
        c.get(&projects).bearer_auth(&b).send().await.unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    problem(
        c.delete(format!("{}/v1/admin/api-keys/{b2_id}", s.base))
            .bearer_auth(&b2)
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    // The scheme is case-insensitive (RFC 9110); the secret is not.
    for header in [format!("bearer {b2}"), format!("BEARER  {b2}")] {
        let r = c
            .get(&projects)
            .header("authorization", header.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{header}");
    }
    problem(
        c.get(&projects)
            .header("authorization", format!("Bearer {}", b2.to_uppercase()))
            .send()
            .await
            .unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
}

/// Parse SSE frames from a byte stream until `stop` frames or the stream ends.
async fn read_events(r: reqwest::Response, stop_after: Option<usize>) -> Vec<(u64, String)> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resumed_with_last_event_id_delivers_every_event_exactly_once() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let job = demo_job(&s.engine, TenantId::local(), 6).await;
    let url = format!("{}/v1/jobs/{job}/events", s.base);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // Drop the connection after three events, then resume from the last id seen.
    let first = read_events(r, Some(3)).await;
    assert_eq!(first.len(), 3);
    let last = first.last().unwrap().0;
    let rest = read_events(
        c.get(&url)
            .header("last-event-id", last.to_string())
            .send()
            .await
            .unwrap(),
        None,
    )
    .await;
    let ids: Vec<u64> = first.iter().chain(&rest).map(|e| e.0).collect();
    let stored = s.engine.ports().events.last_seq(job).await.unwrap();
    assert!(stored >= 6, "the job emitted events: {stored}");
    assert_eq!(
        ids,
        (1..=stored).collect::<Vec<_>>(),
        "every event once, in order"
    );
    // The job is over; its detail says so, with its tasks.
    let detail: Value = c
        .get(format!("{}/v1/jobs/{job}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["status"], "succeeded");
    assert_eq!(detail["tasks"].as_array().unwrap().len(), 7);
    assert_eq!(
        detail["_links"]["events"]["href"],
        format!("/v1/jobs/{job}/events")
    );
    problem(
        c.get(&url)
            .header("last-event-id", "x")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
    )
    .await;
    problem(
        c.post(format!("{}/v1/jobs/{job}:explode", s.base))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_resume_over_http() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let job = demo_job(&s.engine, TenantId::local(), 2).await;
    let cancelled: Value = c
        .post(format!("{}/v1/jobs/{job}:cancel?force=true", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cancelled["cancel_requested"], true);
    assert_eq!(cancelled["cancel_force"], true);
    assert_eq!(cancelled["status"], "cancelled_dirty");
    let resumed = c
        .post(format!("{}/v1/jobs/{job}:resume", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 202, "{:?}", resumed.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_uploads_resume_after_a_dropped_chunk_and_check_their_hash() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&data))
    };
    let create = |key: &'static str| {
        c.post(format!("{}/v1/uploads", s.base))
            .header("idempotency-key", key)
            .json(&json!({"expected_size": data.len(), "expected_sha": sha}))
    };
    let r = create("u1").send().await.unwrap();
    assert_eq!(r.status(), 201);
    let u: Value = r.json().await.unwrap();
    let again: Value = create("u1").send().await.unwrap().json().await.unwrap();
    assert_eq!(
        again["upload_id"], u["upload_id"],
        "same Idempotency-Key, same upload"
    );
    let url = format!("{}/v1/uploads/{}", s.base, u["upload_id"].as_str().unwrap());
    let send = |a: usize, b: usize| {
        c.patch(&url)
            .header("content-range", format!("bytes {a}-{b}/{}", data.len()))
            .body(data[a..=b].to_vec())
            .send()
    };
    assert_eq!(send(0, 3999).await.unwrap().status(), 200);
    // The second chunk is lost in transit; the third arrives out of order.
    problem(
        send(8000, 9999).await.unwrap(),
        StatusCode::RANGE_NOT_SATISFIABLE,
    )
    .await;
    // Finalizing early is refused; the client asks where it stands and resumes.
    problem(
        c.post(format!("{url}:finalize")).send().await.unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    let state: Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(state["received_bytes"], 4000);
    assert_eq!(send(4000, 7999).await.unwrap().status(), 200);
    // A resend of a chunk already received changes nothing.
    let resent: Value = send(4000, 7999).await.unwrap().json().await.unwrap();
    assert_eq!(resent["received_bytes"], 8000);
    let done: Value = send(8000, 9999).await.unwrap().json().await.unwrap();
    assert_eq!(done["state"], "received");
    problem(
        c.post(format!("{url}:finalize"))
            .header("x-content-sha256", "0".repeat(64))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let fin: Value = c
        .post(format!("{url}:finalize"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fin["blob_sha"], sha);
    assert_eq!(
        s.engine
            .ports()
            .objects
            .get(&format!("blobs/local/{sha}"))
            .await
            .unwrap()
            .as_ref(),
        &data[..]
    );
    problem(
        c.patch(&url).body("x").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
    )
    .await;
    problem(
        c.post(format!("{}/v1/uploads", s.base))
            .json(&json!({"expected_size": 0}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datasets_and_images_with_range_etag_and_validation() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .json(&json!({"name": "imgs"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap();
    let r = c
        .post(format!("{}/v1/projects/{pid}/datasets", s.base))
        .json(&json!({"name": "d", "source": {"kind": "s3", "bucket": "b"}}))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::NOT_IMPLEMENTED).await;
    assert_eq!(v["capability"], "sources.s3");
    let v = problem(
        c.post(format!(
            "{}/v1/x-tessera/projects/{pid}/photos:presign",
            s.base
        ))
        .json(&json!({"name": "a.jpg"}))
        .send()
        .await
        .unwrap(),
        StatusCode::NOT_IMPLEMENTED,
    )
    .await;
    assert_eq!(
        v["capability"], "x-tessera.presigned_uploads",
        "a folder hands out no URLs"
    );
    let d: Value = c
        .post(format!("{}/v1/projects/{pid}/datasets", s.base))
        .json(&json!({"name": "d", "source": {"kind": "upload"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let did = d["dataset_id"].as_str().unwrap();
    let dhref = format!("{}/v1/projects/{pid}/datasets/{did}", s.base);
    let renamed: Value = c
        .patch(&dhref)
        .json(&json!({"name": "trip", "camera_model": "PINHOLE"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (renamed["name"].as_str(), renamed["camera_model"].as_str()),
        (Some("trip"), Some("PINHOLE"))
    );
    problem(
        c.patch(&dhref)
            .json(&json!({"camera_model": "FISHEYE_9000"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let got: Value = c.get(&dhref).send().await.unwrap().json().await.unwrap();
    assert_eq!(got["name"], "trip");
    // A dataset with no images cannot be reconstructed: 422 before any job exists.
    let r = c
        .post(format!(
            "{}/v1/projects/{pid}/pipelines/incremental",
            s.base
        ))
        .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}}))
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(
        s.engine
            .list_jobs(&TenantId::local(), None, 10)
            .await
            .unwrap()
            .0
            .is_empty()
    );
    let r = c
        .post(format!(
            "{}/v1/projects/{pid}/pipelines/hierarchical",
            s.base
        ))
        .json(&json!({"dataset_id": did, "spec": {"kind": "hierarchical"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(r, StatusCode::NOT_IMPLEMENTED).await["capability"],
        "map.hierarchical"
    );

    let photos = sample_photos(3);
    let mut shas = Vec::new();
    for (_, bytes) in &photos {
        shas.push(upload(&c, &s.base, bytes, 50_000).await);
    }
    let img: Value = c
        .post(format!("{}/v1/datasets/{did}/images", s.base))
        .json(&json!({"name": photos[0].0, "blob_sha": shas[0]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (img["width"].as_u64(), img["height"].as_u64()),
        (Some(800), Some(600))
    );
    let batch = c
        .post(format!("{}/v1/datasets/{did}/images:batchCreate", s.base))
        .json(&json!({"requests": [{"name": photos[1].0, "blob_sha": shas[1]}, {"name": photos[2].0, "blob_sha": shas[2]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(batch.status(), 201);
    problem(
        c.post(format!("{}/v1/datasets/{did}/images", s.base))
            .json(&json!({"name": photos[0].0, "blob_sha": shas[0]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    // The same name with other bytes: 409, and the existing image still serves its own.
    problem(
        c.post(format!("{}/v1/datasets/{did}/images", s.base))
            .json(&json!({"name": photos[0].0, "blob_sha": shas[1]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    let served = c
        .get(format!(
            "{}/v1/images/{}/bytes",
            s.base,
            img["image_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        served[..] == photos[0].1[..],
        "a 409 changed the existing image's bytes"
    );
    for long_or_bad in [
        "a".repeat(256) + ".jpg",
        "..".into(),
        "a\\b.jpg".into(),
        "a\u{1}.jpg".into(),
    ] {
        problem(
            c.post(format!("{}/v1/datasets/{did}/images", s.base))
                .json(&json!({"name": long_or_bad, "blob_sha": shas[1]}))
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    }
    problem(
        c.post(format!("{}/v1/datasets/{did}/images", s.base))
            .json(&json!({"name": "x.jpg", "blob_sha": "ab".repeat(32)}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let listed: Value = c
        .get(format!("{}/v1/datasets/{did}/images", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3);

    let bytes_url = format!(
        "{}/v1/images/{}/bytes",
        s.base,
        img["image_id"].as_str().unwrap()
    );
    let full = c.get(&bytes_url).send().await.unwrap();
    let etag = full.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(full.bytes().await.unwrap().as_ref(), &photos[0].1[..]);
    assert_eq!(
        c.get(&bytes_url)
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap()
            .status(),
        304
    );
    let part = c
        .get(&bytes_url)
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        part.headers()["content-range"],
        format!("bytes 10-19/{}", photos[0].1.len())
    );
    assert_eq!(part.bytes().await.unwrap().as_ref(), &photos[0].1[10..20]);
    assert_eq!(
        c.get(&bytes_url)
            .header("range", format!("bytes={}-", photos[0].1.len()))
            .send()
            .await
            .unwrap()
            .status(),
        416
    );

    assert_eq!(
        c.delete(format!(
            "{}/v1/datasets/{did}/images/{}",
            s.base, photos[2].0
        ))
        .send()
        .await
        .unwrap()
        .status(),
        204
    );
    problem(
        c.delete(format!(
            "{}/v1/datasets/{did}/images/{}",
            s.base, photos[2].0
        ))
        .send()
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    let listed: Value = c
        .get(format!("{}/v1/datasets/{did}/images", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
}

/// Parse `application/x-sfm-points-v1`: the count and the ids, checking the layout.
fn parse_points(b: &[u8]) -> Vec<u64> {
    assert_eq!(&b[..8], b"SFMP3D\0\0");
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 1);
    let n = u64::from_le_bytes(b[12..20].try_into().unwrap()) as usize;
    assert_eq!(b.len(), 44 + 26 * n);
    (0..n)
        .map(|i| u64::from_le_bytes(b[44 + 26 * i + 18..44 + 26 * i + 26].try_into().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_recipe_over_http_ends_in_a_sealed_snapshot_whose_points_parse() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "recipe", 6, 64 * 1024).await;
    let (pid, did) = (pid.as_str(), did.as_str());
    problem(
        c.post(format!(
            "{}/v1/projects/{pid}/pipelines/incremental",
            s.base
        ))
        .json(&json!({"dataset_id": did, "spec": {"kind": "global"}}))
        .send()
        .await
        .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let r = c
        .post(format!("{}/v1/projects/{pid}/pipelines/incremental", s.base))
        .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}, "matches": {"pairs": {"strategy": "exhaustive"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let lro: Value = r.json().await.unwrap();
    let job = lro["job_id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/jobs/{job}"));
    assert!(!lro["task_ids"].as_array().unwrap().is_empty());
    // Watch it to the end over SSE.
    let events = read_events(
        c.get(format!("{}/v1/jobs/{job}/events", s.base))
            .send()
            .await
            .unwrap(),
        None,
    )
    .await;
    assert!(events.iter().any(|e| e.1 == "phase_completed"));
    let detail: Value = c
        .get(format!("{}{location}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["status"], "succeeded", "{detail}");
    let recon: Value = c
        .get(format!("{}/v1/reconstructions/{job}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(recon["dataset_id"], did);
    let snaps: Value = c
        .get(format!("{}/v1/reconstructions/{job}/snapshots", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seq = snaps["seqs"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    let file = |name: &str| format!("{}/v1/reconstructions/{job}/snapshots/{seq}/{name}", s.base);
    let points = c.get(file("points.bin")).send().await.unwrap();
    assert_eq!(
        points.headers()["content-type"],
        "application/x-sfm-points-v1"
    );
    assert!(
        points.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    let etag = points.headers()["etag"].to_str().unwrap().to_string();
    let body = points.bytes().await.unwrap();
    let ids = parse_points(&body);
    assert!(ids.len() > 100, "a real model: {} points", ids.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted by id");
    assert_eq!(
        c.get(file("points.bin"))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap()
            .status(),
        304
    );
    let rec = c
        .get(file("points.bin"))
        .header("range", "bytes=44-69")
        .send()
        .await
        .unwrap();
    assert_eq!(rec.status(), 206);
    assert_eq!(
        rec.bytes().await.unwrap().as_ref(),
        &body[44..70],
        "one fixed-stride record"
    );
    let summary: Value = c
        .get(file("summary.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        summary["models"][0]["num_points3D"].as_u64().unwrap() as usize,
        ids.len()
    );
    let images: Value = c
        .get(file("images.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(images["images"].as_array().unwrap().len() >= 4);
    let cams: Value = c
        .get(file("cameras.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cams["cameras"][0]["model"], "SIMPLE_RADIAL");
    assert!(
        parse_points(
            &c.get(file("points_preview.bin"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        )
        .len()
            <= ids.len()
    );
    problem(
        c.get(file("database.db")).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    problem(
        c.get(format!(
            "{}/v1/reconstructions/{job}/snapshots/9999/points.bin",
            s.base
        ))
        .send()
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    // The sub-model: the model as of the latest sealed snapshot, with its summary.
    let subs: Value = c
        .get(format!("{}/v1/reconstructions/{job}/submodels", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(subs["total"], 1, "{subs}");
    let sub = &subs["items"][0];
    assert_eq!(sub["snapshot_seq"], seq);
    assert_eq!(sub["idx"], 0);
    assert!(
        sub["summary"]["num_points3D"].as_u64().unwrap() > 0,
        "{sub}"
    );
    assert!(
        sub["summary"]["num_reg_images"].as_u64().unwrap() >= 3,
        "{sub}"
    );
    let one: Value = c
        .get(format!(
            "{}/v1/submodels/{}",
            s.base,
            sub["submodel_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(&one, sub);
    problem(
        c.get(format!("{}/v1/submodels/{job}-1", s.base))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_in_openapi_json_answers_on_the_running_server() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let doc: Value = c
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 25, "{}", paths.len());
    let mut checked = 0;
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            assert!(op["responses"]["default"]["content"]["application/problem+json"].is_object());
            // Fill path parameters with ids that exist nowhere: the route must still be
            // found (any answer but the router's own 404 or 405 counts).
            let mut url = path.clone();
            for p in op["parameters"].as_array().unwrap() {
                let name = p["name"].as_str().unwrap();
                let value = if name == "seq" {
                    "1".to_string()
                } else {
                    ulid_like()
                };
                url = url.replace(&format!("{{{name}}}"), &value);
            }
            let method =
                reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let mut req = c.request(method.clone(), format!("{}{url}", s.base));
            if method == reqwest::Method::POST || method == reqwest::Method::PATCH {
                req = req.header("content-type", "application/json").body("{}");
            }
            let r = req.send().await.unwrap();
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            assert_ne!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {body}"
            );
            assert!(
                !body.contains(tessera_api::routes::NO_ROUTE),
                "{method} {path} is documented but not routed"
            );
            // 501 is the one 5xx a server answers on purpose: a capability it lacks.
            let unavailable =
                status == StatusCode::NOT_IMPLEMENTED && body.contains("\"capability\"");
            assert!(
                status.as_u16() < 500 || unavailable,
                "{method} {path}: {status} {body}"
            );
            // A read or delete of something that does not exist is a 404 problem — but
            // for a capability never offered, whose 501 comes before any lookup.
            if (method == reqwest::Method::GET || method == reqwest::Method::DELETE)
                && !op["parameters"].as_array().unwrap().is_empty()
                && !unavailable
            {
                assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
                assert!(body.contains("\"status\":404"), "{method} {path}: {body}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_privacy_extension_enrols_blurs_serves_and_reblurs() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let c = admin_client(&s).await;
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .json(&json!({"name": "wedding", "match_threshold": 0.363}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap();
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);
    let astronaut = upload(&c, &s.base, &face_photo("astronaut.png"), 256 * 1024).await;
    let r = c
        .post(format!("{x}/subjects"))
        .json(&json!({"label": "astronaut", "blob_shas": [astronaut]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let subject: Value = c
        .get(format!("{x}/subjects"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["items"][0]
        .clone();
    let cat = upload(
        &c,
        &s.base,
        &face_photo("negatives/chelsea.png"),
        256 * 1024,
    )
    .await;
    problem(
        c.post(format!("{x}/subjects"))
            .json(&json!({"label": "cat", "blob_shas": [cat]}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let listed: Value = c
        .get(format!("{x}/subjects"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);

    let comp = upload(
        &c,
        &s.base,
        &face_photo("composite_pd_1280x896.jpg"),
        256 * 1024,
    )
    .await;
    let r = c
        .post(format!("{x}/photos"))
        .json(&json!({"blob_sha": comp, "name": "group.jpg"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let added: Value = r.json().await.unwrap();
    let photo_url = format!(
        "{}/v1/x-tessera/photos/{}",
        s.base,
        added["photo_id"].as_str().unwrap()
    );
    let photo = photo_when(&c, &photo_url, |v| v["status"] == "published").await;
    assert_eq!(photo["faces"].as_array().unwrap().len(), 8);
    // Every face says the threshold it was held to and why: the project's, lowered by
    // what the same person was measured to lose at the face's size and roll.
    for f in photo["faces"].as_array().unwrap() {
        let rule = &f["rule"];
        let t = rule["threshold"].as_f64().unwrap();
        let lowered = rule["lowered_by"].as_f64().unwrap();
        assert!((t + lowered - 0.363).abs() < 1e-4 && lowered >= 0.0, "{f}");
        assert!(
            rule["why"].as_str().unwrap().contains(&format!("{t:.3}")),
            "{f}"
        );
        assert!(rule["face_px"].as_f64().unwrap() >= 20.0, "{f}");
    }
    // The group's small faces (about 30 px) are held to what the same person keeps at
    // their size; its large ones to the project's threshold.
    let bases: Vec<&str> = photo["faces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"]["basis"].as_str().unwrap())
        .collect();
    assert!(
        bases.contains(&"small") && bases.contains(&"clear"),
        "{bases:?}"
    );
    let variants = photo["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 2, "public + the astronaut's own");
    let public = format!("{}{}", s.base, variants[0]["url"].as_str().unwrap());
    let jpeg = c.get(&public).send().await.unwrap();
    assert_eq!(jpeg.headers()["content-type"], "image/jpeg");
    // One URL per variant, not per version: a re-blur or an unpublish must reach the
    // client, so it revalidates every time (and no shared cache keeps it).
    assert_eq!(jpeg.headers()["cache-control"], "private, no-cache");
    let img = image::load_from_memory(&jpeg.bytes().await.unwrap()).unwrap();
    assert_eq!((img.width(), img.height()), (1280, 896));
    let thumb = image::load_from_memory(
        &c.get(format!("{public}?thumbnail=true"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(thumb.width() <= 320);

    // A manual region: re-blurred from the stored faces as a new version.
    let r = c
        .put(format!("{photo_url}/blur-regions"))
        .json(&json!({"regions": [{"x": 0.0, "y": 0.0, "w": 0.2, "h": 0.2}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    problem(
        c.put(format!("{photo_url}/blur-regions"))
            .json(&json!({"regions": [{"x": 0.9, "y": 0.0, "w": 0.2, "h": 0.2}]}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let v2 = photo_when(&c, &photo_url, |v| {
        v["variant_version"] == 2 && v["status"] == "published"
    })
    .await;
    assert_eq!(v2["blur_regions"].as_array().unwrap().len(), 1);
    // The astronaut withdraws: one file again, nobody matched.
    let r = c
        .delete(format!(
            "{x}/subjects/{}",
            subject["subject_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v3 = photo_when(&c, &photo_url, |v| {
        v["variant_version"] == 3 && v["status"] == "published"
    })
    .await;
    assert_eq!(v3["variants"].as_array().unwrap().len(), 1);
    // No threshold: fail closed, every face blurred.
    let r = c
        .put(format!("{x}/privacy"))
        .json(&json!({"match_threshold": null}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v4 = photo_when(&c, &photo_url, |v| {
        v["variant_version"] == 4 && v["status"] == "published"
    })
    .await;
    assert!(
        v4["faces"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["decision"]["decision"] == "fail_closed"),
        "{v4}"
    );
    // The privacy resource: settings, and every photo decided at the current subjects.
    let privacy: Value = c
        .get(format!("{x}/privacy"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(privacy["match_threshold"], Value::Null);
    // With no threshold no rule decided anything; the resource says what to set.
    assert!(
        v4["faces"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["rule"].is_null()),
        "{v4}"
    );
    let recommended = privacy["recommended_threshold"].as_f64().unwrap();
    assert!((0.25..=0.5).contains(&recommended), "{privacy}");
    // As written, not as an f32 widened to a double (0.3630000054836273).
    assert_eq!(
        recommended.to_string(),
        tessera_core::privacy::RECOMMENDED_THRESHOLD.to_string()
    );
    assert_eq!(
        (
            privacy["photos"].clone(),
            privacy["photos_not_current"].clone()
        ),
        (json!(1), json!(0))
    );
    assert!(privacy["subjects_rev"].as_u64().unwrap() >= 3, "{privacy}");
    problem(
        c.put(format!("{x}/privacy"))
            .json(&json!({"match_threshold": 3.0}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    problem(
        c.get(format!("{photo_url}/files/nobody"))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_progress_hello_events_terminal_ping_cancel_and_bad_frames() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let s = serve(AuthMode::ApiKey, true).await;
    let key = admin_key(&s).await;
    let ws_base = s.base.replace("http://", "ws://");
    let job = demo_job(&s.engine, TenantId::local(), 4).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(
        &key,
        format!("{ws_base}/ws/v1/jobs/{job}?last_event_id=0"),
    ))
    .await
    .unwrap();
    let mut kinds = Vec::new();
    let mut seqs = Vec::new();
    let mut close_code = None;
    while let Some(m) = ws.next().await {
        match m.unwrap() {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if let Some(seq) = v["seq"].as_u64() {
                    seqs.push(seq);
                    let wrong = tessera_conformance::sfmapi_event::violations(&v);
                    assert!(wrong.is_empty(), "{v}: {wrong:?}");
                }
                kinds.push(v["kind"].as_str().unwrap().to_string());
                if v["kind"] == "terminal" {
                    assert_eq!(v["status"], "succeeded");
                }
            }
            Message::Close(Some(f)) => close_code = Some(u16::from(f.code)),
            _ => {}
        }
    }
    assert_eq!(kinds.first().map(String::as_str), Some("hello"));
    assert_eq!(kinds.last().map(String::as_str), Some("terminal"));
    let stored = s.engine.ports().events.last_seq(job).await.unwrap();
    assert_eq!(seqs, (1..=stored).collect::<Vec<_>>());
    assert_eq!(close_code, Some(1000));

    // A job nobody runs: ping, cancel over the socket, then a bad frame.
    let idle = serve(AuthMode::ApiKey, false).await;
    let idle_key = admin_key(&idle).await;
    let job = demo_job(&idle.engine, TenantId::local(), 1).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(
        &idle_key,
        format!("{}/ws/v1/jobs/{job}", idle.base.replace("http://", "ws://")),
    ))
    .await
    .unwrap();
    let next_json = |m: Message| -> Value { serde_json::from_str(m.to_text().unwrap()).unwrap() };
    assert_eq!(
        next_json(ws.next().await.unwrap().unwrap())["kind"],
        "hello"
    );
    ws.send(Message::Text(r#"{"op":"ping"}"#.into()))
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let v = next_json(ws.next().await.unwrap().unwrap());
        seen.push(v["kind"].as_str().unwrap().to_string());
        if v["kind"] == "pong" {
            break;
        }
    }
    ws.send(Message::Text(r#"{"op":"cancel","force":false}"#.into()))
        .await
        .unwrap();
    loop {
        let v = next_json(ws.next().await.unwrap().unwrap());
        if v["kind"] == "cancel_requested" {
            assert_eq!(v["force"], false);
            break;
        }
    }
    assert!(idle.engine.job(job).await.unwrap().cancel.is_some());
    // Malformed frames get an error and a 1008 close (unless the job ended first).
    let job2 = demo_job(&idle.engine, TenantId::local(), 1).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(
        &idle_key,
        format!(
            "{}/ws/v1/jobs/{job2}",
            idle.base.replace("http://", "ws://")
        ),
    ))
    .await
    .unwrap();
    ws.send(Message::Text("not json".into())).await.unwrap();
    let mut code = None;
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Close(Some(f)) = m {
            code = Some(u16::from(f.code));
        }
    }
    assert_eq!(code, Some(1008));
    // Another tenant's (or no) job cannot be watched.
    let r = as_key(&idle_key)
        .get(format!(
            "{}/ws/v1/jobs/{}",
            idle.base,
            tessera_core::JobId::new()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

async fn wait_job(c: &reqwest::Client, base: &str, job: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let d: Value = c
            .get(format!("{base}/v1/jobs/{job}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if ["succeeded", "failed", "cancelled", "cancelled_dirty"]
            .contains(&d["status"].as_str().unwrap_or(""))
        {
            return d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} did not end"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_already_computed_by_another_job_is_a_cache_hit() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "cache", 4, 1 << 20).await;
    let (pid, did) = (pid.as_str(), did.as_str());
    let submit = |stage: &str, body: Value| {
        let url = format!("{}/v1/datasets/{did}/{stage}", s.base);
        let c = c.clone();
        async move {
            let v: Value = c
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["job_id"].as_str().unwrap().to_string()
        }
    };
    let features = submit("features", json!({"spec": {"version": 1}})).await;
    assert_eq!(
        wait_job(&c, &s.base, &features).await["status"],
        "succeeded"
    );
    let verify = submit("verify", json!({"spec": {"version": 1}})).await;
    let detail = wait_job(&c, &s.base, &verify).await;
    assert_eq!(detail["status"], "succeeded", "{detail}");
    // Tessera's own stages, inside the spec's nodes.
    let task = |d: &Value, name: &str| {
        d["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|node| node["x-tessera"]["stages"].as_array().unwrap().clone())
            .find(|t| t["name"] == name)
            .unwrap()
    };
    let extract = task(&detail, "extract");
    assert_eq!(
        extract["outputs_ref"]["cache_hit"], features,
        "extraction was adopted from the features job"
    );
    assert!(
        task(&detail, "match")["outputs_ref"]["cache_hit"].is_null(),
        "matching had not run before"
    );
    // The whole recipe now reuses extraction, matching and verification.
    let r: Value = c
        .post(format!(
            "{}/v1/projects/{pid}/pipelines/incremental",
            s.base
        ))
        .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let recipe = wait_job(&c, &s.base, r["job_id"].as_str().unwrap()).await;
    assert_eq!(recipe["status"], "succeeded", "{recipe}");
    for stage in ["extract", "match", "verify"] {
        assert!(
            !task(&recipe, stage)["outputs_ref"]["cache_hit"].is_null(),
            "{stage} was not a cache hit"
        );
    }
    assert!(task(&recipe, "map")["outputs_ref"]["cache_hit"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_source_registers_the_images_under_its_root_and_nothing_outside() {
    let allowed = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = allowed.path().join("scene");
    std::fs::create_dir_all(root.join("day2")).unwrap();
    let samples = std::path::Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
    )
    .join("../../sample/images");
    std::fs::copy(samples.join("IMG_9380.jpg"), root.join("IMG_9380.jpg")).unwrap();
    std::fs::copy(samples.join("IMG_9381.jpg"), root.join("day2/IMG_9381.jpg")).unwrap();
    // Folds to the same image name as day2/IMG_9381.jpg, with other bytes.
    std::fs::copy(samples.join("IMG_9382.jpg"), root.join("day2_IMG_9381.jpg")).unwrap();
    std::fs::write(root.join("notes.txt"), "not an image").unwrap();
    std::fs::write(root.join("fake.jpg"), "not a jpeg either").unwrap();
    std::fs::copy(
        samples.join("IMG_9382.jpg"),
        outside.path().join("secret.jpg"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.jpg"), root.join("link.jpg")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("linked-dir")).unwrap();

    let folders = tessera_api::sources::LocalFolders::new(&[allowed.path().to_path_buf()]).unwrap();
    let s = serve_sources(
        AuthMode::ApiKey,
        false,
        None,
        tessera_api::sources::Sources(vec![Arc::new(folders)]),
    )
    .await;
    let c = admin_client(&s).await;
    let caps: Value = c
        .get(format!("{}/v1/capabilities", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        caps["x-tessera"]["sources"]
            .as_array()
            .unwrap()
            .contains(&json!("local")),
        "{caps}"
    );
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .json(&json!({"name": "local"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap();
    let create = |source: Value| {
        c.post(format!("{}/v1/projects/{pid}/datasets", s.base))
            .json(&json!({"name": "d", "source": source}))
            .send()
    };
    // Outside the allowed roots, relative, missing: refused, nothing created.
    for (source, needle) in [
        (
            json!({"kind": "local", "root": outside.path()}),
            "outside the folders",
        ),
        (json!({"kind": "local", "root": "scene"}), "absolute"),
        (
            json!({"kind": "local", "root": allowed.path().join("nope")}),
            "cannot be read",
        ),
        (json!({"kind": "local"}), "source.root is required"),
    ] {
        let v = problem(
            create(source).await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert!(v["detail"].as_str().unwrap().contains(needle), "{v}");
    }
    let listed: Value = c
        .get(format!("{}/v1/projects/{pid}/datasets", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        0,
        "refused sources create nothing"
    );

    let r = create(json!({"kind": "local", "root": root, "recursive": true}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let d: Value = r.json().await.unwrap();
    assert_eq!(d["x-import"]["registered"], 2, "{d}");
    let skipped = d["x-import"]["skipped"].to_string();
    assert!(skipped.contains("fake.jpg"), "{skipped}");
    assert!(
        skipped.contains("day2_IMG_9381.jpg") && skipped.contains("already"),
        "a name collision is reported, not written over: {skipped}"
    );
    let did = d["dataset_id"].as_str().unwrap();
    let images: Value = c
        .get(format!("{}/v1/datasets/{did}/images", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut got: Vec<(String, String, String)> = images["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_string(),
                i["rel_path"].as_str().unwrap().to_string(),
                i["source_kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                "IMG_9380.jpg".to_string(),
                "IMG_9380.jpg".to_string(),
                "local".to_string()
            ),
            (
                "day2_IMG_9381.jpg".into(),
                "day2/IMG_9381.jpg".into(),
                "local".into()
            ),
        ],
        "symbolic links (to a file or a folder outside the root) are not followed"
    );
    let folded = images["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "day2_IMG_9381.jpg")
        .unwrap();
    let served = c
        .get(format!(
            "{}/v1/images/{}/bytes",
            s.base,
            folded["image_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        served[..] == std::fs::read(samples.join("IMG_9381.jpg")).unwrap()[..],
        "the image still serves the bytes of the file it was registered from"
    );
    // The bytes are the file's.
    let id = images["items"][0]["image_id"].as_str().unwrap();
    let bytes = c
        .get(format!("{}/v1/images/{id}/bytes", s.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        bytes.as_ref(),
        std::fs::read(samples.join("IMG_9380.jpg"))
            .unwrap()
            .as_slice()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template_and_show_queue_depths() {
    let s = serve(AuthMode::ApiKey, false).await;
    let store = s.engine.ports().store.clone();
    let (_, admin) = tessera_api::auth::create_key(store.as_ref(), TenantId::local(), true)
        .await
        .unwrap();
    let (_, member) = tessera_api::auth::create_key(store.as_ref(), TenantId::local(), false)
        .await
        .unwrap();
    let (_, tenant_admin) =
        tessera_api::auth::create_key(store.as_ref(), "tenant-b".parse().unwrap(), true)
            .await
            .unwrap();
    let c = client();
    for _ in 0..3 {
        c.get(format!("{}/v1/jobs/{}", s.base, ulid_like()))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap();
    }
    // The figures span every tenant: no key, a key that is not an admin's, or another
    // tenant's admin key reads none; the operator's (tenant `local`) admin key does.
    let r = c.get(format!("{}/metrics", s.base)).send().await.unwrap();
    problem(r, StatusCode::UNAUTHORIZED).await;
    for key in [&member, &tenant_admin] {
        let r = c
            .get(format!("{}/metrics", s.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        problem(r, StatusCode::FORBIDDEN).await;
    }
    let r = c
        .get(format!("{}/metrics", s.base))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = r.text().await.unwrap();
    // Counters are per process (other tests in this binary count too): at least ours.
    let line = text
        .lines()
        .find(|l| l.starts_with(r#"tessera_http_requests_total{method="GET",route="/v1/jobs/{job_id}",status="404"}"#))
        .unwrap_or_else(|| panic!("{text}"));
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 3, "{line}");
    assert!(!text.contains("/v1/jobs/0"), "raw ids never become labels");
    assert!(
        text.contains(r#"tessera_queue_messages{queue="tasks",state="visible"}"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_endpoints_not_offered_answer_501_with_their_capability() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .json(&json!({"name": "opt"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap();
    let d: Value = c
        .post(format!("{}/v1/projects/{pid}/datasets", s.base))
        .json(&json!({"name": "d"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let did = d["dataset_id"].as_str().unwrap();
    for (method, path, capability) in [
        (
            "GET",
            format!("/v1/datasets/{did}/similarity?image_id=x"),
            "similarity.dhash",
        ),
        (
            "POST",
            format!("/v1/datasets/{did}/similarity:build"),
            "similarity.dhash",
        ),
        (
            "GET",
            format!("/v1/datasets/{did}/pose_priors"),
            "pose_priors.read_write",
        ),
        (
            "PUT",
            format!("/v1/datasets/{did}/pose_priors"),
            "pose_priors.read_write",
        ),
        (
            "POST",
            format!("/v1/datasets/{did}:renderCubemap"),
            "projection.equirectangular_to_cubemap",
        ),
        // Never offered: the same 501 on a dataset that exists nowhere (sfmapi's suite
        // probes exactly this), the capability by the strategy asked.
        (
            "POST",
            "/v1/datasets/01HGH0ST00000000000000000A/similarity:build?strategy=vlad".into(),
            "similarity.vlad",
        ),
        (
            "GET",
            format!("/v1/datasets/{did}/similarity?image_id=x&strategy=vlad"),
            "similarity.vlad",
        ),
        (
            "POST",
            "/v1/reconstructions/01HGH0ST00000000000000000A/georegister".into(),
            "georegister.sim3",
        ),
    ] {
        let r = c
            .request(method.parse().unwrap(), format!("{}{path}", s.base))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        let v = problem(r, StatusCode::NOT_IMPLEMENTED).await;
        assert_eq!(v["capability"], capability, "{method} {path}: {v}");
    }
    let caps: Value = c
        .get(format!("{}/v1/capabilities", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        caps["features"].get("similarity.dhash").is_none(),
        "not advertised"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_over_a_dataset_whose_images_changed_is_a_new_job() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "rerun", 2, 1 << 20).await;
    let submit = || async {
        let r = c
            .post(format!(
                "{}/v1/projects/{pid}/pipelines/incremental",
                s.base
            ))
            .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        r.json::<Value>().await.unwrap()["job_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = submit().await;
    assert_eq!(submit().await, first, "the same images: the same job");
    let (name, bytes) = sample_photos(3).pop().unwrap();
    let sha = upload(&c, &s.base, &bytes, 1 << 20).await;
    let r = c
        .post(format!("{}/v1/datasets/{did}/images", s.base))
        .json(&json!({"name": name, "blob_sha": sha}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let second = submit().await;
    assert_ne!(second, first, "a third image: a new job");
    let r = c
        .delete(format!("{}/v1/datasets/{did}/images/{name}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_ne!(
        submit().await,
        second,
        "the image removed: not the three-image job"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_photo_then_the_project_leaves_only_tombstones_and_the_audit_trail() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let c = admin_client(&s).await;
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .json(&json!({"name": "to-erase", "match_threshold": 0.363}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap().to_string();
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);
    let astronaut = upload(&c, &s.base, &face_photo("astronaut.png"), 256 * 1024).await;
    let r = c
        .post(format!("{x}/subjects"))
        .json(&json!({"label": "astronaut", "blob_shas": [astronaut]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mut photos = Vec::new();
    for (file, name) in [
        ("composite_pd_1280x896.jpg", "group.jpg"),
        ("astronaut.png", "alone.png"),
    ] {
        let sha = upload(&c, &s.base, &face_photo(file), 256 * 1024).await;
        let added: Value = c
            .post(format!("{x}/photos"))
            .json(&json!({"blob_sha": sha, "name": name}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let url = format!(
            "{}/v1/x-tessera/photos/{}",
            s.base,
            added["photo_id"].as_str().unwrap()
        );
        let v = photo_when(&c, &url, |v| v["status"] == "published").await;
        photos.push((v["photo_id"].as_str().unwrap().to_string(), url, v, sha));
    }
    // A read of the subject's own (unblurred) variant goes on record.
    let own = photos[0].2["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["variant"] != "public")
        .cloned()
        .unwrap();
    let r = c
        .get(format!("{}{}", s.base, own["url"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (did, _) = {
        let d: Value = c
            .post(format!("{}/v1/projects/{pid}/datasets", s.base))
            .json(&json!({"name": "d"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let did = d["dataset_id"].as_str().unwrap().to_string();
        let (file, bytes) = sample_photos(1).pop().unwrap();
        let sha = upload(&c, &s.base, &bytes, 1 << 20).await;
        let img: Value = c
            .post(format!("{}/v1/datasets/{did}/images", s.base))
            .json(&json!({"name": file, "blob_sha": sha}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let thumb = c
            .get(format!(
                "{}/v1/images/{}/thumbnail?size=100",
                s.base,
                img["image_id"].as_str().unwrap()
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(thumb.status(), 200);
        (did, img)
    };
    let (gone, gone_url, _, gone_blob) = &photos[0];
    let (kept, kept_url, _, _) = &photos[1];
    let before = all_objects(&s).await;
    assert!(before.iter().any(|k| k.contains(gone.as_str())));
    // Erase one photo.
    let r = c.delete(gone_url).send().await.unwrap();
    assert_eq!(r.status(), 204);
    problem(c.get(gone_url).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    let after = all_objects(&s).await;
    assert!(
        !after
            .iter()
            .any(|k| k.contains(gone.as_str()) || k.contains(gone_blob.as_str())),
        "objects of the erased photo remain (its upload blob included): {after:?}"
    );
    assert_eq!(
        before.iter().filter(|k| k.contains(kept.as_str())).count(),
        after.iter().filter(|k| k.contains(kept.as_str())).count(),
        "the other photo is untouched"
    );
    assert_eq!(c.get(kept_url).send().await.unwrap().status(), 200);
    let rows: Vec<String> = all_items(&s)
        .into_iter()
        .filter(|i| i.contains(gone.as_str()))
        .collect();
    assert!(
        rows.iter().all(|r| r.starts_with("ERASED#")
            || r.starts_with("AUDIT#")
            || r.starts_with("TASK#")
            || r.starts_with("JOB#")
            || r.starts_with("EVENTS#")
            || r.starts_with("FP#")),
        "{rows:#?}"
    );
    assert!(!rows.iter().any(|r| r.starts_with("PHOTO#")), "{rows:#?}");

    // Removing the subject takes their reference upload with their embeddings.
    let reference = format!("blobs/local/{astronaut}");
    assert!(all_objects(&s).await.contains(&reference));
    let sid = c
        .get(format!("{x}/subjects"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["items"][0]["subject_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c
        .delete(format!("{x}/subjects/{sid}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{:?}", r.text().await);
    assert!(!all_objects(&s).await.contains(&reference));
    assert!(
        !all_items(&s)
            .iter()
            .any(|i| i.contains(sid.as_str()) && i.starts_with("PROJECT#"))
    );

    // Erase the project with everything in it.
    let r = c
        .delete(format!("{}/v1/projects/{pid}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "not without ?cascade=true");
    let r = c
        .delete(format!("{}/v1/projects/{pid}?cascade=true", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{:?}", r.text().await);
    let left = all_objects(&s).await;
    let leftovers: Vec<&String> = left
        .iter()
        .filter(|k| {
            k.contains(pid.as_str()) || k.contains(did.as_str()) || k.contains(astronaut.as_str())
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:#?}");
    let rows: Vec<String> = all_items(&s)
        .into_iter()
        .filter(|i| {
            i.starts_with("PROJECT#")
                || i.starts_with("DATASET#")
                || i.starts_with("IMAGE#")
                || i.starts_with("PHOTO#")
        })
        .collect();
    assert!(rows.is_empty(), "{rows:#?}");
    // The audit trail says who did what.
    let trail: Value = c
        .get(format!("{}/v1/x-tessera/audit", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let actions: Vec<&str> = trail["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for wanted in [
        "subject.enrol",
        "photo.read_unblurred",
        "photo.erase",
        "dataset.erase",
        "project.erase",
    ] {
        assert!(
            actions.contains(&wanted),
            "{wanted} missing from {actions:?}"
        );
    }
    // Newest first: the project's erasure is recorded as it is decided (with its
    // marker, before anything is deleted), and what it erased after it.
    let at = |a: &str| actions.iter().position(|x| *x == a).unwrap();
    assert!(
        at("project.erase") < at("subject.enrol"),
        "newest first: {actions:?}"
    );
    assert!(
        at("dataset.erase") < at("project.erase"),
        "newest first: {actions:?}"
    );
}
