//! What the console's privacy review reads, as any client reads it: a project's photos
//! with their states (a refused upload failed, with the reason), each photo's faces and
//! decisions, and the unblurred original for admin keys only, every read audited. Real
//! face models, real SQLite, real HTTP.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tessera_api::AuthMode;

mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn photos_are_listed_with_states_and_reasons_and_originals_are_for_admins() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let (c, v) = admin_and_viewer(&s).await;
    let p: Value = c
        .post(format!("{}/v1/projects", s.base))
        .json(&json!({ "name": "review", "match_threshold": 0.363 }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pid = p["project_id"].as_str().unwrap();
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);

    // Someone opted out, so photos are face-processed (not published as they are).
    let reference = upload(&c, &s.base, &face_photo("astronaut.png"), 1 << 20).await;
    let r = c
        .post(format!("{x}/subjects"))
        .json(&json!({ "label": "astronaut", "blob_shas": [reference] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let group = face_photo("composite_pd_1280x896.jpg");
    let good = upload(&c, &s.base, &group, 1 << 20).await;
    // Bytes that claim to be a JPEG and are not: ingest refuses them.
    let mut broken = group[..2000].to_vec();
    broken.extend(std::iter::repeat_n(0u8, 5000));
    let bad = upload(&c, &s.base, &broken, 1 << 20).await;
    let mut ids = Vec::new();
    for (sha, name) in [(&good, "group.jpg"), (&bad, "truncated.jpg")] {
        let r = c
            .post(format!("{x}/photos"))
            .json(&json!({ "blob_sha": sha, "name": name }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        ids.push(
            r.json::<Value>().await.unwrap()["photo_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let photo_url = format!("{}/v1/x-tessera/photos/{}", s.base, ids[0]);
    let published = photo_when(&c, &photo_url, |p| p["status"] == "published").await;
    assert!(published["reason"].is_null());
    assert_eq!(published["faces"].as_array().unwrap().len(), 8);

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let listed = loop {
        let l: Value = v
            .get(format!("{x}/photos"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let failed = l["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["status"] == "failed");
        if failed {
            break l;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failure listed: {l}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{listed}");
    assert!(listed["next_page_token"].is_null(), "{listed}");
    // A page at a time, newest first, the failed upload (which may have no row) among
    // the photos; the cursor goes on where the last page stopped and ends with null.
    let mut paged = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let url = match &token {
            Some(t) => format!("{x}/photos?page_size=1&page_token={t}"),
            None => format!("{x}/photos?page_size=1"),
        };
        let page: Value = v.get(url).send().await.unwrap().json().await.unwrap();
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 1, "{page}");
        paged.extend(
            items
                .iter()
                .map(|p| p["photo_id"].as_str().unwrap().to_string()),
        );
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
        assert!(paged.len() <= 2, "the pages never end: {paged:?}");
    }
    let mut newest_first = ids.clone();
    newest_first.sort();
    newest_first.reverse();
    assert_eq!(paged, newest_first);
    problem(
        v.get(format!("{x}/photos?page_token=not-a-token"))
            .send()
            .await
            .unwrap(),
        reqwest::StatusCode::BAD_REQUEST,
    )
    .await;
    let by_id = |id: &str| items.iter().find(|p| p["photo_id"] == id).unwrap();
    let ok = by_id(&ids[0]);
    assert_eq!(ok["status"], "published");
    assert_eq!(ok["name"], "group.jpg");
    assert_eq!(ok["faces"].as_array().unwrap().len(), 8);
    let failed = by_id(&ids[1]);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["name"], "truncated.jpg");
    let reason = failed["reason"].as_str().unwrap();
    assert!(
        reason.contains("truncated.jpg"),
        "the reason names the file: {reason}"
    );

    // The original: admins only, byte for byte, on the audit trail.
    let original = format!("{photo_url}/original");
    let r = v.get(&original).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = c.get(&original).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/jpeg");
    // Read with a key, audited, and never from a shared or stale cache.
    assert_eq!(r.headers()["cache-control"], "private, no-cache");
    assert_eq!(r.bytes().await.unwrap().as_ref(), group.as_slice());
    let audit: Value = c
        .get(format!("{}/v1/x-tessera/audit", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reads: Vec<&Value> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "photo.read_original")
        .collect();
    assert_eq!(reads.len(), 1, "one admin read, audited: {audit}");
    assert_eq!(reads[0]["target"], format!("photo/{}", ids[0]));
}

/// The console's map and photo details read parsed EXIF, not display strings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exif_gives_the_camera_focal_length_and_gps_parsed() {
    let s = serve(AuthMode::ApiKey, false).await;
    let c = admin_client(&s).await;
    let (_, did) = dataset_of_samples(&c, &s.base, "exif", 1, 1 << 20).await;
    let images: Value = c
        .get(format!("{}/v1/datasets/{did}/images", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = images["items"][0]["image_id"].as_str().unwrap();
    let e: Value = c
        .get(format!("{}/v1/images/{id}/exif", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(e["exif"].as_object().unwrap().len() > 5, "{e}");
    assert!(e["camera"].as_str().is_some_and(|c| !c.is_empty()), "{e}");
    assert!(e["focal_length_mm"].as_f64().unwrap() > 0.0, "{e}");
    let (lat, lon) = (
        e["gps"]["lat"].as_f64().unwrap(),
        e["gps"]["lon"].as_f64().unwrap(),
    );
    assert!(
        lat.abs() <= 90.0 && lon.abs() <= 180.0 && (lat, lon) != (0.0, 0.0),
        "{e}"
    );
}
