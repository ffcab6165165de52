//! The `api` function's router answers Lambda function-URL events (API Gateway HTTP
//! API v2 shape, as `lambda_http` decodes them) with the state in DynamoDB: an API key
//! is required, a project is created and listed, another tenant cannot see it.

mod support;

use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use support::Deployment;
use tessera_core::TenantId;
use tessera_lambda::routes;
use tower::ServiceExt;

fn event(method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> lambda_http::Request {
    let sample = std::fs::read_to_string(
        std::path::Path::new(
            &std::env::var("CARGO_MANIFEST_DIR")
                .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
        )
        .join("../../events/http-api-create-project.json"),
    )
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&sample).unwrap();
    v["rawPath"] = path.into();
    v["rawQueryString"] = "".into();
    v["queryStringParameters"] = serde_json::json!({});
    v["requestContext"]["http"]["method"] = method.into();
    v["requestContext"]["http"]["path"] = path.into();
    match key {
        Some(k) => v["headers"]["authorization"] = format!("Bearer {k}").into(),
        None => {
            v["headers"]
                .as_object_mut()
                .unwrap()
                .remove("authorization");
        }
    }
    v["body"] = body.map_or(serde_json::Value::Null, Into::into);
    lambda_http::request::from_str(&v.to_string()).unwrap()
}

async fn call(app: &axum::Router, req: lambda_http::Request) -> (u16, serde_json::Value) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// The api function's router on `d`, and an admin key of the local tenant.
async fn api(d: &Deployment) -> (axum::Router, String) {
    let faces = Arc::new(tessera_jobs::photos::FaceService::with_models(
        support::models(),
    ));
    let app = tessera_api::router(tessera_lambda::api::state(
        &d.functions[routes::STAGE_RUNNER],
        faces,
        ("3.8".into(), true),
    ));
    let (_, key) = tessera_api::auth::create_key(&d.adapters.store, TenantId::local(), true)
        .await
        .unwrap();
    (app, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_answers_function_url_events_on_dynamodb() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let (app, key) = api(&d).await;
    let store = &d.adapters.store;
    let other: TenantId = "someone-else".parse().unwrap();
    let (_, other_key) = tessera_api::auth::create_key(store, other, false)
        .await
        .unwrap();

    let (status, _) = call(&app, event("GET", "/healthz", None, None)).await;
    assert_eq!(status, 200);
    let (status, problem) = call(&app, event("GET", "/v1/projects", None, None)).await;
    assert_eq!(status, 401, "{problem}");

    // The sample event itself, with a real key.
    let (status, created) = call(
        &app,
        event(
            "POST",
            "/v1/projects",
            Some(&key),
            Some(r#"{"name":"from-a-function-url"}"#),
        ),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let pid = created["project_id"].as_str().unwrap().to_string();
    let (status, list) = call(&app, event("GET", "/v1/projects", Some(&key), None)).await;
    assert_eq!(status, 200);
    assert!(list.to_string().contains(&pid), "{list}");
    let (status, _) = call(
        &app,
        event(
            "GET",
            &format!("/v1/projects/{pid}"),
            Some(&other_key),
            None,
        ),
    )
    .await;
    assert_eq!(
        status, 404,
        "another tenant's project does not exist for it"
    );
    let (status, caps) = call(&app, event("GET", "/v1/capabilities", Some(&key), None)).await;
    assert_eq!(status, 200);
    assert!(caps.to_string().contains("features.extract.sift"), "{caps}");
    // The web console: the same files `tessera serve` serves, no key needed for them.
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/src/main.js", "text/javascript"),
    ] {
        let res = app
            .clone()
            .oneshot(event("GET", path, None, None))
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{path}");
        let ct = res.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with(kind), "{path}: {ct}");
        assert!(res.headers().contains_key("content-security-policy"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_s3_source_registers_the_images_under_its_prefix() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let (app, key) = api(&d).await;
    // Another bucket, as a customer's would be.
    let s3 = d.adapters.objects.client();
    s3.create_bucket()
        .bucket("customer-scenes")
        .send()
        .await
        .unwrap();
    let samples = std::path::Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
    )
    .join("../../sample/images");
    for (k, f) in [
        ("castle/a/IMG_9380.jpg", "IMG_9380.jpg"),
        ("castle/a/more/IMG_9381.jpg", "IMG_9381.jpg"),
        ("castle/ab/IMG_9382.jpg", "IMG_9382.jpg"),
    ] {
        s3.put_object()
            .bucket("customer-scenes")
            .key(k)
            .body(std::fs::read(samples.join(f)).unwrap().into())
            .send()
            .await
            .unwrap();
    }
    s3.put_object()
        .bucket("customer-scenes")
        .key("castle/a/readme.txt")
        .body(b"text".to_vec().into())
        .send()
        .await
        .unwrap();

    let (status, p) = call(
        &app,
        event("POST", "/v1/projects", Some(&key), Some(r#"{"name":"s3"}"#)),
    )
    .await;
    assert_eq!(status, 201, "{p}");
    let pid = p["project_id"].as_str().unwrap();
    let path = format!("/v1/projects/{pid}/datasets");
    let create = |key: &str, source: &str| {
        event(
            "POST",
            &path,
            Some(key),
            Some(&format!(r#"{{"name":"x","source":{source}}}"#)),
        )
    };
    let store = &d.adapters.store;
    let own_bucket = d.adapters.objects.bucket().to_string();
    // Nothing is granted yet: not even a bucket the role can read.
    let (status, problem) = call(
        &app,
        create(
            &key,
            r#"{"kind":"s3","bucket":"customer-scenes","prefix":"castle/a"}"#,
        ),
    )
    .await;
    assert_eq!(status, 403, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("grant-source"),
        "{problem}"
    );
    use tessera_core::catalog::source_grants;
    source_grants::grant(
        store,
        &own_bucket,
        &TenantId::local(),
        "customer-scenes",
        "castle",
    )
    .await
    .unwrap();
    assert!(
        source_grants::grant(store, &own_bucket, &TenantId::local(), &own_bucket, "")
            .await
            .is_err(),
        "the stack's bucket can never be granted"
    );
    // The stack's own bucket holds every tenant's raw uploads: never a source, for anyone.
    for prefix in ["uploads/", "", "blobs/"] {
        let (status, problem) = call(
            &app,
            create(
                &key,
                &format!(r#"{{"kind":"s3","bucket":"{own_bucket}","prefix":"{prefix}"}}"#),
            ),
        )
        .await;
        assert_eq!(status, 403, "{prefix}: {problem}");
    }
    let other: TenantId = "tenant-b".parse().unwrap();
    let (_, other_key) = tessera_api::auth::create_key(store, other.clone(), false)
        .await
        .unwrap();
    let (_, op) = call(
        &app,
        event(
            "POST",
            "/v1/projects",
            Some(&other_key),
            Some(r#"{"name":"b"}"#),
        ),
    )
    .await;
    let other_path = format!(
        "/v1/projects/{}/datasets",
        op["project_id"].as_str().unwrap()
    );
    let (status, problem) = call(
        &app,
        event(
            "POST",
            &other_path,
            Some(&other_key),
            Some(r#"{"name":"x","source":{"kind":"s3","bucket":"customer-scenes","prefix":"castle/a"}}"#),
        ),
    )
    .await;
    assert_eq!(status, 403, "granted to local, not to tenant-b: {problem}");
    for (source, status_wanted) in [
        // Outside the grant, beside it, or climbing out of it.
        (
            r#"{"kind":"s3","bucket":"customer-scenes","prefix":"other/"}"#,
            403,
        ),
        (
            r#"{"kind":"s3","bucket":"customer-scenes","prefix":"castleX/"}"#,
            403,
        ),
        (r#"{"kind":"s3","bucket":"customer-scenes"}"#, 403),
        (
            r#"{"kind":"s3","bucket":"customer-scenes","prefix":"castle/../uploads/"}"#,
            422,
        ),
        (
            r#"{"kind":"s3","bucket":"arn:aws:s3:::customer-scenes"}"#,
            422,
        ),
        (r#"{"kind":"s3","bucket":"no-such-bucket"}"#, 403),
    ] {
        let (status, problem) = call(&app, create(&key, source)).await;
        assert_eq!(status, status_wanted, "{source}: {problem}");
    }
    source_grants::grant(store, &own_bucket, &TenantId::local(), "no-such-bucket", "")
        .await
        .unwrap();
    let (status, problem) = call(
        &app,
        create(&key, r#"{"kind":"s3","bucket":"no-such-bucket"}"#),
    )
    .await;
    assert_eq!(status, 422, "granted but missing: {problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("no-such-bucket"),
        "{problem}"
    );
    let (status, ds) = call(
        &app,
        event(
            "POST",
            &path,
            Some(&key),
            Some(r#"{"name":"castle","source":{"kind":"s3","bucket":"customer-scenes","prefix":"castle/a"}}"#),
        ),
    )
    .await;
    assert_eq!(status, 201, "{ds}");
    assert_eq!(
        ds["x-import"]["registered"], 2,
        "castle/ab is another folder: {ds}"
    );
    let did = ds["dataset_id"].as_str().unwrap();
    let (_, images) = call(
        &app,
        event(
            "GET",
            &format!("/v1/datasets/{did}/images"),
            Some(&key),
            None,
        ),
    )
    .await;
    let mut rel: Vec<&str> = images["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["rel_path"].as_str().unwrap())
        .collect();
    rel.sort();
    assert_eq!(rel, ["IMG_9380.jpg", "more/IMG_9381.jpg"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_photo_uploaded_to_a_presigned_url_is_published_with_download_urls() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let (app, key) = api(&d).await;
    let (_, p) = call(
        &app,
        event(
            "POST",
            "/v1/projects",
            Some(&key),
            Some(r#"{"name":"photos"}"#),
        ),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap();
    let (status, presigned) = call(
        &app,
        event(
            "POST",
            &format!("/v1/x-tessera/projects/{pid}/photos:presign"),
            Some(&key),
            Some(r#"{"name":"grace hopper.jpg"}"#),
        ),
    )
    .await;
    assert_eq!(status, 201, "{presigned}");
    let url = presigned["upload"]["url"].as_str().unwrap();
    assert!(url.contains("X-Amz-Signature"), "{url}");
    // The URL can create its object once, never replace it: `If-None-Match: *` is signed.
    let signed = url
        .split(['?', '&'])
        .find_map(|q| q.strip_prefix("X-Amz-SignedHeaders="))
        .unwrap_or_default();
    assert!(signed.contains("if-none-match"), "{url}");
    assert_eq!(presigned["upload"]["headers"]["if-none-match"], "*");
    let photo = presigned["photo_id"].as_str().unwrap().to_string();

    // The client uploads straight to S3; the API never sees the bytes.
    let bytes = std::fs::read(support::shared().join("testdata/faces/grace_hopper.jpg")).unwrap();
    let upload = |body: Vec<u8>| {
        reqwest::Client::new()
            .put(url)
            .header("content-type", "image/jpeg")
            .header("if-none-match", "*")
            .body(body)
            .send()
    };
    let put = upload(bytes.clone()).await.unwrap();
    assert!(put.status().is_success(), "{}", put.text().await.unwrap());
    // The same URL again: S3 (and moto) refuse to replace the object.
    let again = upload(b"anything else".to_vec()).await.unwrap();
    assert_eq!(
        again.status().as_u16(),
        412,
        "{}",
        again.text().await.unwrap()
    );

    let get = || {
        event(
            "GET",
            &format!("/v1/x-tessera/photos/{photo}"),
            Some(&key),
            None,
        )
    };
    d.pump_until(Duration::from_secs(120), || async {
        call(&app, get()).await.1["status"] == "published"
    })
    .await;
    let (_, view) = call(&app, get()).await;
    let public = view["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["variant"] == "public")
        .unwrap_or_else(|| panic!("{view}"));
    let download = public["download_url"]
        .as_str()
        .unwrap_or_else(|| panic!("{view}"));
    let got = reqwest::get(download).await.unwrap();
    assert!(got.status().is_success());
    let body = got.bytes().await.unwrap();
    assert_eq!(&body[..2], &[0xFF, 0xD8], "a JPEG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_photo_from_a_key_already_in_the_bucket_is_ingested_and_managed_keys_are_refused() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let (app, key) = api(&d).await;
    let (_, p) = call(
        &app,
        event(
            "POST",
            "/v1/projects",
            Some(&key),
            Some(r#"{"name":"keys"}"#),
        ),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap();
    let bytes = std::fs::read(support::shared().join("testdata/faces/astronaut.png")).unwrap();
    use tessera_core::ports::ObjectStore;
    d.adapters
        .objects
        .put("incoming/local/astronaut.png", bytes.clone().into())
        .await
        .unwrap();
    let path = format!("/v1/x-tessera/projects/{pid}/photos");
    // Another tenant's object, and keys Tessera writes, whatever their folder's name.
    d.adapters
        .objects
        .put("incoming/tenant-b/theirs.png", bytes.clone().into())
        .await
        .unwrap();
    d.adapters
        .objects
        .put("thumbnails/d/s/256.jpg", bytes.into())
        .await
        .unwrap();
    for (body, needle, status_wanted) in [
        (r#"{"s3_key":"blobs/local/0000"}"#, "incoming folder", 403),
        (
            r#"{"s3_key":"thumbnails/d/s/256.jpg"}"#,
            "incoming folder",
            403,
        ),
        (
            r#"{"s3_key":"incoming/tenant-b/theirs.png"}"#,
            "incoming folder",
            403,
        ),
        (
            r#"{"s3_key":"incoming/local/../tenant-b/theirs.png"}"#,
            "segment",
            422,
        ),
        (
            r#"{"s3_key":"Incoming/local/astronaut.png"}"#,
            "incoming folder",
            403,
        ),
        (
            r#"{"s3_key":"incoming/local/missing.png"}"#,
            "no object",
            422,
        ),
        (
            r#"{"s3_key":"incoming/local/astronaut.png","blob_sha":"00"}"#,
            "exactly one",
            422,
        ),
    ] {
        let (status, problem) = call(&app, event("POST", &path, Some(&key), Some(body))).await;
        assert_eq!(status, status_wanted, "{body}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(needle),
            "{problem}"
        );
    }
    let (status, accepted) = call(
        &app,
        event(
            "POST",
            &path,
            Some(&key),
            Some(r#"{"s3_key":"incoming/local/astronaut.png"}"#),
        ),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    let photo = accepted["photo_id"].as_str().unwrap().to_string();
    let get = || {
        event(
            "GET",
            &format!("/v1/x-tessera/photos/{photo}"),
            Some(&key),
            None,
        )
    };
    d.pump_until(Duration::from_secs(120), || async {
        call(&app, get()).await.1["status"] == "published"
    })
    .await;
    let (_, view) = call(&app, get()).await;
    assert_eq!(view["name"], "astronaut.png");
}

/// A stored file larger than the `api` function streams at full speed is a redirect to
/// S3 (a presigned URL that honours the same range); a smaller answer is streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_over_the_functions_response_limit_is_redirected_to_s3() {
    use tessera_core::catalog::datasets::{self, CheckedBytes, NewDataset, Pixels};
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let (app, key) = api(&d).await;
    let dataset = datasets::create(
        &d.adapters.store,
        &TenantId::local(),
        tessera_core::ProjectId::new(),
        NewDataset {
            name: "large".into(),
            source: serde_json::json!({"kind": "upload"}),
            camera_model: "SIMPLE_RADIAL".into(),
            respect_exif_orientation: true,
            intrinsics_mode: Default::default(),
        },
    )
    .await
    .unwrap();
    let large: Vec<u8> = (0..tessera_api::LAMBDA_RESPONSE_LIMIT + 4096)
        .map(|i| (i % 251) as u8)
        .collect();
    let image = datasets::register_image(
        &d.adapters.store,
        &d.adapters.objects,
        &dataset,
        "large.jpg",
        CheckedBytes {
            sha: format!("{:064x}", large.len()),
            bytes: large.clone().into(),
            pixels: Pixels::Size(6000, 4000),
            gps: false,
        },
        ("upload", None),
    )
    .await
    .unwrap();
    let path = format!("/v1/images/{}/bytes", image.image_id);
    let get = |range: Option<&str>| {
        let mut e = event("GET", &path, Some(&key), None);
        if let Some(r) = range {
            e.headers_mut().insert("range", r.parse().unwrap());
        }
        app.clone().oneshot(e)
    };

    let whole = get(None).await.unwrap();
    assert_eq!(whole.status(), 307);
    let location = whole.headers()["location"].to_str().unwrap().to_string();
    let fetched = reqwest::get(&location).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), &large[..]);

    let tail = format!("bytes={}-", large.len() - 10);
    let small = get(Some(&tail)).await.unwrap();
    assert_eq!(
        small.status(),
        206,
        "a small range is answered, not redirected"
    );
    assert_eq!(small.headers()["content-length"], "10");
    let body = small.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.as_ref(), &large[large.len() - 10..]);

    let most = get(Some("bytes=1-")).await.unwrap();
    assert_eq!(most.status(), 307, "a range over the limit is redirected");
    let location = most.headers()["location"].to_str().unwrap().to_string();
    let ranged = reqwest::Client::new()
        .get(&location)
        .header("range", "bytes=1-")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 206);
    assert_eq!(ranged.bytes().await.unwrap().as_ref(), &large[1..]);
}
