//! The API's meta routes over real HTTP on the real embedded adapters: health and
//! readiness, CORS and errors, the OpenAPI document against the running server,
//! metrics, and optional endpoints a server does not offer.

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_core::TenantId;

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
    // COLMAP 4 maps globally on a CPU, and hierarchically.
    assert_eq!(caps["features"]["map.global"], true, "{caps}");
    assert_eq!(caps["features"]["map.hierarchical"], true, "{caps}");
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
