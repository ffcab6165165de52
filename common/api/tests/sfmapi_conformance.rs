//! sfmapi v1 conformance, one test per section of SFMAPI-SPEC.md (SFMAPI/sfmapi), each
//! checking that section's MUSTs against the server `tessera serve` runs: the real
//! router on the real embedded adapters, over HTTP on 127.0.0.1, with the engine this
//! machine has. Order of answers everywhere: authentication → ownership (404) →
//! capability (501) → validation.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tessera_api::AuthMode;
use tessera_core::TenantId;

mod support;
use support::*;

async fn get(c: &reqwest::Client, url: String) -> Value {
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
    r.json().await.unwrap()
}

async fn project(c: &reqwest::Client, base: &str, name: &str) -> String {
    let p: Value = c
        .post(format!("{base}/v1/projects"))
        .json(&json!({ "name": name }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    p["project_id"].as_str().unwrap().to_string()
}

async fn dataset(c: &reqwest::Client, base: &str, pid: &str, name: &str) -> String {
    let r = c
        .post(format!("{base}/v1/projects/{pid}/datasets"))
        .json(&json!({ "name": name }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let d: Value = r.json().await.unwrap();
    d["dataset_id"].as_str().unwrap().to_string()
}

/// `POST …/datasets/{did}/images:batchCreate` with these requests.
async fn batch_create(
    c: &reqwest::Client,
    base: &str,
    did: &str,
    requests: Value,
) -> reqwest::Response {
    c.post(format!("{base}/v1/datasets/{did}/images:batchCreate"))
        .json(&json!({ "requests": requests }))
        .send()
        .await
        .unwrap()
}

fn is_sha256(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// §3.4: every non-2xx answer is problem+json with type, title, status, detail and
/// instance (the request's path) — from a handler and from the router itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_errors_are_problems_with_an_instance() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    for path in [
        "/v1/nothing-here".to_string(),
        format!("/v1/projects/{}", ulid_like()),
        format!("/v1/images/{}", ulid_like()),
    ] {
        let v = problem(
            c.get(format!("{}{path}", s.base)).send().await.unwrap(),
            StatusCode::NOT_FOUND,
        )
        .await;
        for field in ["type", "title", "status", "detail"] {
            assert!(!v[field].is_null(), "{field} in {v}");
        }
        assert_eq!(v["instance"], path.as_str(), "{v}");
    }
}

/// §3.6: lists are `Page<T>`: `items`, `next_page_token` (string or null), `total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_6_lists_are_pages() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    project(&c, &s.base, "paged").await;
    for path in ["/v1/projects", "/v1/jobs", "/v1/camera-models"] {
        let page = get(&c, format!("{}{path}", s.base)).await;
        assert!(page["items"].is_array(), "{path}: {page}");
        assert!(
            page["next_page_token"].is_null() || page["next_page_token"].is_string(),
            "{path}: {page}"
        );
        assert!(page.as_object().unwrap().contains_key("total"), "{path}");
    }
}

/// §3.7: a create repeated with the same Idempotency-Key returns the original resource,
/// answered exactly as the first time (status, Location, body), creating nothing new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_7_an_idempotent_replay_answers_as_the_first_request() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    for (path, body) in [
        ("/v1/projects", json!({ "name": "once" })),
        ("/v1/uploads", json!({ "expected_size": 10 })),
    ] {
        let send = || {
            c.post(format!("{}{path}", s.base))
                .header("idempotency-key", "replay-1")
                .json(&body)
                .send()
        };
        let (first, again) = (send().await.unwrap(), send().await.unwrap());
        assert_eq!(first.status(), 201, "{path}");
        assert_eq!(
            again.status(),
            first.status(),
            "{path}: status of the replay"
        );
        assert_eq!(
            again.headers().get("location"),
            first.headers().get("location"),
            "{path}"
        );
        let (a, b): (Value, Value) = (first.json().await.unwrap(), again.json().await.unwrap());
        assert_eq!(a, b, "{path}: the original resource");
    }
    let projects = get(&c, format!("{}/v1/projects", s.base)).await;
    assert_eq!(projects["items"].as_array().unwrap().len(), 1);
}

/// §3.10: CORS preflight is answered (200, as sfmapi's suite asks) with the methods and headers a client of
/// this API sends, and the headers it must read exposed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_10_cors_preflight() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let r = c
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/uploads/x:finalize", s.base),
        )
        .header("origin", ALLOWED_PAGE)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "x-content-sha256, idempotency-key",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
            .unwrap_or_default()
    };
    assert_eq!(h("access-control-allow-origin"), ALLOWED_PAGE);
    for m in ["get", "post", "patch", "delete", "options"] {
        assert!(h("access-control-allow-methods").contains(m), "{m}");
    }
    for header in [
        "authorization",
        "content-type",
        "idempotency-key",
        "last-event-id",
        "range",
        "content-range",
        "x-content-sha256",
    ] {
        assert!(
            h("access-control-allow-headers").contains(header),
            "{header}"
        );
    }
    for header in ["etag", "last-modified", "content-range", "location", "link"] {
        assert!(
            h("access-control-expose-headers").contains(header),
            "{header}"
        );
    }
}

/// §3.11 and §2.1: every CORE flag is present and true; a flag is advertised only
/// where a request can use it, and what is not advertised answers 501 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_11_capabilities_are_core_and_only_what_is_served() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let caps = get(&c, format!("{}/v1/capabilities", s.base)).await;
    for core in [
        "projects.crud",
        "datasets.crud",
        "images.crud",
        "uploads.chunked",
        "jobs.read",
        "events.sse",
        "spec.read",
    ] {
        assert_eq!(caps["features"][core], true, "{core}: {caps}");
    }
    assert!(caps["backend"]["name"].is_string() && caps["backend"]["version"].is_string());
    let features = caps["features"].as_object().unwrap();
    for (name, on) in features {
        assert_eq!(on, true, "only offered features are listed: {name}");
        assert!(
            !name.starts_with("dense.")
                && !name.starts_with("sources.")
                && name != "export.points_bin",
            "`{name}` is not a canonical sfmapi capability"
        );
    }
    let pid = project(&c, &s.base, "caps").await;
    let did = dataset(&c, &s.base, &pid, "caps").await;
    // Every mapping recipe: served when advertised, 501 naming it when not.
    for recipe in ["incremental", "global", "hierarchical", "spherical"] {
        let cap = format!("map.{recipe}");
        let r = c
            .post(format!("{}/v1/projects/{pid}/pipelines/{recipe}", s.base))
            .json(&json!({ "dataset_id": did, "spec": { "kind": recipe } }))
            .send()
            .await
            .unwrap();
        if features.contains_key(&cap) {
            // Served: the empty dataset is what is wrong (§6.6), not the capability.
            problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
        } else {
            let p = problem(r, StatusCode::NOT_IMPLEMENTED).await;
            assert_eq!(p["capability"], cap.as_str());
            assert_eq!(
                p["type"],
                "https://sfmapi.github.io/errors/capability_unavailable"
            );
        }
    }
    for (strategy, cap) in [
        ("spatial", "pairs.spatial"),
        ("vocabtree", "pairs.vocabtree"),
    ] {
        let r = c
            .post(format!("{}/v1/datasets/{did}/matches", s.base))
            .json(&json!({ "pairs": { "strategy": strategy } }))
            .send()
            .await
            .unwrap();
        if features.contains_key(cap) {
            problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
        } else {
            assert_eq!(
                problem(r, StatusCode::NOT_IMPLEMENTED).await["capability"],
                cap
            );
        }
    }
}

/// The order of answers: authentication (401) → ownership (404) → capability (501) →
/// validation (400/422), whatever else is wrong with the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_come_in_the_order_auth_ownership_capability_validation() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = client();
    let store = s.engine.ports().store.clone();
    let (_, key) = tessera_api::auth::create_key(store.as_ref(), TenantId::local(), true)
        .await
        .unwrap();
    let (_, other) =
        tessera_api::auth::create_key(store.as_ref(), "tenant-b".parse().unwrap(), false)
            .await
            .unwrap();
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .bearer_auth(&key)
        .json(&json!({ "name": "mine" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap();
    let d: Value = c
        .post(format!("{}/v1/projects/{pid}/datasets", s.base))
        .bearer_auth(&key)
        .json(&json!({ "name": "mine" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let did = d["dataset_id"].as_str().unwrap();
    let garbage = "{not json";
    let recipe = |k: Option<&str>, pid: &str| {
        let r = c
            .post(format!("{}/v1/projects/{pid}/pipelines/spherical", s.base))
            .header("content-type", "application/json")
            .body(garbage);
        match k {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    };
    // No key: 401, though the project is unknown, the capability missing and the body
    // broken.
    problem(
        recipe(None, &ulid_like()).send().await.unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    // Another tenant's project: 404, not 501.
    problem(
        recipe(Some(&other), pid).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    // Own project, missing capability, broken body: 501.
    assert_eq!(
        problem(
            recipe(Some(&key), pid).send().await.unwrap(),
            StatusCode::NOT_IMPLEMENTED
        )
        .await["capability"],
        "map.spherical"
    );
    // A stage on an empty dataset asking for a feature type this server lacks: 501
    // (the empty dataset, a validation error, comes after).
    let features = |k: &str, did: &str| {
        c.post(format!("{}/v1/datasets/{did}/features", s.base))
            .bearer_auth(k)
            .json(&json!({ "spec": { "type": "superpoint" } }))
            .send()
    };
    assert_eq!(
        problem(
            features(&key, did).await.unwrap(),
            StatusCode::NOT_IMPLEMENTED
        )
        .await["capability"],
        "features.extract.superpoint"
    );
    problem(features(&other, did).await.unwrap(), StatusCode::NOT_FOUND).await;
    // The capability served: now validation answers.
    problem(
        c.post(format!("{}/v1/datasets/{did}/features", s.base))
            .bearer_auth(&key)
            .json(&json!({ "spec": { "type": "sift" } }))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
}

/// §6.1: `/spec` identifies the implementation; `/v1/camera-models` is a
/// `Page<CameraModel>` of the models a dataset may use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_spec_and_camera_models() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let spec = get(&c, format!("{}/spec", s.base)).await;
    assert_eq!(spec["spec"], "sfmapi");
    assert!(spec["spec_version"].as_str().unwrap().starts_with("v1"));
    let openapi = spec["openapi_url"].as_str().unwrap();
    let doc = get(&c, format!("{}{openapi}", s.base)).await;
    assert!(doc["paths"]["/spec"].is_object());
    assert!(doc["paths"]["/v1/camera-models"].is_object());
    assert_eq!(spec["server"]["name"], "tessera");

    let models = get(&c, format!("{}/v1/camera-models", s.base)).await;
    let items = models["items"].as_array().unwrap();
    assert_eq!(models["total"], items.len());
    let radial = items
        .iter()
        .find(|m| m["name"] == "SIMPLE_RADIAL")
        .expect("the default camera model");
    assert_eq!(radial["num_params"], 4);
    assert_eq!(radial["params"], json!(["f", "cx", "cy", "k"]));
    // Every listed model is one a dataset accepts.
    let pid = project(&c, &s.base, "cams").await;
    for m in items {
        let r = c
            .post(format!("{}/v1/projects/{pid}/datasets", s.base))
            .json(&json!({ "name": format!("d-{}", m["name"].as_str().unwrap()), "camera_model": m["name"] }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{m}");
        assert_eq!(
            m["params"].as_array().unwrap().len() as u64,
            m["num_params"].as_u64().unwrap()
        );
    }
}

/// §6.4 (with the reference server's dataset deletion, which `datasets.crud` covers):
/// 204, then gone; an unknown dataset 404; never through another project.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_datasets_are_deleted_only_through_their_project() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "del", 1, 1 << 20).await;
    let other = project(&c, &s.base, "other").await;
    let del = |p: &str, d: &str| {
        c.delete(format!("{}/v1/projects/{p}/datasets/{d}", s.base))
            .send()
    };
    problem(del(&other, &did).await.unwrap(), StatusCode::NOT_FOUND).await;
    get(&c, format!("{}/v1/projects/{pid}/datasets/{did}", s.base)).await;
    problem(
        del(&pid, &ulid_like()).await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(del(&pid, &did).await.unwrap().status(), 204);
    problem(
        c.get(format!("{}/v1/projects/{pid}/datasets/{did}", s.base))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    problem(del(&pid, &did).await.unwrap(), StatusCode::NOT_FOUND).await;
}

/// §6.5: images are deleted by id (204, then 404); single and batch registration agree
/// (bytes that do not decode are registered, without a size, saying why); a batch is
/// capped at 1000 and registers nothing when one request is bad.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_images_by_id_and_registration_rules() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let pid = project(&c, &s.base, "imgs").await;
    let did = dataset(&c, &s.base, &pid, "imgs").await;
    let photos = sample_photos(2);
    let good = upload(&c, &s.base, &photos[0].1, 1 << 20).await;
    let good2 = upload(&c, &s.base, &photos[1].1, 1 << 20).await;
    let text = upload(&c, &s.base, b"not an image, only text", 1 << 20).await;

    // Bytes that do not decode are registered alike, single or in a batch (the suite's
    // `test_image_batch_is_optional` sends a JPEG marker and filler): 201, no size, and
    // why, naming the file. They get no thumbnail; a reconstruction's ingest refuses
    // them by name (`s6_8_2_…`).
    let odd = dataset(&c, &s.base, &pid, "odd").await;
    let single = c
        .post(format!("{}/v1/datasets/{odd}/images", s.base))
        .json(&json!({ "name": "notes.jpg", "blob_sha": text }))
        .send()
        .await
        .unwrap();
    assert_eq!(single.status(), 201);
    let single: Value = single.json().await.unwrap();
    assert!(
        single["width"].is_null() && single["height"].is_null(),
        "{single}"
    );
    let why = single["unreadable"].as_str().unwrap();
    assert!(
        why.contains("notes.jpg") && why.contains("not an image"),
        "{single}"
    );
    let marker = upload(&c, &s.base, &b"\xff\xd8\xff\xe0bbb".repeat(50), 1 << 20).await;
    let r = batch_create(
        &c,
        &s.base,
        &odd,
        json!([
            { "name": "a.jpg", "blob_sha": good },
            { "name": "extra.jpg", "blob_sha": marker },
        ]),
    )
    .await;
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    assert_eq!(made["images"][0]["unreadable"], Value::Null, "{made}");
    assert!(made["images"][0]["width"].as_u64().unwrap() > 0, "{made}");
    assert!(
        made["images"][1]["unreadable"]
            .as_str()
            .is_some_and(|w| w.contains("extra.jpg")),
        "{made}"
    );
    // HEIC is admitted as the run's ingest admits it (one check for both): registered,
    // and said to be unusable by a run, naming the file.
    let heic = upload(
        &c,
        &s.base,
        b"\0\0\0\x18ftypheic\0\0\0\0mif1heic\0\0\0\x08mdat",
        1 << 20,
    )
    .await;
    let (st, img) = post_json(
        &c,
        format!("{}/v1/datasets/{odd}/images", s.base),
        json!({ "name": "IMG_0001.HEIC", "blob_sha": heic }),
    )
    .await;
    assert_eq!(st, 201, "{img}");
    assert!(
        img["unreadable"]
            .as_str()
            .is_some_and(|w| w.contains("IMG_0001.HEIC") && w.contains("HEIC/HEIF")),
        "{img}"
    );
    let thumb = problem(
        c.get(format!(
            "{}/v1/images/{}/thumbnail?size=64",
            s.base,
            made["images"][1]["image_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(
        thumb["detail"].as_str().unwrap().contains("extra.jpg"),
        "{thumb}"
    );
    // A request that is wrong in itself (no finalized upload behind the blob) refuses
    // the whole batch, naming the request, and registers nothing.
    let batch = problem(
        batch_create(
            &c,
            &s.base,
            &did,
            json!([
                { "name": "a.jpg", "blob_sha": good },
                { "name": "notes.jpg", "blob_sha": "0".repeat(64) },
            ]),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(
        batch["detail"].as_str().unwrap().contains("requests[1]"),
        "{batch}"
    );
    let listed = get(&c, format!("{}/v1/datasets/{did}/images", s.base)).await;
    assert!(
        listed["items"].as_array().unwrap().is_empty(),
        "a bad batch registers nothing: {listed}"
    );
    let over: Vec<Value> = (0..1001)
        .map(|i| json!({ "name": format!("{i}.jpg"), "blob_sha": good }))
        .collect();
    problem(
        batch_create(&c, &s.base, &did, json!(over)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;

    let r = batch_create(
        &c,
        &s.base,
        &did,
        json!([
            { "name": "a.jpg", "blob_sha": good },
            { "name": "b.jpg", "blob_sha": good2 },
        ]),
    )
    .await;
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    let images = made["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    for img in images {
        assert!(img["width"].as_u64().unwrap() > 0 && img["height"].as_u64().unwrap() > 0);
    }
    // A name already in the dataset: the whole batch is refused, the new image too.
    let clash = problem(
        batch_create(
            &c,
            &s.base,
            &did,
            json!([
                { "name": "c.jpg", "blob_sha": good },
                { "name": "a.jpg", "blob_sha": good2 },
            ]),
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert!(
        clash["detail"].as_str().unwrap().contains("requests[1]"),
        "{clash}"
    );
    let listed = get(&c, format!("{}/v1/datasets/{did}/images", s.base)).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "{listed}");
    let id = images[0]["image_id"].as_str().unwrap();
    let url = format!("{}/v1/images/{id}", s.base);
    assert_eq!(c.delete(&url).send().await.unwrap().status(), 204);
    problem(c.get(&url).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    problem(c.delete(&url).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    let left = get(&c, format!("{}/v1/datasets/{did}/images", s.base)).await;
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
    assert_eq!(left["items"][0]["name"], "b.jpg");

    // A batch that passes every check but runs into the storage quota partway takes
    // back what it registered: the first photo fits, the second does not.
    use tessera_core::catalog::quotas;
    let store = s.engine.ports().store.clone();
    let room = quotas::MAX_STORED_BYTES - photos[0].1.len() as u64 - 10;
    let now = quotas::stored_bytes(store.as_ref(), &TenantId::local())
        .await
        .unwrap();
    store
        .transact(vec![quotas::add_stored(
            &TenantId::local(),
            room as i64 - now as i64,
        )])
        .await
        .unwrap();
    let full = problem(
        batch_create(
            &c,
            &s.base,
            &did,
            json!([
                { "name": "x.jpg", "blob_sha": good },
                { "name": "y.jpg", "blob_sha": good2 },
            ]),
        )
        .await,
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    assert!(
        full["detail"].as_str().unwrap().contains("requests[1]"),
        "{full}"
    );
    let after = get(&c, format!("{}/v1/datasets/{did}/images", s.base)).await;
    assert_eq!(after["items"].as_array().unwrap().len(), 1, "{after}");
    assert_eq!(
        quotas::stored_bytes(store.as_ref(), &TenantId::local())
            .await
            .unwrap(),
        room,
        "the bytes of the taken-back image are given back"
    );
}

/// §4.7, §6.7, §6.8: a recipe with default options is the spec's four-node DAG
/// (extract → match → verify → map), its `task_ids` are those nodes, `JobDetail`
/// carries every Job and Task field, and `:resume` answers 202 with the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_7_a_default_recipe_is_the_four_node_dag_with_every_field() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "dag", 4, 1 << 20).await;
    let r = c
        .post(format!(
            "{}/v1/projects/{pid}/pipelines/incremental",
            s.base
        ))
        .json(&json!({ "dataset_id": did, "spec": { "kind": "incremental" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let lro: Value = r.json().await.unwrap();
    let job = lro["job_id"].as_str().unwrap().to_string();
    let task_ids = lro["task_ids"].as_array().unwrap().clone();
    assert_eq!(task_ids.len(), 4, "{lro}");
    let detail = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
        loop {
            let d = get(&c, format!("{}/v1/jobs/{job}", s.base)).await;
            if !["pending", "running"].contains(&d["status"].as_str().unwrap()) {
                break d;
            }
            assert!(std::time::Instant::now() < deadline, "the job did not end");
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    };
    assert_eq!(detail["status"], "succeeded", "{detail}");
    for field in [
        "job_id",
        "tenant_id",
        "project_id",
        "recipe",
        "status",
        "cancel_requested",
        "cancel_force",
        "created_at",
        "started_at",
        "finished_at",
        "error_class",
        "error_message",
        "_links",
    ] {
        assert!(
            detail.as_object().unwrap().contains_key(field),
            "Job.{field}: {detail}"
        );
    }
    assert_eq!(detail["recipe"], "incremental");
    assert!(detail["started_at"].is_string() && detail["finished_at"].is_string());
    for link in ["self", "events", "ws"] {
        assert!(detail["_links"][link]["href"].is_string(), "{link}");
    }
    let tasks = detail["tasks"].as_array().unwrap();
    let kinds: Vec<&str> = tasks.iter().map(|t| t["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["extract", "match", "verify", "map"]);
    assert_eq!(
        tasks
            .iter()
            .map(|t| t["task_id"].clone())
            .collect::<Vec<_>>(),
        task_ids,
        "the recipe's task_ids name the nodes"
    );
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!(t["job_id"], job.as_str());
        assert_eq!(t["status"], "succeeded", "{t}");
        for h in ["cache_key", "inputs_hash", "params_hash"] {
            assert!(is_sha256(&t[h]), "Task.{h}: {t}");
        }
        assert!(t["outputs_ref"].is_object(), "{t}");
        if i > 0 {
            assert_eq!(t["inputs_hash"], tasks[i - 1]["cache_key"], "keys chain");
        }
    }
    // §6.7: the polling snapshot agrees with the detail.
    let progress = get(&c, format!("{}/v1/jobs/{job}/progress", s.base)).await;
    assert_eq!(progress["status"], "succeeded");
    assert_eq!(progress["progress"], 1.0);
    assert_eq!(progress["total_tasks"], 4);
    assert_eq!(progress["completed_tasks"], 4);
    assert_eq!(progress["task_counts"]["succeeded"], 4);
    assert!(progress["latest_event_id"].as_u64().unwrap() > 0);
    // The latest event as the stream sends it: sfmapi's v1, and its kind's name alike.
    let latest = &progress["latest_event"];
    let wrong = tessera_conformance::sfmapi_event::violations(latest);
    assert!(wrong.is_empty(), "{latest}: {wrong:?}");
    assert_eq!(latest["seq"], progress["latest_event_id"]);
    for t in progress["tasks"].as_array().unwrap() {
        if let Some(k) = t["latest_event_kind"].as_str() {
            assert!(
                tessera_conformance::sfmapi_event::kinds().contains(k)
                    || k.starts_with(tessera_conformance::sfmapi_event::EXTENSION_PREFIX),
                "{t}"
            );
        }
    }
    let kinds: Vec<&str> = progress["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["extract", "match", "verify", "map"]);
    // §6.7 and §6.9: the stage outputs, with their files' checksums, filterable by kind.
    for base in [
        format!("{}/v1/jobs/{job}/artifacts", s.base),
        format!("{}/v1/reconstructions/{job}/artifacts", s.base),
    ] {
        let all = get(&c, base.clone()).await;
        let items = all["items"].as_array().unwrap();
        assert_eq!(all["total"], items.len());
        for kind in ["features", "matches", "sparse_model", "export"] {
            assert!(items.iter().any(|a| a["kind"] == kind), "{kind}: {all}");
        }
        let features = get(&c, format!("{base}?kind=features")).await;
        let only = features["items"].as_array().unwrap();
        assert_eq!(only.len(), 1, "{features}");
        let file = &only[0]["files"][0];
        assert_eq!(file["name"], "database.db");
        assert!(is_sha256(&file["sha256"]) && file["byte_size"].as_u64().unwrap() > 0);
        let paged = get(&c, format!("{base}?page_size=2")).await;
        assert_eq!(paged["items"].as_array().unwrap().len(), 2);
        assert!(paged["next_page_token"].is_string());
    }
    // Taking results away: each listed file downloads by its `download_url` with the
    // bytes its checksum names, as an attachment, immutable; a name the manifest does
    // not hold (a path that climbs out, another stage's file) is 404.
    let exports = get(
        &c,
        format!("{}/v1/jobs/{job}/artifacts?kind=export", s.base),
    )
    .await;
    let files = exports["items"][0]["files"].as_array().unwrap().clone();
    let a_file = files[0]["download_url"].as_str().unwrap().to_string();
    assert!(
        files.iter().any(|f| f["name"] == "sparse/0/cameras.bin"),
        "{exports}"
    );
    // The whole COLMAP model in one zip, which another reader (Python's) opens, with
    // every file of the model in COLMAP's folders and checksums that hold.
    let zip = files
        .iter()
        .find(|f| f["name"] == "colmap-model.zip")
        .unwrap_or_else(|| panic!("no model zip in {exports}"));
    let body = c
        .get(format!(
            "{}{}",
            s.base,
            zip["download_url"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let saved = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(saved.path(), &body).unwrap();
    let listed = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
print(chr(10).join(z.namelist()))",
        ])
        .arg(saved.path())
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let inside = String::from_utf8(listed.stdout).unwrap();
    for f in [
        "sparse/0/cameras.bin",
        "sparse/0/images.bin",
        "sparse/0/points3D.bin",
    ] {
        assert!(inside.lines().any(|l| l == f), "{f} in the zip: {inside}");
    }
    for f in &files {
        let url = format!("{}{}", s.base, f["download_url"].as_str().unwrap());
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let disposition = r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .to_string();
        let etag = r.headers()["etag"].to_str().unwrap().to_string();
        let body = r.bytes().await.unwrap();
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&body)),
            f["sha256"].as_str().unwrap(),
            "{url}"
        );
        let base = f["name"].as_str().unwrap().replace('/', "-");
        assert_eq!(
            disposition,
            format!("attachment; filename=\"export-{base}\"")
        );
        let again = c
            .get(&url)
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304);
    }
    for wrong in [
        "export/files/..%2F..%2Fingest%2Fmanifest.json",
        "export/files/database.db",
        "nonsense/files/model.ply",
        "extract/files/sparse/0/cameras.bin",
    ] {
        let r = c
            .get(format!("{}/v1/jobs/{job}/artifacts/{wrong}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{wrong}");
    }
    // The report: what was asked, each stage, the photos, and every file to download.
    let report = get(&c, format!("{}/v1/reconstructions/{job}/report", s.base)).await;
    assert_eq!(report["status"], "succeeded");
    let (total, registered) = (
        report["photos"]["total"].as_u64().unwrap(),
        report["photos"]["registered"].as_u64().unwrap(),
    );
    assert!(registered > 0 && registered <= total, "{report}");
    assert_eq!(
        report["photos"]["left_out"].as_array().unwrap().len() as u64,
        total - registered,
        "every photo not in the model is named: {report}"
    );
    assert!(report["seconds"].as_f64().unwrap() > 0.0);
    assert!(report["model"]["points"].as_u64().unwrap() > 0, "{report}");
    assert!(
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|st| st["status"] == "succeeded" && st["result"].is_object()),
        "{report}"
    );
    assert!(
        report["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["stage"] == "export" && f["url"].as_str().unwrap().contains("/files/"))
    );
    // A run is renamed; its options are in its view (and nothing else changes).
    let renamed: Value = c
        .patch(format!("{}/v1/jobs/{job}", s.base))
        .json(&json!({ "label": "  façade, first try " }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(renamed["label"], "façade, first try");
    assert_eq!(renamed["status"], "succeeded");
    assert_eq!(renamed["x-tessera"]["options"]["mapper"], "incremental");
    assert!(renamed["x-tessera"]["options"]["pairs"]["strategy"].is_string());
    assert_eq!(
        renamed["x-tessera"]["tasks_done"],
        renamed["x-tessera"]["tasks_total"]
    );
    for bad in [
        json!({ "label": "" }),
        json!({ "label": "a\nb" }),
        json!({ "label": "x".repeat(201) }),
        json!({ "name": "x" }),
    ] {
        let r = c
            .patch(format!("{}/v1/jobs/{job}", s.base))
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{bad}");
    }
    // §6.7: the list's filters.
    let mine = get(
        &c,
        format!("{}/v1/jobs?status=succeeded&project_id={pid}", s.base),
    )
    .await;
    assert!(
        mine["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["job_id"] == job.as_str())
    );
    let other = get(&c, format!("{}/v1/jobs?project_id={}", s.base, ulid_like())).await;
    assert!(other["items"].as_array().unwrap().is_empty(), "{other}");
    let running = get(&c, format!("{}/v1/jobs?status=running", s.base)).await;
    assert!(running["items"].as_array().unwrap().is_empty(), "{running}");
    // §6.9: the actions on a reconstruction this server does not offer answer 501
    // with their capability, before the reconstruction is looked up.
    for (action, cap) in [
        ("bundleAdjust", "ba.standard"),
        ("triangulate", "triangulate.retri"),
        ("relocalize", "relocalize.images"),
        ("poseGraphOptimize", "pgo.optimize"),
        ("toCubemap", "projection.equirectangular_to_cubemap"),
        ("undistort", "image.undistort"),
    ] {
        let r = c
            .post(format!("{}/v1/reconstructions/{job}:{action}", s.base))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            problem(r, StatusCode::NOT_IMPLEMENTED).await["capability"],
            cap,
            "{action}"
        );
    }
    let r = c
        .post(format!("{}/v1/jobs/{job}:resume", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let resumed: Value = r.json().await.unwrap();
    assert_eq!(resumed["job_id"], job.as_str());
    // A run made by mistake is erased with what it made: the job, its report, its files
    // answer 404, and the same request is a new run (its fingerprint went with it).
    let r = c
        .delete(format!("{}/v1/jobs/{job}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    for gone in [
        format!("/v1/jobs/{job}"),
        format!("/v1/reconstructions/{job}/report"),
        format!("/v1/jobs/{job}/events"),
        a_file.clone(),
    ] {
        let r = c.get(format!("{}{gone}", s.base)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{gone}");
    }
    let again = c
        .delete(format!("{}/v1/jobs/{job}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    let r = c
        .post(format!(
            "{}/v1/projects/{pid}/pipelines/incremental",
            s.base
        ))
        .json(&json!({ "dataset_id": did, "spec": { "kind": "incremental" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let rerun: Value = r.json().await.unwrap();
    assert_ne!(
        rerun["job_id"],
        job.as_str(),
        "a new run, not the erased one"
    );
}

async fn post_json(c: &reqwest::Client, url: String, body: Value) -> (StatusCode, Value) {
    let r = c.post(&url).json(&body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn patch_json(c: &reqwest::Client, url: String, body: Value) -> (StatusCode, Value) {
    let r = c.patch(&url).json(&body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// §6.2 and §6.4: `?update_mask=` changes only the fields it names, each of which must
/// be in the body; the Dataset carries every field of §4.3, `manifest_hash` is over
/// the images' names and contents, and shapes this server does not model are refused
/// (spherical photos 501 `map.spherical`, rigs and masksets 422).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_s6_4_update_masks_and_the_dataset_shape() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let pid = project(&c, &s.base, "masks").await;
    let purl = format!("{}/v1/projects/{pid}", s.base);
    let (st, p) = patch_json(
        &c,
        format!("{purl}?update_mask=description"),
        json!({ "name": "ignored", "description": "kept" }),
    )
    .await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(
        (p["name"].as_str(), p["description"].as_str()),
        (Some("masks"), Some("kept"))
    );
    for (mask, body, says) in [
        (
            "name",
            json!({ "description": "x" }),
            "missing from the body: name",
        ),
        (
            "tenant_id",
            json!({ "tenant_id": "t" }),
            "cannot be changed: tenant_id",
        ),
        (",", json!({ "name": "x" }), "at least one field"),
    ] {
        let (st, e) = patch_json(&c, format!("{purl}?update_mask={mask}"), body).await;
        assert_eq!(st, 422, "{mask}: {e}");
        assert!(e["detail"].as_str().unwrap().contains(says), "{mask}: {e}");
    }

    let (st, d) = post_json(
        &c,
        format!("{purl}/datasets"),
        json!({ "name": "lenses", "intrinsics_mode": "per_image" }),
    )
    .await;
    assert_eq!(st, 201, "{d}");
    for field in [
        "dataset_id",
        "tenant_id",
        "project_id",
        "source_id",
        "name",
        "camera_model",
        "intrinsics_mode",
        "is_spherical",
        "respect_exif_orientation",
        "rig_config_json",
        "active_maskset_id",
        "manifest_hash",
        "created_at",
        "_links",
    ] {
        assert!(
            d.as_object().unwrap().contains_key(field),
            "Dataset.{field}: {d}"
        );
    }
    assert_eq!(d["intrinsics_mode"], "per_image");
    assert!(d["source_id"].as_str().unwrap().starts_with("src_"));
    assert!(is_sha256(&d["manifest_hash"]), "{d}");
    let did = d["dataset_id"].as_str().unwrap().to_string();
    let durl = format!("{purl}/datasets/{did}");
    let (st, d2) = patch_json(
        &c,
        format!("{durl}?update_mask=intrinsics_mode"),
        json!({ "intrinsics_mode": "per_folder", "camera_model": "PINHOLE" }),
    )
    .await;
    assert_eq!(st, 200, "{d2}");
    assert_eq!(d2["intrinsics_mode"], "per_folder");
    assert_eq!(
        get(&c, durl.clone()).await["intrinsics_mode"],
        "per_folder",
        "stored"
    );
    assert_eq!(
        d2["camera_model"], d["camera_model"],
        "outside the mask: unchanged"
    );
    let (st, e) = patch_json(&c, durl.clone(), json!({ "intrinsics_mode": "per_lens" })).await;
    assert_eq!(st, 422, "{e}");
    let (st, e) = patch_json(
        &c,
        durl.clone(),
        json!({ "is_spherical": true, "name": "" }),
    )
    .await;
    assert_eq!(
        (st, e["capability"].as_str()),
        (StatusCode::NOT_IMPLEMENTED, Some("map.spherical")),
        "{e}"
    );
    for body in [
        json!({ "rig_config": { "rigs": [] } }),
        json!({ "active_maskset_id": "ms_1" }),
    ] {
        let (st, e) = patch_json(&c, durl.clone(), body.clone()).await;
        assert_eq!(st, 422, "{body}: {e}");
    }
    let (st, e) = post_json(
        &c,
        format!("{purl}/datasets"),
        json!({ "name": "pano", "is_spherical": true }),
    )
    .await;
    assert_eq!(
        (st, e["capability"].as_str()),
        (StatusCode::NOT_IMPLEMENTED, Some("map.spherical")),
        "{e}"
    );

    // The manifest follows the images: equal images, equal hashes; one more, another.
    let mut hashes = Vec::new();
    for (name, n) in [("a", 2), ("b", 2), ("c", 3)] {
        let (pid, did) = dataset_of_samples(&c, &s.base, name, n, 1 << 20).await;
        let d = get(&c, format!("{}/v1/projects/{pid}/datasets/{did}", s.base)).await;
        let listed = get(&c, format!("{}/v1/projects/{pid}/datasets", s.base)).await;
        assert_eq!(listed["items"][0]["manifest_hash"], d["manifest_hash"]);
        hashes.push(d["manifest_hash"].clone());
    }
    let (ma, mb, mc) = (&hashes[0], &hashes[1], &hashes[2]);
    assert!(is_sha256(ma), "{ma}");
    assert_eq!(ma, mb, "the same images, the same manifest");
    assert_ne!(ma, mc);
}

/// §6.8.2: `pipelines:run` type-checks steps before any job exists (422 naming the
/// missing datatype or the unknown operation); the legacy chain runs as the whole
/// reconstruction (202, the four-node DAG, each step's params honoured, the provider
/// echoed); other type-valid chains and native processor DAGs are 501
/// `pipelines.custom_execution`. With it, §6.9's sub-model files and the optional
/// merge and localize routes (501 before any lookup: never offered here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_2_pipelines_run_and_s6_9_submodel_files() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "run", 4, 1 << 20).await;
    let (other_pid, _) = dataset_of_samples(&c, &s.base, "elsewhere", 1, 1 << 20).await;
    let engine = get(&c, format!("{}/v1/capabilities", s.base)).await["backend"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, e) = patch_json(
        &c,
        format!("{}/v1/projects/{pid}/datasets/{did}", s.base),
        json!({ "intrinsics_mode": "per_image" }),
    )
    .await;
    assert_eq!(st, 200, "{e}");
    // Bytes that do not decode, registered as sfmapi asks: the run's ingest refuses them
    // by name and goes on with the photos.
    let note = upload(&c, &s.base, b"a note, not a photo", 1 << 20).await;
    let (st, img) = post_json(
        &c,
        format!("{}/v1/datasets/{did}/images", s.base),
        json!({ "name": "notes.jpg", "blob_sha": note }),
    )
    .await;
    assert_eq!(st, 201, "{img}");
    let run = format!("{}/v1/projects/{pid}/pipelines:run", s.base);
    let refused = [
        (
            json!({ "dataset_id": did, "steps": ["features", "map"] }),
            422,
            "match_graph",
        ),
        (
            json!({ "dataset_id": did, "steps": [{ "op": "frobnicate" }] }),
            422,
            "frobnicate",
        ),
        (json!({ "dataset_id": did, "steps": [] }), 422, "steps"),
        (
            json!({ "dataset_id": did, "steps": ["features"], "colour": 1 }),
            422,
            "colour",
        ),
        (
            json!({ "dataset_id": did, "steps": [{ "op": "features", "speed": 1 }] }),
            422,
            "speed",
        ),
        (
            json!({ "dataset_id": did, "initial_inputs": ["pixels"], "steps": ["features"] }),
            422,
            "pixels",
        ),
        (
            json!({ "dataset_id": did, "steps": [{ "op": "features", "provider": engine }, "pairs"] }),
            422,
            "provider",
        ),
        (
            json!({ "dataset_id": did, "steps": ["features", "pairs", "matches", "verify", { "op": "map", "provider": "openmvg" }] }),
            422,
            "openmvg",
        ),
        (
            json!({ "dataset_id": ulid_like(), "steps": ["features"] }),
            404,
            "does not exist",
        ),
        (
            json!({ "dataset_id": did, "steps": ["features", "pairs", "matches"] }),
            501,
            "pipelines.custom_execution",
        ),
        (
            json!({ "dataset_id": did, "steps": [{ "processor": "sift", "ref": "a" }] }),
            501,
            "pipelines.custom_execution",
        ),
    ];
    for (body, status, says) in refused {
        let (st, e) = post_json(&c, run.clone(), body.clone()).await;
        assert_eq!(st.as_u16(), status, "{body}: {e}");
        assert!(e.to_string().contains(says), "{body}: {e}");
    }
    let elsewhere = format!("{}/v1/projects/{other_pid}/pipelines:run", s.base);
    let (st, e) = post_json(
        &c,
        elsewhere,
        json!({ "dataset_id": did, "steps": ["features"] }),
    )
    .await;
    assert_eq!(st, 422, "a dataset of another project: {e}");

    let r = c
        .post(&run)
        .json(&json!({
            "dataset_id": did,
            "steps": [
                "features",
                { "op": "pairs", "params": { "strategy": "exhaustive" } },
                "matches",
                { "op": "verify", "provider": engine },
                { "op": "map", "params": { "kind": "incremental" }, "provider": engine },
            ],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let job_url = r.headers()["location"].to_str().unwrap().to_string();
    let lro: Value = r.json().await.unwrap();
    assert_eq!(lro["task_ids"].as_array().unwrap().len(), 4, "{lro}");
    assert_eq!(
        (lro["provider"].as_str(), lro["dataset_id"].as_str()),
        (Some(engine.as_str()), Some(did.as_str()))
    );
    let rid = lro["recon_id"].as_str().unwrap().to_string();
    assert_eq!(job_url, format!("/v1/jobs/{rid}"));
    let recon = get(&c, format!("{}/v1/reconstructions/{rid}", s.base)).await;
    assert_eq!(recon["spec"]["pairs"]["strategy"], "exhaustive", "{recon}");
    assert_eq!(recon["spec"]["per_image_intrinsics"], true, "{recon}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let d = get(&c, format!("{}{job_url}", s.base)).await;
        match d["status"].as_str().unwrap() {
            "pending" | "running" => {}
            "succeeded" => break,
            _ => panic!("the job failed: {d}"),
        }
        assert!(std::time::Instant::now() < deadline, "the job did not end");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }

    // §8: every phase a client saw start or progress also completes, so a timeline built
    // from the events ends with nothing left running.
    let sse = c
        .get(format!("{}/v1/jobs/{rid}/events", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    let phases = |kind: &str| -> std::collections::BTreeSet<String> {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .map(|e| e["phase"].as_str().unwrap().to_string())
            .collect()
    };
    let begun: std::collections::BTreeSet<String> = phases("phase_started")
        .union(&phases("phase_progress"))
        .cloned()
        .collect();
    assert!(begun.contains("ingest") && begun.len() >= 5, "{begun:?}");
    // Every event of a real reconstruction validates against sfmapi's ProgressEvent v1;
    // the phases the spec does not list (ingest) go out under Tessera's extension kinds.
    for e in &events {
        let wrong = tessera_conformance::sfmapi_event::violations(e);
        assert!(wrong.is_empty(), "{e}: {wrong:?}");
    }
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "x-tessera.phase_started" && e["phase"] == "ingest"),
        "ingest under an extension kind"
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "metric" && e["key"].is_string()),
        "a default reconstruction reports its figures as metrics"
    );
    assert!(
        events.iter().any(|e| e["kind"] == "warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("notes.jpg") && m.contains("not an image"))),
        "the ingest names the image it refused"
    );
    assert_eq!(
        begun,
        phases("phase_completed"),
        "phases begun and completed"
    );

    // intrinsics_mode per_image: the engine made one camera per registered photo.
    let snaps = get(&c, format!("{}/v1/reconstructions/{rid}/snapshots", s.base)).await;
    let seq = snaps["seqs"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    let snap = format!("{}/v1/reconstructions/{rid}/snapshots/{seq}", s.base);
    let cameras = get(&c, format!("{snap}/cameras.json")).await;
    let images = get(&c, format!("{snap}/images.json")).await;
    let registered = images["images"].as_array().unwrap().len();
    assert!(registered >= 3, "{images}");
    assert_eq!(
        cameras["cameras"].as_array().unwrap().len(),
        registered,
        "{cameras}"
    );

    // §6.9: a sub-model's files; 0 is the primary, the root files' twin.
    let root = c.get(format!("{snap}/points.bin")).send().await.unwrap();
    let root_bytes = root.bytes().await.unwrap();
    let zero = c
        .get(format!("{snap}/submodels/0/points.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(zero.status(), 200);
    assert!(zero.headers()["etag"].to_str().is_ok());
    assert_eq!(zero.bytes().await.unwrap(), root_bytes);
    let submodels = get(&c, format!("{}/v1/reconstructions/{rid}/submodels", s.base)).await;
    let beyond = submodels["items"].as_array().unwrap().len();
    for path in [
        format!("{snap}/submodels/{beyond}/points.bin"),
        format!("{snap}/submodels/0/database.db"),
        format!(
            "{}/v1/reconstructions/{rid}/snapshots/999/submodels/0/points.bin",
            s.base
        ),
    ] {
        let r = c.get(&path).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }

    // §6.9.10, §6.9.17: optional and never offered here, so 501 before anything is
    // looked up: the same answer whether the reconstructions named exist or not.
    let merge = format!("{}/v1/reconstructions:merge", s.base);
    let (st, e) = post_json(
        &c,
        merge.clone(),
        json!({ "target_recon_id": ulid_like(), "source_recon_ids": [rid] }),
    )
    .await;
    assert_eq!(
        (st, e["capability"].as_str()),
        (StatusCode::NOT_IMPLEMENTED, Some("recon.merge")),
        "{e}"
    );
    let (st, e) = post_json(
        &c,
        merge,
        json!({ "target_recon_id": rid, "source_recon_ids": [rid] }),
    )
    .await;
    assert_eq!(
        (st, e["capability"].as_str()),
        (StatusCode::NOT_IMPLEMENTED, Some("recon.merge")),
        "{e}"
    );
    // §3.11: dense stereo is never offered; sfmapi's suite probes it on a
    // reconstruction that does not exist and wants 501, not 404.
    for url in [
        format!("{}/v1/reconstructions/{}/dense", s.base, ulid_like()),
        format!("{}/v1/reconstructions/{rid}/dense", s.base),
    ] {
        let r = c.post(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_IMPLEMENTED, "{url}");
        let e: serde_json::Value = r.json().await.unwrap();
        assert_eq!(e["capability"], "dense.patch_match_stereo", "{url}: {e}");
    }
    for url in [
        format!("{}/v1/reconstructions/{}/localize", s.base, ulid_like()),
        format!("{}/v1/reconstructions/{rid}/localize", s.base),
        format!("{}/v1/oneshot/localize", s.base),
    ] {
        let (st, e) = post_json(&c, url.clone(), json!({ "blob_sha": "0" })).await;
        assert_eq!(
            (st, e["capability"].as_str()),
            (StatusCode::NOT_IMPLEMENTED, Some("localize.from_memory")),
            "{url}: {e}"
        );
    }
}

/// Tessera's extension of the mapping spec (`spec.x-tessera`): bundle adjustment,
/// georeferencing and exports, offered only where the engine lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_tessera_finishing_options_reach_the_reconstruction_spec() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "finish", 3, 1 << 20).await;
    let recipe = format!("{}/v1/projects/{pid}/pipelines/incremental", s.base);
    let (st, lro) = post_json(
        &c,
        recipe.clone(),
        json!({ "dataset_id": did, "spec": { "kind": "incremental",
            "x-tessera": { "ba": "two_stage", "georeference": "none", "exports": ["ply", "colmap_text"] } } }),
    )
    .await;
    assert_eq!(st, 202, "{lro}");
    let rid = lro["recon_id"].as_str().unwrap();
    let spec = get(&c, format!("{}/v1/reconstructions/{rid}", s.base)).await["spec"].clone();
    assert_eq!(spec["ba"], "two_stage", "{spec}");
    // In the one order every way in keeps (`recipe::prepare`), `points-bin` always there.
    assert_eq!(
        spec["exports"],
        json!(["ply", "colmap-text", "points-bin"]),
        "{spec}"
    );
    assert_eq!(spec["georef"]["mode"], "none", "{spec}");
    for bad in [
        json!({ "ba": "sloppy" }),
        json!({ "georeference": "astrology" }),
        json!({ "exports": ["gltf"] }),
        json!("two_stage"),
    ] {
        let (st, e) = post_json(
            &c,
            recipe.clone(),
            json!({ "dataset_id": did, "spec": { "kind": "incremental", "x-tessera": bad } }),
        )
        .await;
        assert_eq!(st, 422, "{bad}: {e}");
    }
    // Ground control as text, with survey exports in a named system: the file is kept
    // beside the dataset's images under its content's name, and the spec points at it.
    let names: Vec<String> = support::sample_photos(3)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let gcp = format!(
        "WGS84 UTM 32N\n431000 5205000 400 100 200 {} a\n431000 5205000 400 110 210 {} a\n",
        names[0], names[1]
    );
    let (st, lro) = post_json(
        &c,
        recipe.clone(),
        json!({ "dataset_id": did, "spec": { "kind": "incremental",
            "x-tessera": { "ground_control": gcp, "exports": ["las", "cameras_geojson"], "crs": "EPSG:2056" } } }),
    )
    .await;
    assert_eq!(st, 202, "{lro}");
    let rid = lro["recon_id"].as_str().unwrap();
    let spec = get(&c, format!("{}/v1/reconstructions/{rid}", s.base)).await["spec"].clone();
    assert_eq!(spec["georef"]["mode"], "gcp", "{spec}");
    assert_eq!(spec["crs"], "EPSG:2056", "{spec}");
    assert_eq!(
        spec["exports"],
        json!(["points-bin", "las", "cameras-geojson"]),
        "{spec}"
    );
    let key = spec["georef"]["file"].as_str().unwrap();
    assert!(key.starts_with(&format!("datasets/{did}/gcp/")), "{key}");
    assert_eq!(
        s.engine.ports().objects.get(key).await.unwrap(),
        gcp.as_bytes(),
        "the control file is stored as sent"
    );
    for (bad, says) in [
        (
            json!({ "ground_control": "UTM\n" }),
            "ground control file line 1",
        ),
        (
            json!({ "ground_control": "EPSG:32632\n1 2 3 4 5 nope.jpg a\n" }),
            "line 2: `nope.jpg` is not an image of dataset",
        ),
        (
            json!({ "ground_control": gcp, "georeference": "none" }),
            "leave georeference out",
        ),
        (json!({ "ground_control": 7 }), "gcp_list.txt"),
        (
            json!({ "georeference": "gps", "exports": ["las"], "crs": "EPSG:1" }),
            "EPSG:1 is not",
        ),
        (
            json!({ "exports": ["cameras_geojson"] }),
            "needs a georeferenced model",
        ),
    ] {
        let (st, e) = post_json(
            &c,
            recipe.clone(),
            json!({ "dataset_id": did, "spec": { "kind": "incremental", "x-tessera": bad } }),
        )
        .await;
        assert_eq!(st, 422, "{bad}: {e}");
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
}
