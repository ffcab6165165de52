//! Projects, jobs and their progress over real HTTP on the real embedded adapters:
//! projects created idempotently, tenancy under API keys, SSE resumed with
//! Last-Event-ID, cancel and resume, WebSocket progress, and the stage cache.

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_core::TenantId;
use tessera_engine::Engine;

mod support;
use support::*;

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
