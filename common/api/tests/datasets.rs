//! Uploads, datasets and images over real HTTP on the real embedded adapters: chunked
//! uploads, ranges and ETags, validation, local sources, and a recipe over a dataset
//! whose images changed.

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use tessera_api::AuthMode;
use tessera_core::TenantId;

mod support;
use support::*;

/// A chunk over the limit is refused only once its body is read: a server that answers
/// first closes the connection under a client still sending, and the client sees a
/// reset instead of the 413 (the hostile-request test failed so, once, under load).
/// Here the client sends most of a 3 MiB chunk, waits long enough for an early answer
/// and the close after it, then sends the rest and reads the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_over_the_limit_is_refused_after_its_body_is_read() {
    let s = serve(AuthMode::ApiKey, false).await;
    let key = admin_key(&s).await;
    let c = as_key(&key);
    let u: Value = c
        .post(format!("{}/v1/uploads", s.base))
        .json(&json!({"expected_size": 10}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = u["upload_id"].as_str().unwrap().to_string();
    let addr = s.base.trim_start_matches("http://").to_string();
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let size: usize = 3 << 20;
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            tcp,
            "PATCH /v1/uploads/{id} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Range: bytes 0-{}/10\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n",
            size - 1
        )
        .unwrap();
        let first = size - (256 << 10);
        tcp.write_all(&vec![0u8; first]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let rest = tcp.write_all(&vec![0u8; size - first]);
        let mut out = String::new();
        let read = tcp.read_to_string(&mut out);
        (rest.map_err(|e| e.to_string()), read.map_err(|e| e.to_string()), out)
    })
    .await
    .unwrap();
    let (rest, read, out) = answer;
    assert!(rest.is_ok() && read.is_ok(), "{rest:?} {read:?} {out}");
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert!(out.contains("at most"), "{out}");
    // The upload is as it was.
    let v: Value = c
        .get(format!(
            "{}/v1/uploads/{}",
            s.base,
            u["upload_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["received_bytes"], 0, "{v}");
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
        .post(format!("{}/v1/projects/{pid}/pipelines/spherical", s.base))
        .json(&json!({"dataset_id": did, "spec": {"kind": "spherical"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        problem(r, StatusCode::NOT_IMPLEMENTED).await["capability"],
        "map.spherical"
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

    let folders =
        tessera_api::sources::LocalFolders::new(&[allowed.path().to_path_buf()], &[]).unwrap();
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

/// `images:batchCreate` of one blob under 100 names once wrote 100 copies: the bytes
/// are stored once per distinct content, served under every name, and go with the last
/// image that names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_blob_under_a_hundred_names_is_stored_once() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = as_key(&admin_key(&s).await);
    let (_, did) = dataset_of_samples(&c, &s.base, "same", 0, 1 << 20).await;
    let (_, photo) = sample_photos(1).pop().unwrap();
    let sha = upload(&c, &s.base, &photo, 1 << 20).await;
    let names: Vec<String> = (0..100).map(|i| format!("copy-{i:03}.jpg")).collect();
    let requests: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "blob_sha": sha}))
        .collect();
    let r = c
        .post(format!("{}/v1/datasets/{did}/images:batchCreate", s.base))
        .json(&json!({ "requests": requests }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let held = || async {
        let (page, _) = s
            .engine
            .ports()
            .objects
            .list(&format!("datasets/{did}/"), None, 1000)
            .await
            .unwrap();
        page.len()
    };
    assert_eq!(held().await, 1, "100 names of one blob: one object");
    let listed: Value = json_of(
        c.get(format!("{}/v1/datasets/{did}/images?page_size=200", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let images = listed["images"]
        .as_array()
        .or(listed["items"].as_array())
        .unwrap();
    assert_eq!(images.len(), 100);
    let last = images[99]["image_id"].as_str().unwrap().to_string();
    for n in &names[..99] {
        let r = c
            .delete(format!("{}/v1/datasets/{did}/images/{n}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }
    assert_eq!(held().await, 1);
    let served = c
        .get(format!("{}/v1/images/{last}/bytes", s.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        served[..] == photo[..],
        "the last name still serves the bytes"
    );
    let r = c
        .delete(format!("{}/v1/datasets/{did}/images/{}", s.base, names[99]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(held().await, 0, "no image names the bytes: they are gone");
}
