//! Tenancy, generated from the route table: tenant A creates one of everything (project,
//! dataset, image with a thumbnail, uploads, a published photo with its variants, an
//! opted-out subject, a reconstruction job, an API key); then tenant B — an admin of its
//! own tenant — calls **every operation `/openapi.json` documents** on A's ids. Each must
//! answer 404 (ownership comes before capability and validation; the one exception is a
//! capability the server never offers, whose 501 must then be exactly the answer to ids
//! that exist nowhere), and the whole store —
//! every item and every object — must be byte-for-byte what it was. A new route is in
//! this test the moment it is in the route table; a route with a path parameter this test
//! has no value for fails it until one is added below.

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use support::*;
use tessera_api::AuthMode;
use tessera_core::TenantId;

/// Every item (pk, sk, body, rev) and every object (key, bytes) of the server.
async fn dump(s: &Server) -> (Vec<String>, BTreeMap<String, Vec<u8>>) {
    let mut objects = BTreeMap::new();
    for k in all_objects(s).await {
        let b = s.engine.ports().objects.get(&k).await.unwrap();
        objects.insert(k, b.to_vec());
    }
    let mut items = all_items(s);
    items.sort();
    (items, objects)
}

/// An id of the right shape that no tenant has.
const GHOST: &str = "01HGH0ST00000000000000000A";

/// A problem's body without its `instance` (the request's path, which differs).
fn without_instance(text: &str) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("instance");
    }
    v
}

async fn json_of(r: reqwest::Response) -> Value {
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_route_answers_404_to_another_tenant_and_changes_nothing() {
    let s = serve_with(AuthMode::ApiKey, false, Some(face_models())).await;
    let store = s.engine.ports().store.clone();
    let (a_tenant, b_tenant): (TenantId, TenantId) =
        ("tenant-a".parse().unwrap(), "tenant-b".parse().unwrap());
    let (_, a) = tessera_api::auth::create_key(store.as_ref(), a_tenant.clone(), true)
        .await
        .unwrap();
    let (_, b) = tessera_api::auth::create_key(store.as_ref(), b_tenant.clone(), true)
        .await
        .unwrap();
    let c = reqwest::Client::builder()
        .default_headers({
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("authorization", format!("Bearer {a}").parse().unwrap());
            h
        })
        .build()
        .unwrap();
    let base = s.base.clone();

    // Tenant A's world.
    let project = json_of(
        c.post(format!("{base}/v1/projects"))
            .json(&json!({"name": "a-only", "match_threshold": 0.363}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let pid = project["project_id"].as_str().unwrap().to_string();
    let reference = upload(&c, &base, &face_photo("astronaut.png"), 1 << 20).await;
    let subject = json_of(
        c.post(format!("{base}/v1/x-tessera/projects/{pid}/subjects"))
            .json(&json!({"label": "astronaut", "blob_shas": [reference]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let sid = subject["subject_id"].as_str().unwrap().to_string();
    let group = upload(&c, &base, &face_photo("composite_pd_1280x896.jpg"), 1 << 20).await;
    let added = json_of(
        c.post(format!("{base}/v1/x-tessera/projects/{pid}/photos"))
            .json(&json!({"blob_sha": group, "name": "group.jpg"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let photo = added["photo_id"].as_str().unwrap().to_string();
    let worker = start_worker(&s);
    let photo_url = format!("{base}/v1/x-tessera/photos/{photo}");
    let published = photo_when(&c, &photo_url, |v| v["status"] == "published").await;
    let variant = published["variants"][1]["variant"]
        .as_str()
        .unwrap()
        .to_string();
    // The people its photo shows.
    let clusters = json_of(
        c.get(format!("{base}/v1/x-tessera/projects/{pid}/clusters"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let cluster = clusters["items"][0]["cluster_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{clusters}"))
        .to_string();
    let dataset = json_of(
        c.post(format!("{base}/v1/projects/{pid}/datasets"))
            .json(&json!({"name": "scene"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let did = dataset["dataset_id"].as_str().unwrap().to_string();
    let mut images = Vec::new();
    for (name, bytes) in sample_photos(2) {
        let sha = upload(&c, &base, &bytes, 1 << 20).await;
        let img = json_of(
            c.post(format!("{base}/v1/datasets/{did}/images"))
                .json(&json!({"name": name, "blob_sha": sha}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        images.push((img["image_id"].as_str().unwrap().to_string(), name.clone()));
    }
    let (image, image_name) = images[0].clone();
    json_of(
        c.get(format!("{base}/v1/images/{image}/thumbnail"))
            .send()
            .await
            .unwrap(),
    )
    .await
    .is_null();
    let open_upload = json_of(
        c.post(format!("{base}/v1/uploads"))
            .json(&json!({"expected_size": 10}))
            .send()
            .await
            .unwrap(),
    )
    .await["upload_id"]
        .as_str()
        .unwrap()
        .to_string();
    let key = json_of(
        c.post(format!("{base}/v1/admin/api-keys"))
            .json(&json!({"admin": false}))
            .send()
            .await
            .unwrap(),
    )
    .await["key"]["key_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Let everything A's photo started finish, then stop the worker: nothing may change
    // the store in the background while B knocks.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut seen = None;
    loop {
        if s.engine.all_jobs_over(&a_tenant, &mut seen).await.unwrap() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "A's jobs never ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    worker.cancel();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A reconstruction job, queued (no worker runs it).
    let recipe = json_of(
        c.post(format!("{base}/v1/projects/{pid}/pipelines/incremental"))
            .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let job = recipe["job_id"].as_str().unwrap().to_string();
    // A webhook, made once no worker runs (its deliveries would change the store).
    let webhook = json_of(
        c.post(format!("{base}/v1/x-tessera/webhooks"))
            .json(&json!({"url": "https://example.com/a-hook", "project_id": pid}))
            .send()
            .await
            .unwrap(),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();

    let ids: BTreeMap<&str, String> = [
        ("project_id", pid.clone()),
        ("pid", pid.clone()),
        ("dataset_id", did.clone()),
        ("did", did.clone()),
        ("image_id", image.clone()),
        ("name", image_name.clone()),
        ("upload_id", open_upload.clone()),
        ("job_id", job.clone()),
        ("artifact_id", format!("{job}-export")),
        ("rid", job.clone()),
        ("reconstruction_id", job.clone()),
        ("seq", "1".into()),
        ("idx", "0".into()),
        ("file", "points.bin".into()),
        ("photo_id", photo.clone()),
        ("subject_id", sid.clone()),
        ("cluster_id", cluster.clone()),
        ("variant", variant.clone()),
        ("key_id", key.clone()),
        ("webhook_id", webhook.clone()),
        ("submodel_id", "0".into()),
        ("recon_id", job.clone()),
        ("point3d_id", "1".into()),
        ("recipe", "incremental".into()),
        ("action", "images:batchCreate".into()),
        ("level", "0".into()),
        ("x", "0".into()),
        ("y", "0".into()),
        ("z", "0".into()),
    ]
    .into_iter()
    .collect();

    let before = dump(&s).await;
    let doc: Value = c
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let bc = reqwest::Client::new();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let params = op["parameters"].as_array().unwrap();
            let in_path: Vec<&str> = params
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            if in_path.is_empty() {
                continue;
            }
            let mut url = path.clone();
            for name in &in_path {
                // `{name}` is an image's name, or a snapshot's file.
                let snapshot_file = "points.bin".to_string();
                let value = if *name == "name" && path.contains("/snapshots/") {
                    Some(&snapshot_file)
                } else {
                    ids.get(name)
                };
                let value = value.unwrap_or_else(|| {
                    panic!("{method} {path}: no value of tenant A for `{name}`; add one")
                });
                url = url.replace(&format!("{{{name}}}"), value);
            }
            let m = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            // With a body: one that parses, and one that does not — ownership is decided
            // before the body is looked at.
            let bodies: &[Option<&str>] = if matches!(
                m,
                reqwest::Method::POST | reqwest::Method::PUT | reqwest::Method::PATCH
            ) {
                &[
                    Some(r#"{"name":"b","label":"b","blob_shas":[],"requests":[],"regions":[]}"#),
                    Some("this is not JSON"),
                ]
            } else {
                &[None]
            };
            for body in bodies {
                // B's request to `url`, with the body under test.
                let send = |url: String| {
                    let mut req = bc
                        .request(m.clone(), format!("{base}{url}"))
                        .bearer_auth(&b);
                    if let Some(body) = body {
                        req = req
                            .header("content-type", "application/json")
                            .header("content-range", "bytes 0-9/10")
                            .body(*body);
                    }
                    async move {
                        let r = req.send().await.unwrap();
                        (r.status(), r.text().await.unwrap_or_default())
                    }
                };
                let (status, text) = send(url.clone()).await;
                checked += 1;
                // A 404 may repeat the id B sent; it must reveal nothing else of A's.
                let leaks = ["a-only", "group.jpg", "astronaut", "scene", &job, &did]
                    .iter()
                    .any(|secret| !url.contains(*secret) && text.contains(*secret));
                // A capability this server never offers is a 501 before anything is
                // looked up: allowed only where the same request naming ids that exist
                // nowhere gets the very same answer (it then reveals nothing of A's).
                let never_offered = status == StatusCode::NOT_IMPLEMENTED && {
                    let mut ghost_url = url.clone();
                    for id in [
                        &pid,
                        &did,
                        &image,
                        &job,
                        &photo,
                        &sid,
                        &open_upload,
                        &key,
                        &webhook,
                    ] {
                        ghost_url = ghost_url.replace(id.as_str(), GHOST);
                    }
                    let (g_status, g_text) = send(ghost_url.clone()).await;
                    ghost_url != url
                        && g_status == status
                        && without_instance(&g_text) == without_instance(&text)
                };
                if (status != StatusCode::NOT_FOUND && !never_offered) || leaks {
                    wrong.push(format!("{method} {path} ({body:?}) → {status} {text}"));
                }
            }
        }
    }
    assert!(
        checked >= 40,
        "only {checked} operations with path parameters"
    );
    assert!(
        wrong.is_empty(),
        "tenant B got more than a 404:\n{}",
        wrong.join("\n")
    );
    // B's lists hold nothing of A's.
    for list in [
        "/v1/projects".to_string(),
        "/v1/jobs".into(),
        "/v1/admin/api-keys".into(),
        "/v1/x-tessera/audit".into(),
        "/v1/x-tessera/webhooks".into(),
    ] {
        let body = bc
            .get(format!("{base}{list}"))
            .bearer_auth(&b)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for id in [&pid, &job, &key, &photo, &did, &webhook] {
            assert!(!body.contains(id.as_str()), "{list} shows A's {id}: {body}");
        }
    }
    let after = dump(&s).await;
    assert_eq!(before.0, after.0, "tenant B's requests changed A's items");
    assert_eq!(
        before.1.keys().collect::<Vec<_>>(),
        after.1.keys().collect::<Vec<_>>(),
        "tenant B's requests changed the objects"
    );
    assert!(
        before.1 == after.1,
        "tenant B's requests changed object bytes"
    );
    // A still sees all of it.
    assert_eq!(c.get(&photo_url).send().await.unwrap().status(), 200);
}
