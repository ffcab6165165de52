//! Hostile and careless clients against the real `tessera serve` (a subprocess, so its
//! peak memory can be read from /proc): each case must get a clear 4xx problem naming
//! what is wrong, store nothing, and leave the server's peak resident memory (VmHWM)
//! bounded. The table of cases with their answers and the memory each cost is printed
//! (`cargo test -p tessera-tests --test hostile -- --nocapture`).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_tests::{blob, post_json, repo_root, serve};

/// Peak resident memory of a process, in MiB.
fn vm_hwm_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        / 1024
}

/// Everything stored: object keys and state items.
fn stored(state: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let root = state.join("objects");
    let mut objects = BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let key = p.strip_prefix(&root).unwrap().display().to_string();
                // A thumbnail that failed is remembered beside the thumbnails, so asking
                // again costs no decode (`image_files.rs`): state derived from what was
                // stored before, one small object per image, erased with its dataset.
                if !(key.starts_with("thumbnails/") && key.ends_with("/unreadable.txt")) {
                    objects.insert(key);
                }
            }
        }
    }
    let db = rusqlite::Connection::open_with_flags(
        state.join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut q = db.prepare("SELECT pk, sk, body FROM items").unwrap();
    let items = q
        .query_map([], |r| {
            Ok(format!(
                "{}|{}|{}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        // Request metrics and job progress are not what a refused request stores.
        .filter(|i| !i.starts_with("EVENTS#"))
        .collect();
    (objects, items)
}

/// One hostile request.
struct Case {
    name: String,
    method: reqwest::Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// The status wanted.
    want: u16,
    /// Words the problem's detail must contain (what is wrong, named).
    needle: &'static str,
}

fn case(
    name: impl Into<String>,
    method: reqwest::Method,
    path: impl Into<String>,
    body: impl Into<Vec<u8>>,
    want: u16,
    needle: &'static str,
) -> Case {
    Case {
        name: name.into(),
        method,
        path: path.into(),
        headers: vec![("content-type", "application/json".into())],
        body: body.into(),
        want,
        needle,
    }
}

fn with_header(mut c: Case, k: &'static str, v: impl Into<String>) -> Case {
    c.headers.push((k, v.into()));
    c
}

async fn send(client: &reqwest::Client, base: &str, c: &Case) -> (u16, serde_json::Value) {
    let mut r = client.request(c.method.clone(), format!("{base}{}", c.path));
    for (k, v) in &c.headers {
        r = r.header(*k, v.as_str());
    }
    let r = r.body(c.body.clone()).send().await.unwrap();
    let status = r.status().as_u16();
    let v = r.json().await.unwrap_or(serde_json::Value::Null);
    (status, v)
}

/// A grey-level PNG of `w`×`h` 1-bit pixels: tiny on disk, huge when decoded.
fn png_of(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::One);
        let mut header = enc.write_header().unwrap();
        let mut writer = header.stream_writer().unwrap();
        let row = vec![0u8; w.div_ceil(8) as usize];
        for _ in 0..h {
            std::io::Write::write_all(&mut writer, &row).unwrap();
        }
        writer.finish().unwrap();
    }
    out
}

fn sample_jpeg() -> Vec<u8> {
    std::fs::read(repo_root().join("sample/images/IMG_9380.jpg")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_requests_get_clear_4xx_store_nothing_and_bounded_memory() {
    use reqwest::Method as M;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    // Keyed, as production's callers are: every hostile request passes authentication
    // and meets the handler behind it.
    let server = serve(state, "api_key", &[]);
    let base = server.base.clone();
    let c = server.admin_client();
    let pid_of_server = server.child.id();
    let idle_mib = vm_hwm_mib(pid_of_server);

    // What the hostile requests aim at.
    let project = post_json(
        &c,
        &format!("{base}/v1/projects"),
        serde_json::json!({"name": "target", "match_threshold": 0.363}),
    )
    .await;
    let pid = project["project_id"].as_str().unwrap().to_string();
    let dataset = post_json(
        &c,
        &format!("{base}/v1/projects/{pid}/datasets"),
        serde_json::json!({"name": "scene"}),
    )
    .await;
    let did = dataset["dataset_id"].as_str().unwrap().to_string();
    let jpeg = sample_jpeg();
    let jpeg_sha = blob(&c, &base, &jpeg).await;
    let image = post_json(
        &c,
        &format!("{base}/v1/datasets/{did}/images"),
        serde_json::json!({"name": "good.jpg", "blob_sha": jpeg_sha}),
    )
    .await;
    let image_id = image["image_id"].as_str().unwrap().to_string();
    let bomb_sha = blob(&c, &base, &png_of(13_000, 13_000)).await;
    let bomb = post_json(
        &c,
        &format!("{base}/v1/datasets/{did}/images"),
        serde_json::json!({"name": "bomb.png", "blob_sha": bomb_sha}),
    )
    .await;
    let bomb_id = bomb["image_id"].as_str().unwrap().to_string();
    let big_sha = blob(&c, &base, &png_of(6_000, 6_000)).await;
    let big = post_json(
        &c,
        &format!("{base}/v1/datasets/{did}/images"),
        serde_json::json!({"name": "big.png", "blob_sha": big_sha}),
    )
    .await;
    let big_id = big["image_id"].as_str().unwrap().to_string();
    let text_sha = blob(&c, &base, b"just some text, not an image").await;
    let truncated_sha = blob(&c, &base, &jpeg[..jpeg.len() / 2]).await;
    // Bytes that do not decode are registered, as sfmapi asks, each saying why by name;
    // they get no thumbnail, and a reconstruction's ingest refuses them by name.
    let mut unreadable_ids = Vec::new();
    for (name, sha, why) in [
        ("notes.jpg", &text_sha, "not an image"),
        ("half.jpg", &truncated_sha, "truncated"),
    ] {
        let img = post_json(
            &c,
            &format!("{base}/v1/datasets/{did}/images"),
            serde_json::json!({"name": name, "blob_sha": sha}),
        )
        .await;
        let said = img["unreadable"].as_str().unwrap_or_default();
        assert!(said.contains(name) && said.contains(why), "{img}");
        assert!(img["width"].is_null() && img["height"].is_null(), "{img}");
        unreadable_ids.push(img["image_id"].as_str().unwrap().to_string());
    }
    let open = post_json(
        &c,
        &format!("{base}/v1/uploads"),
        serde_json::json!({"expected_size": 10}),
    )
    .await["upload_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Every byte received, never finalized.
    let received = post_json(
        &c,
        &format!("{base}/v1/uploads"),
        serde_json::json!({"expected_size": 4}),
    )
    .await["upload_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c
        .patch(format!("{base}/v1/uploads/{received}"))
        .header("content-range", "bytes 0-3/4")
        .body("abcd")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let photo = post_json(
        &c,
        &format!("{base}/v1/x-tessera/projects/{pid}/photos"),
        serde_json::json!({"blob_sha": jpeg_sha, "name": "p.jpg"}),
    )
    .await["photo_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A photo takes its upload in once; the cases below name the same bytes again.
    assert_eq!(blob(&c, &base, &jpeg).await, jpeg_sha);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v: serde_json::Value = c
            .get(format!("{base}/v1/x-tessera/photos/{photo}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["status"] == "published" {
            break;
        }
        assert!(Instant::now() < deadline, "the photo never published: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let hex = "ab".repeat(32);
    let long = "n".repeat(2000);
    let regions = |n: usize| {
        serde_json::json!({"regions": vec![serde_json::json!({"x":0.1,"y":0.1,"w":0.1,"h":0.1}); n]})
            .to_string()
    };
    let up = format!("/v1/uploads/{open}");
    let ds = format!("/v1/projects/{pid}/datasets");
    let imgs = format!("/v1/datasets/{did}/images");
    let xp = format!("/v1/x-tessera/projects/{pid}");
    let ph = format!("/v1/x-tessera/photos/{photo}");
    let chunk = |range: &str, body: &[u8]| {
        with_header(
            case(
                format!("chunk `{range}` with {} bytes", body.len()),
                M::PATCH,
                up.clone(),
                body.to_vec(),
                416,
                "",
            ),
            "content-range",
            range.to_string(),
        )
    };
    let cases = vec![
        // Uploads.
        case("expected_size 0", M::POST, "/v1/uploads", r#"{"expected_size":0}"#, 422, "expected_size"),
        case("expected_size 2^40", M::POST, "/v1/uploads", r#"{"expected_size":1099511627776}"#, 422, "expected_size"),
        case("expected_size a string", M::POST, "/v1/uploads", r#"{"expected_size":"abc"}"#, 400, "expected_size"),
        case("expected_size negative", M::POST, "/v1/uploads", r#"{"expected_size":-1}"#, 400, "expected_size"),
        case("expected_sha not hex", M::POST, "/v1/uploads", r#"{"expected_size":5,"expected_sha":"xyz"}"#, 422, "expected_sha"),
        case("upload body not JSON", M::POST, "/v1/uploads", "{", 400, "JSON"),
        with_header(case("Idempotency-Key of 300 bytes", M::POST, "/v1/uploads", r#"{"expected_size":5}"#, 422, "Idempotency-Key"), "idempotency-key", "k".repeat(300)),
        with_header(case("Idempotency-Key with a tab", M::POST, "/v1/uploads", r#"{"expected_size":5}"#, 422, "Idempotency-Key"), "idempotency-key", "a\tb"),
        case("chunk without Content-Range", M::PATCH, up.clone(), "abc", 400, "Content-Range"),
        Case { want: 400, needle: "Content-Range", ..chunk("bytes 5-2/10", b"") },
        Case { want: 400, needle: "Content-Range", ..chunk("bytes 0-99999999999999999999/10", b"x") },
        Case { want: 400, needle: "Content-Range", ..chunk("bytes -1-3/10", b"xxxxx") },
        Case { want: 400, needle: "Content-Range", ..chunk("bytes 0-3/*", b"xxxx") },
        Case { needle: "does not match", ..chunk("bytes 0-9/11", b"0123456789") },
        Case { needle: "does not match", ..chunk("bytes 0-4/10", b"012") },
        Case { needle: "send `bytes 0-", ..chunk("bytes 5-9/10", b"56789") },
        with_header(case("a chunk over 2 MiB", M::PATCH, up.clone(), vec![0u8; 3 << 20], 413, "at most"), "content-range", format!("bytes 0-{}/10", (3 << 20) - 1)),
        case("chunk to an unknown upload", M::PATCH, "/v1/uploads/01JA0000000000000000000000", "x", 404, "does not exist"),
        case("chunk to upload `..`", M::PATCH, "/v1/uploads/..", "x", 404, ""),
        case("finalize an incomplete upload", M::POST, format!("{up}:finalize"), "", 409, "send the rest"),
        with_header(case("finalize with a non-hex hash", M::POST, format!("/v1/uploads/{received}:finalize"), "", 422, "X-Content-SHA256"), "x-content-sha256", "nothex"),
        with_header(case("finalize with another hash", M::POST, format!("/v1/uploads/{received}:finalize"), "", 422, "not the expected"), "x-content-sha256", hex.clone()),
        // Datasets and images.
        case("dataset name empty", M::POST, ds.clone(), r#"{"name":""}"#, 422, "name"),
        case("dataset name of 2000 bytes", M::POST, ds.clone(), format!(r#"{{"name":"{long}"}}"#), 422, "name"),
        case("dataset name with a control character", M::POST, ds.clone(), r#"{"name":"a\u0007b"}"#, 422, "name"),
        case("camera model unknown", M::POST, ds.clone(), r#"{"name":"d","camera_model":"FISHEYE_9000"}"#, 422, "camera_model"),
        case("source kind ftp", M::POST, ds.clone(), r#"{"name":"d","source":{"kind":"ftp"}}"#, 422, "source.kind"),
        case("source kind local, not offered", M::POST, ds.clone(), r#"{"name":"d","source":{"kind":"local","root":"/etc"}}"#, 501, "local"),
        case("source kind s3, not offered", M::POST, ds.clone(), r#"{"name":"d","source":{"kind":"s3","bucket":"b"}}"#, 501, "s3"),
        case("image name `..`", M::POST, imgs.clone(), format!(r#"{{"name":"..","blob_sha":"{jpeg_sha}"}}"#), 422, "image name"),
        case("image name with `/`", M::POST, imgs.clone(), format!(r#"{{"name":"a/b.jpg","blob_sha":"{jpeg_sha}"}}"#), 422, "image name"),
        case("image name with `\\`", M::POST, imgs.clone(), format!(r#"{{"name":"a\\\\b.jpg","blob_sha":"{jpeg_sha}"}}"#), 422, "image name"),
        case("image name of 2000 bytes", M::POST, imgs.clone(), format!(r#"{{"name":"{long}","blob_sha":"{jpeg_sha}"}}"#), 422, "image name"),
        case("image name with a control character", M::POST, imgs.clone(), format!(r#"{{"name":"a\u0001.jpg","blob_sha":"{jpeg_sha}"}}"#), 422, "image name"),
        case("blob_sha not hex", M::POST, imgs.clone(), r#"{"name":"x.jpg","blob_sha":"zz"}"#, 422, "blob_sha"),
        case("blob_sha of nothing", M::POST, imgs.clone(), format!(r#"{{"name":"x.jpg","blob_sha":"{hex}"}}"#), 422, "no finalized upload"),
        case("thumbnail of text registered as an image", M::GET, format!("/v1/images/{}/thumbnail?size=64", unreadable_ids[0]), "", 422, "not an image"),
        case("thumbnail of a truncated JPEG", M::GET, format!("/v1/images/{}/thumbnail", unreadable_ids[1]), "", 422, "truncated"),
        case("the same name again", M::POST, imgs.clone(), format!(r#"{{"name":"good.jpg","blob_sha":"{text_sha}"}}"#), 409, "already"),
        case("the same name with other bytes", M::POST, imgs.clone(), format!(r#"{{"name":"bomb.png","blob_sha":"{jpeg_sha}"}}"#), 409, "already"),
        case("batch of 0", M::POST, format!("{imgs}:batchCreate"), r#"{"requests":[]}"#, 422, "1 to 1000"),
        case("batch of 1001", M::POST, format!("{imgs}:batchCreate"), serde_json::json!({"requests": vec![serde_json::json!({"name":"a.jpg","blob_sha":hex}); 1001]}).to_string(), 422, "1 to 1000"),
        case("thumbnail size 15", M::GET, format!("/v1/images/{image_id}/thumbnail?size=15"), "", 422, "size"),
        case("thumbnail size 1025", M::GET, format!("/v1/images/{image_id}/thumbnail?size=1025"), "", 422, "size"),
        case("thumbnail size abc", M::GET, format!("/v1/images/{image_id}/thumbnail?size=abc"), "", 422, "size"),
        case("thumbnail of a 169-megapixel PNG", M::GET, format!("/v1/images/{bomb_id}/thumbnail?size=256"), "", 422, "pixels"),
        with_header(case("a range past the end", M::GET, format!("/v1/images/{image_id}/bytes"), "", 416, ""), "range", "bytes=999999999-"),
        with_header(case("two ranges", M::GET, format!("/v1/images/{image_id}/bytes"), "", 416, ""), "range", "bytes=0-1,4-5"),
        case("image id not a ULID", M::GET, "/v1/images/..%2F..%2Fetc/bytes", "", 404, ""),
        // Photos and privacy.
        case("50,000 blur regions", M::PUT, format!("{ph}/blur-regions"), regions(50_000), 422, "regions"),
        case("201 blur regions", M::PUT, format!("{ph}/blur-regions"), regions(201), 422, "regions"),
        case("a region of width -1", M::PUT, format!("{ph}/blur-regions"), r#"{"regions":[{"x":0.1,"y":0.1,"w":-1,"h":0.1}]}"#, 422, "region 0"),
        case("a region of NaN (1e999)", M::PUT, format!("{ph}/blur-regions"), r#"{"regions":[{"x":1e999,"y":0.1,"w":0.1,"h":0.1}]}"#, 400, "JSON"),
        case("a region outside the photo", M::PUT, format!("{ph}/blur-regions"), r#"{"regions":[{"x":0.9,"y":0.1,"w":0.5,"h":0.1}]}"#, 422, "region 0"),
        case("enrol with 100 references", M::POST, format!("{xp}/subjects"), serde_json::json!({"label":"x","blob_shas": vec![hex.clone(); 100]}).to_string(), 422, "1 to 20"),
        case("enrol with a non-hex blob", M::POST, format!("{xp}/subjects"), r#"{"label":"x","blob_shas":["../../etc/passwd"]}"#, 422, "blob_shas"),
        case("enrol with no label", M::POST, format!("{xp}/subjects"), format!(r#"{{"label":"","blob_shas":["{jpeg_sha}"]}}"#), 422, "label"),
        case("photo from an s3_key outside the tenant's folder", M::POST, format!("{xp}/photos"), r#"{"s3_key":"blobs/local/x"}"#, 403, "incoming"),
        case("photo from an s3_key with `..`", M::POST, format!("{xp}/photos"), r#"{"s3_key":"incoming/local/../../blobs/x"}"#, 422, "s3_key"),
        case("photo with both a blob and a key", M::POST, format!("{xp}/photos"), format!(r#"{{"s3_key":"incoming/local/a.jpg","blob_sha":"{jpeg_sha}"}}"#), 422, "exactly one"),
        case("photo named with a `/`", M::POST, format!("{xp}/photos"), format!(r#"{{"blob_sha":"{jpeg_sha}","name":"a/b.jpg"}}"#), 422, "file name"),
        case("threshold 5", M::PUT, format!("{xp}/privacy"), r#"{"match_threshold":5,"blur_expand":0.35}"#, 422, "threshold"),
        case("blur expansion 0.9", M::PUT, format!("{xp}/privacy"), r#"{"match_threshold":0.3,"blur_expand":0.9}"#, 422, "expansion"),
        case("presign on a folder store", M::POST, format!("{xp}/photos:presign"), r#"{"name":"a.jpg"}"#, 501, "upload URLs"),
        case("a variant that is not there", M::GET, format!("{ph}/files/nobody"), "", 404, "variant"),
        // Projects, jobs, streams.
        case("project name empty", M::POST, "/v1/projects", r#"{"name":""}"#, 422, "project name"),
        case("project name with `#`", M::POST, "/v1/projects", r#"{"name":"a#b"}"#, 422, "project name"),
        case("project name of 2000 bytes", M::POST, "/v1/projects", format!(r#"{{"name":"{long}"}}"#), 422, "project name"),
        case("a pair strategy not offered", M::POST, format!("/v1/projects/{pid}/pipelines/incremental"), format!(r#"{{"dataset_id":"{did}","spec":{{"kind":"incremental"}},"matches":{{"pairs":{{"strategy":"vocab"}}}}}}"#), 501, "pairs.vocab"),
        case("a job id that is not a ULID", M::GET, "/v1/jobs/not-a-job", "", 404, ""),
        with_header(case("Last-Event-ID not a number", M::GET, "/v1/jobs/01JA0000000000000000000000/events", "", 404, ""), "last-event-id", "abc"),
        with_header(case("a page from another origin", M::POST, "/v1/projects", r#"{"name":"csrf"}"#, 403, "--cors-origin"), "origin", "http://evil.example"),
    ];
    // Concurrent thumbnails of a 36-megapixel PNG: decoded under the megapixel budget.
    let thumbs = (0..4)
        .map(|i| {
            case(
                format!("thumbnail {i} of a 36-megapixel PNG (4 at once)"),
                M::GET,
                format!("/v1/images/{big_id}/thumbnail?size={}", 100 + i * 50),
                "",
                200,
                "",
            )
        })
        .collect::<Vec<_>>();

    let mut table = Vec::new();
    let mut failures = Vec::new();
    let before_all = stored(state);
    for c_ in &cases {
        let before = stored(state);
        let (status, problem) = send(&c, &base, c_).await;
        let after = stored(state);
        let detail = problem["detail"].as_str().unwrap_or_default().to_string();
        let ok = status == c_.want && detail.contains(c_.needle);
        if !ok {
            failures.push(format!(
                "{}: {status} (wanted {} with {:?}) {problem}",
                c_.name, c_.want, c_.needle
            ));
        }
        if before != after {
            let new_objects: Vec<_> = after.0.difference(&before.0).collect();
            let new_items: Vec<_> = after
                .1
                .difference(&before.1)
                .map(|i| i.chars().take(160).collect::<String>())
                .collect();
            failures.push(format!(
                "{}: stored something: {new_objects:?} {new_items:?}",
                c_.name
            ));
        }
        table.push((c_.name.clone(), status, detail, vm_hwm_mib(pid_of_server)));
    }
    let futures = thumbs.iter().map(|t| send(&c, &base, t));
    for (t, (status, problem)) in thumbs
        .iter()
        .zip(futures_util::future::join_all(futures).await)
    {
        if status != 200 {
            failures.push(format!("{}: {status} {problem}", t.name));
        }
        table.push((
            t.name.clone(),
            status,
            String::new(),
            vm_hwm_mib(pid_of_server),
        ));
    }
    // 3,000 one-byte chunks: the 2,048th is refused (413), the upload is not lost.
    let u = post_json(
        &c,
        &format!("{base}/v1/uploads"),
        serde_json::json!({"expected_size": 3000}),
    )
    .await;
    let uid = u["upload_id"].as_str().unwrap().to_string();
    let mut refused_at = None;
    for a in 0..3000u32 {
        let r = c
            .patch(format!("{base}/v1/uploads/{uid}"))
            .header("content-range", format!("bytes {a}-{a}/3000"))
            .body(vec![b'x'])
            .send()
            .await
            .unwrap();
        if r.status() != 200 {
            let status = r.status().as_u16();
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(status, 413, "{v}");
            refused_at = Some(a);
            table.push((
                "3,000 one-byte chunks".into(),
                status,
                v["detail"].as_str().unwrap().into(),
                vm_hwm_mib(pid_of_server),
            ));
            break;
        }
    }
    assert_eq!(refused_at, Some(2047));

    println!("\n{:<62} {:>6} {:>8}  detail", "case", "status", "VmHWM");
    for (name, status, detail, mib) in &table {
        println!(
            "{name:<62} {status:>6} {mib:>5} MiB  {}",
            detail.chars().take(110).collect::<String>()
        );
    }
    let peak = vm_hwm_mib(pid_of_server);
    println!(
        "server VmHWM: {idle_mib} MiB at start, {peak} MiB at the end ({} cases)",
        table.len()
    );
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(table.len() >= 60, "{} cases", table.len());
    // Nothing the refused cases sent is anywhere in the store.
    let after_all = stored(state);
    assert!(after_all.0.iter().all(|k| !k.contains("csrf")));
    assert!(before_all.0.len() <= after_all.0.len());
    assert!(
        peak < 512,
        "the server's peak resident memory reached {peak} MiB under hostile input"
    );
}
