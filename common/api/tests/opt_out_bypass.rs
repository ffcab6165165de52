//! The ways around an opt-out through the API, each closed: a non-admin key cannot
//! weaken a project's privacy (threshold up, subject removed, blur growth down,
//! metadata kept, blur regions removed), and an admin's weakening is on record; a
//! subject's own variant and whom each face matched are an admin's to see; a
//! refused upload is erasable, counted and collected; a project with subjects or
//! refusals is not deleted leaving them unreachable; photos are under a tenant quota;
//! keeping originals longer is an admin's change; an object in the incoming folder is
//! taken in once, so no key re-adds an original to a project with nobody opted out.
//! Real face models, real SQLite, real HTTP. (Blur regions racing a render, and files
//! deleted at unpublish: `common/jobs/tests/races.rs` and `photos.rs`.)

use reqwest::StatusCode;
use serde_json::{Value, json};
use tessera_api::AuthMode;
use tessera_core::TenantId;
use tessera_core::catalog::quotas;

mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weakening_privacy_needs_an_admin_key_and_is_audited() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let p = json_of(
        admin
            .post(format!("{}/v1/projects", s.base))
            .json(&json!({ "name": "event", "match_threshold": 0.363 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap();
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);

    // Opting someone out protects: anyone may.
    let reference = upload(&viewer, &s.base, &face_photo("astronaut.png"), 1 << 20).await;
    let r = viewer
        .post(format!("{x}/subjects"))
        .json(&json!({ "label": "astronaut", "blob_shas": [reference] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let sid = json_of(r).await["subject_id"].as_str().unwrap().to_string();
    let rev_before =
        json_of(viewer.get(format!("{x}/privacy")).send().await.unwrap()).await["subjects_rev"]
            .clone();

    let base = json!({ "match_threshold": 0.363, "blur_expand": 0.35 });
    let with = |patch: Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(patch.as_object().unwrap().clone());
        b
    };
    for weaker in [
        with(json!({ "match_threshold": 1.0 })),
        with(json!({ "match_threshold": 0.37 })),
        with(json!({ "blur_expand": 0.30 })),
        with(
            json!({ "keep_metadata": { "capture_time": true, "camera": true, "location": true } }),
        ),
    ] {
        let r = viewer
            .put(format!("{x}/privacy"))
            .json(&weaker)
            .send()
            .await
            .unwrap();
        let v = problem(r, StatusCode::FORBIDDEN).await;
        assert!(
            v["detail"].as_str().unwrap().contains("admin key"),
            "{weaker}: {v}"
        );
    }
    let r = viewer
        .delete(format!("{x}/subjects/{sid}"))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::FORBIDDEN).await;
    assert!(v["detail"].as_str().unwrap().contains("astronaut"), "{v}");
    // Nothing changed: same revision, the subject still enrolled.
    let now = json_of(viewer.get(format!("{x}/privacy")).send().await.unwrap()).await;
    assert_eq!(now["subjects_rev"], rev_before);
    assert!(
        (now["match_threshold"].as_f64().unwrap() - 0.363).abs() < 1e-6,
        "{now}"
    );
    let subs = json_of(viewer.get(format!("{x}/subjects")).send().await.unwrap()).await;
    assert_eq!(subs["total"], 1);

    // Stricter is anyone's: a lower threshold, more growth, less metadata.
    let r = viewer
        .put(format!("{x}/privacy"))
        .json(&json!({ "match_threshold": 0.30, "blur_expand": 0.40,
                       "keep_metadata": { "capture_time": false, "camera": false, "location": false } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);

    // A photo with a region: adding one is anyone's, removing it an admin's.
    let url = published_group_photo(&viewer, &s.base, &x).await;
    let region = json!({ "x": 0.0, "y": 0.68, "w": 0.3, "h": 0.3 });
    let r = viewer
        .put(format!("{url}/blur-regions"))
        .json(&json!({ "regions": [region] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let smaller = json!({ "x": 0.0, "y": 0.68, "w": 0.1, "h": 0.1 });
    for fewer in [json!([]), json!([smaller])] {
        let r = viewer
            .put(format!("{url}/blur-regions"))
            .json(&json!({ "regions": fewer }))
            .send()
            .await
            .unwrap();
        problem(r, StatusCode::FORBIDDEN).await;
    }
    let kept = json_of(viewer.get(&url).send().await.unwrap()).await;
    assert_eq!(kept["blur_regions"].as_array().unwrap().len(), 1);

    // Erasing the project would erase its subjects, and with them their protection. It
    // also holds a run: the refusal comes before anything is looked at or erased (a
    // run still going would otherwise answer 409, and an ended one would be gone).
    let d = json_of(
        viewer
            .post(format!("{}/v1/projects/{pid}/datasets", s.base))
            .json(&json!({ "name": "flight" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let did = d["dataset_id"].as_str().unwrap();
    for (file, bytes) in sample_photos(2) {
        let sha = upload(&viewer, &s.base, &bytes, 1 << 20).await;
        let r = viewer
            .post(format!("{}/v1/datasets/{did}/images", s.base))
            .json(&json!({ "name": file, "blob_sha": sha }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let run = json_of(
        viewer
            .post(format!(
                "{}/v1/projects/{pid}/pipelines/incremental",
                s.base
            ))
            .json(&json!({ "dataset_id": did, "spec": { "kind": "incremental" } }))
            .send()
            .await
            .unwrap(),
    )
    .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = viewer
        .delete(format!("{}/v1/projects/{pid}?cascade=true", s.base))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::FORBIDDEN).await;
    assert!(
        v["detail"].as_str().unwrap().contains("opted-out subject"),
        "{v}"
    );
    let subs = json_of(viewer.get(format!("{x}/subjects")).send().await.unwrap()).await;
    assert_eq!(subs["total"], 1, "nothing was erased");
    let r = viewer
        .get(format!("{}/v1/jobs/{run}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the run is still there");
    viewer
        .post(format!("{}/v1/jobs/{run}:cancel?force=true", s.base))
        .send()
        .await
        .unwrap();

    // An admin may weaken; each weakening is on record with what it takes away.
    let r = admin
        .put(format!("{x}/privacy"))
        .json(&with(json!({ "match_threshold": 0.5 })))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = admin
        .put(format!("{url}/blur-regions"))
        .json(&json!({ "regions": [] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = admin
        .delete(format!("{x}/subjects/{sid}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let audit = json_of(
        admin
            .get(format!("{}/v1/x-tessera/audit", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let items = audit["items"].as_array().unwrap();
    let settings: Vec<&Value> = items
        .iter()
        .filter(|e| e["action"] == "privacy.settings")
        .collect();
    assert_eq!(settings.len(), 2, "{audit}");
    let weakened = &settings[0]["detail"]["weakens"];
    assert!(
        weakened
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("raised from 0.3 to 0.5")),
        "{weakened}"
    );
    assert_eq!(settings[1]["detail"]["weakens"], json!([]));
    assert!(
        items
            .iter()
            .any(|e| e["action"] == "photo.blur_regions" && e["detail"]["uncovered"] == 1)
    );
    assert!(items.iter().any(|e| e["action"] == "subject.remove"));
}

/// An original kept longer can be read (by an admin), leaked or re-added for longer:
/// lengthening or clearing a project's retention is an admin's change, and on record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeping_originals_longer_needs_an_admin_key_and_is_audited() {
    let s = serve(AuthMode::ApiKey, false).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let pid = json_of(
        viewer
            .post(format!("{}/v1/projects", s.base))
            .json(&json!({ "name": "event" }))
            .send()
            .await
            .unwrap(),
    )
    .await["project_id"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("{}/v1/projects/{pid}", s.base);
    let retention = |c: &reqwest::Client, days: Value| {
        c.patch(&url)
            .json(&json!({ "upload_retention_days": days }))
            .send()
    };
    // Shorter is anyone's: from "for ever" to 30 days, then 7.
    for days in [json!(30), json!(7)] {
        let r = retention(&viewer, days.clone()).await.unwrap();
        assert_eq!(r.status(), 200, "{days}");
        assert_eq!(json_of(r).await["x-tessera"]["upload_retention_days"], days);
    }
    for longer in [json!(8), json!(null)] {
        let r = retention(&viewer, longer.clone()).await.unwrap();
        let v = problem(r, StatusCode::FORBIDDEN).await;
        assert!(
            v["detail"].as_str().unwrap().contains("admin key"),
            "{longer}: {v}"
        );
    }
    let now = json_of(viewer.get(&url).send().await.unwrap()).await;
    assert_eq!(now["x-tessera"]["upload_retention_days"], 7, "{now}");
    let r = retention(&admin, json!(null)).await.unwrap();
    assert_eq!(r.status(), 200);
    let audit = json_of(
        admin
            .get(format!("{}/v1/x-tessera/audit", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let kept: Vec<&Value> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "project.upload_retention")
        .collect();
    assert_eq!(kept.len(), 1, "only the weakening is on record: {audit}");
    assert_eq!(kept[0]["detail"]["from"], 7);
    assert_eq!(kept[0]["detail"]["to"], Value::Null);
}

/// An object put in the tenant's incoming folder is taken in once. Left there, any key
/// of the tenant could add it again to a project of its own with nobody opted out, and
/// read the unblurred photo back as that project's public file: the admin-only original
/// read without an admin, and a copy that erasing the photo would not reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incoming_photo_is_taken_in_once_and_cannot_be_added_again_elsewhere() {
    let s = serve(AuthMode::ApiKey, false).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let objects = s.engine.ports().objects.clone();
    let key = "incoming/local/event/IMG_0001.jpg";
    objects
        .put(key, face_photo("astronaut.png").into())
        .await
        .unwrap();
    let event = guarded_project(&admin, &s.base, "event").await;
    let r = admin
        .post(format!("{}/v1/x-tessera/projects/{event}/photos", s.base))
        .json(&json!({ "s3_key": key }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert!(
        objects.head(key).await.unwrap().is_none(),
        "the incoming object is gone once taken in"
    );
    let mine = guarded_project(&viewer, &s.base, "mine").await;
    let r = viewer
        .post(format!("{}/v1/x-tessera/projects/{mine}/photos", s.base))
        .json(&json!({ "s3_key": key }))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(
        v["detail"].as_str().unwrap().contains("no object there"),
        "{v}"
    );
    let (originals, _) = objects.list("uploads/", None, 100).await.unwrap();
    assert_eq!(
        originals.len(),
        1,
        "one original, in the project it was added to"
    );
    assert!(originals[0].key.contains(&event), "{:?}", originals[0].key);
}

/// A finalized upload is taken in once, as an incoming object is: once it is stored as a
/// photo's original, nobody who learns its hash can add it again to a project with nobody
/// opted out, or register it as a dataset image and read the unblurred photo back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_photo_is_taken_in_once_and_its_upload_cannot_be_read_back() {
    let s = serve(AuthMode::ApiKey, false).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let sha = upload(&admin, &s.base, &face_photo("astronaut.png"), 256 * 1024).await;
    let event = guarded_project(&admin, &s.base, "event").await;
    let r = admin
        .post(format!("{}/v1/x-tessera/projects/{event}/photos", s.base))
        .json(&json!({ "blob_sha": sha, "name": "IMG_0001.jpg" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let mine = guarded_project(&viewer, &s.base, "mine").await;
    let r = viewer
        .post(format!("{}/v1/x-tessera/projects/{mine}/photos", s.base))
        .json(&json!({ "blob_sha": sha, "name": "again.jpg" }))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains("upload the file first") && detail.contains("a photo already took it in"),
        "the answer says why an upload that reads as finalized has no bytes: {v}"
    );
    let d = json_of(
        viewer
            .post(format!("{}/v1/projects/{mine}/datasets", s.base))
            .json(&json!({ "name": "d" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let r = viewer
        .post(format!(
            "{}/v1/datasets/{}/images",
            s.base,
            d["dataset_id"].as_str().unwrap()
        ))
        .json(&json!({ "name": "a.jpg", "blob_sha": sha }))
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
    let objects = s.engine.ports().objects.clone();
    let (originals, _) = objects.list("uploads/", None, 100).await.unwrap();
    assert_eq!(originals.len(), 1, "one original: {originals:?}");
    assert!(originals[0].key.contains(&event), "{:?}", originals[0].key);
    let (blobs, _) = objects.list("blobs/", None, 100).await.unwrap();
    assert!(blobs.is_empty(), "the upload's bytes are gone: {blobs:?}");
}

/// A subject's own variant shows them unblurred, as the original does: it is an admin's
/// to read. Before, any key of the tenant was listed its URL and served it (audited, but
/// served), and saw whom every face matched, which is the listing of where each opted-out
/// person appears and the aim for erasing the photos that hold their clearest views.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subjects_own_variant_and_whom_a_face_matched_are_an_admins_to_see() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let pid = json_of(
        viewer
            .post(format!("{}/v1/projects", s.base))
            .json(&json!({ "name": "event", "match_threshold": 0.363 }))
            .send()
            .await
            .unwrap(),
    )
    .await["project_id"]
        .as_str()
        .unwrap()
        .to_string();
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);
    let reference = upload(&viewer, &s.base, &face_photo("astronaut.png"), 1 << 20).await;
    let r = viewer
        .post(format!("{x}/subjects"))
        .json(&json!({ "label": "astronaut", "blob_shas": [reference] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let sid = json_of(r).await["subject_id"].as_str().unwrap().to_string();
    let url = published_group_photo(&viewer, &s.base, &x).await;

    // An admin sees the astronaut's own copy and whom her faces matched, and reads it
    // (on record).
    let as_admin = json_of(admin.get(&url).send().await.unwrap()).await;
    let variants = |v: &Value| -> Vec<String> {
        v["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["variant"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(variants(&as_admin), ["public".to_string(), sid.clone()]);
    assert!(
        as_admin["faces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["decision"]["subject"] == sid.as_str()),
        "{as_admin}"
    );
    let r = admin
        .get(format!("{url}/files/{sid}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Any other key: the public copy only, decisions by kind, and a 403 for her copy,
    // its thumbnail, and any name that might be one (nothing said of which exist).
    let as_viewer = json_of(viewer.get(&url).send().await.unwrap()).await;
    assert_eq!(variants(&as_viewer), ["public".to_string()]);
    let faces = as_viewer["faces"].as_array().unwrap();
    assert!(
        faces.iter().any(|f| f["decision"]["decision"] == "subject"),
        "{as_viewer}"
    );
    for f in faces {
        let d = f["decision"].as_object().unwrap();
        assert_eq!(d.len(), 1, "a viewer sees the kind alone: {f}");
    }
    assert!(!as_viewer.to_string().contains(&sid), "{as_viewer}");
    let listed = json_of(viewer.get(format!("{x}/photos")).send().await.unwrap()).await;
    assert!(!listed.to_string().contains(&sid), "{listed}");
    for path in [
        format!("files/{sid}"),
        format!("files/{sid}?thumbnail=true"),
        format!("files/{}", tessera_core::SubjectId::new()),
    ] {
        let r = viewer.get(format!("{url}/{path}")).send().await.unwrap();
        let v = problem(r, StatusCode::FORBIDDEN).await;
        assert!(v["detail"].as_str().unwrap().contains("admin key"), "{v}");
    }
    let r = viewer
        .get(format!("{url}/files/public"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let audit = json_of(
        admin
            .get(format!("{}/v1/x-tessera/audit", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let reads = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "photo.read_unblurred")
        .count();
    assert_eq!(reads, 1, "the admin's read alone: {audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_uploads_are_erasable_counted_and_collected_and_no_project_leaves_them_behind() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let store = s.engine.ports().store.clone();
    let tenant = TenantId::local();
    let p = json_of(
        admin
            .post(format!("{}/v1/projects", s.base))
            .json(&json!({ "name": "refusals", "match_threshold": 0.363 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap().to_string();
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);

    // A truncated JPEG whose first 2,000 bytes are a real photo of people.
    let group = face_photo("composite_pd_1280x896.jpg");
    let mut broken = group[..2000].to_vec();
    broken.extend(std::iter::repeat_n(0u8, 5000));
    let mut refused = Vec::new();
    for _ in 0..2 {
        let sha = upload(&viewer, &s.base, &broken, 1 << 20).await;
        let r = viewer
            .post(format!("{x}/photos"))
            .json(&json!({ "blob_sha": sha, "name": "truncated.jpg" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        refused.push(json_of(r).await["photo_id"].as_str().unwrap().to_string());
    }
    assert_eq!(
        quotas::counter(store.as_ref(), &tenant, quotas::counters::PHOTOS)
            .await
            .unwrap(),
        2,
        "admitted photos are counted"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let l = json_of(viewer.get(format!("{x}/photos")).send().await.unwrap()).await;
        let failed = l["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["status"] == "failed")
            .count();
        if failed == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{l}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let under = |id: &str| format!("uploads/{pid}/{id}/");
    let objects = all_objects(&s).await;
    assert!(objects.iter().any(|k| k.starts_with(&under(&refused[0]))));

    // Not deleted while it holds refusals (they are unblurred photos of people).
    let r = admin
        .delete(format!("{}/v1/projects/{pid}", s.base))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::CONFLICT).await;
    assert!(
        v["detail"].as_str().unwrap().contains("refused upload"),
        "{v}"
    );

    // 1. Erased by its photo id, as any photo: bytes, record and count go.
    let r = viewer
        .delete(format!("{}/v1/x-tessera/photos/{}", s.base, refused[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(
        !all_objects(&s)
            .await
            .iter()
            .any(|k| k.starts_with(&under(&refused[0])))
    );
    let l = json_of(viewer.get(format!("{x}/photos")).send().await.unwrap()).await;
    assert_eq!(l["items"].as_array().unwrap().len(), 1, "{l}");
    let r = viewer
        .delete(format!("{}/v1/x-tessera/photos/{}", s.base, refused[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "erased once");
    assert_eq!(
        quotas::counter(store.as_ref(), &tenant, quotas::counters::PHOTOS)
            .await
            .unwrap(),
        1
    );

    // 2. Collected with its bytes once its time is up, by the reaper's collector.
    let later = tessera_core::Millis::now().plus(
        tessera_core::catalog::refusals::REFUSAL_LIFETIME + std::time::Duration::from_secs(60),
    );
    let c = tessera_core::catalog::collect::collect_expired(
        store.as_ref(),
        s.engine.ports().objects.as_ref(),
        later,
        1000,
    )
    .await
    .unwrap();
    assert_eq!(c.refusals, 1, "{c:?}");
    assert!(
        !all_objects(&s)
            .await
            .iter()
            .any(|k| k.starts_with(&format!("uploads/{pid}/")))
    );
    let l = json_of(viewer.get(format!("{x}/photos")).send().await.unwrap()).await;
    assert_eq!(l["items"].as_array().unwrap().len(), 0, "{l}");
    assert_eq!(
        quotas::counter(store.as_ref(), &tenant, quotas::counters::PHOTOS)
            .await
            .unwrap(),
        0
    );

    // 3. Subjects' embeddings never outlive their project unreachable.
    let reference = upload(&viewer, &s.base, &face_photo("astronaut.png"), 1 << 20).await;
    let r = viewer
        .post(format!("{x}/subjects"))
        .json(&json!({ "label": "astronaut", "blob_shas": [reference] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let sid = json_of(r).await["subject_id"].as_str().unwrap().to_string();
    let r = admin
        .delete(format!("{}/v1/projects/{pid}", s.base))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::CONFLICT).await;
    assert!(
        v["detail"].as_str().unwrap().contains("opted-out subject"),
        "{v}"
    );
    let subject_item = format!("| SUBJECT#{sid} |");
    assert!(all_items(&s).iter().any(|i| i.contains(&subject_item)));
    let r = admin
        .delete(format!("{x}/subjects/{sid}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    // The sweep the removal started may still run: wait for the project to settle.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = admin
            .delete(format!("{}/v1/projects/{pid}", s.base))
            .send()
            .await
            .unwrap();
        if r.status() == 204 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.status());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(!all_items(&s).iter().any(|i| i.contains(&subject_item)));
    // An upload through a URL handed out before the delete is swept a day later.
    let marker = format!("ERASED#project/{pid} |");
    assert!(all_items(&s).iter().any(|i| i.starts_with(&marker)));

    // 4. The photo quota: at the limit, no more photos are admitted.
    store
        .transact(vec![quotas::add(
            &tenant,
            quotas::counters::PHOTOS,
            quotas::MAX_PHOTOS as i64,
        )])
        .await
        .unwrap();
    let q = json_of(
        admin
            .post(format!("{}/v1/projects", s.base))
            .json(&json!({ "name": "full", "match_threshold": 0.363 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let sha = upload(&viewer, &s.base, &group, 1 << 20).await;
    let r = viewer
        .post(format!(
            "{}/v1/x-tessera/projects/{}/photos",
            s.base,
            q["project_id"].as_str().unwrap()
        ))
        .json(&json!({ "blob_sha": sha, "name": "group.jpg" }))
        .send()
        .await
        .unwrap();
    let v = problem(r, StatusCode::TOO_MANY_REQUESTS).await;
    assert!(v["detail"].as_str().unwrap().contains("photos"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrolment_refuses_reference_photos_that_will_not_work_and_says_how_many_do() {
    let s = serve_with(AuthMode::ApiKey, true, Some(face_models())).await;
    let (admin, _) = admin_and_viewer(&s).await;
    let p = json_of(
        admin
            .post(format!("{}/v1/projects", s.base))
            .json(&json!({ "name": "enrol", "match_threshold": 0.363 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let x = format!(
        "{}/v1/x-tessera/projects/{}",
        s.base,
        p["project_id"].as_str().unwrap()
    );
    let enrol = |shas: Vec<String>| {
        admin
            .post(format!("{x}/subjects"))
            .json(&json!({ "label": "astronaut", "blob_shas": shas }))
            .send()
    };
    // A group photo: whose face is it?
    let group = upload(
        &admin,
        &s.base,
        &face_photo("composite_pd_1280x896.jpg"),
        1 << 20,
    )
    .await;
    let v = problem(
        enrol(vec![group]).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("faces of similar size"),
        "{v}"
    );
    // The portrait reduced to a quarter: a face of some 23 px is no reference.
    let small = {
        let img = image::load_from_memory(&face_photo("astronaut.png")).unwrap();
        let img = img.resize(128, 128, image::imageops::FilterType::Triangle);
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    };
    let small = upload(&admin, &s.base, &small, 1 << 20).await;
    let v = problem(
        enrol(vec![small]).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(v["detail"].as_str().unwrap().contains("px wide"), "{v}");
    // The portrait out of focus (a Gaussian of 3 px on its 90 px face): refused by name.
    let soft = {
        let img = image::load_from_memory(&face_photo("astronaut.png")).unwrap();
        let img = image::DynamicImage::ImageRgba8(image::imageops::blur(&img, 3.0));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    };
    let soft = upload(&admin, &s.base, &soft, 1 << 20).await;
    let v = problem(
        enrol(vec![soft]).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("blurred or out of focus"),
        "{v}"
    );
    let subs = json_of(admin.get(format!("{x}/subjects")).send().await.unwrap()).await;
    assert_eq!(subs["total"], 0, "nothing enrolled from refused photos");
    // One good portrait: enrolled, with a warning that one view is thin.
    let one = upload(&admin, &s.base, &face_photo("astronaut.png"), 1 << 20).await;
    let r = enrol(vec![one]).await.unwrap();
    assert_eq!(r.status(), 201);
    let sub = json_of(r).await;
    assert_eq!(sub["usable_views"], 1);
    assert!(
        sub["warnings"][0].as_str().unwrap().contains("2 or more"),
        "{sub}"
    );
}

/// The shared group photo added to the project at `x` by `key`, once published: its URL.
async fn published_group_photo(key: &reqwest::Client, base: &str, x: &str) -> String {
    let blob = upload(key, base, &face_photo("composite_pd_1280x896.jpg"), 1 << 20).await;
    let r = key
        .post(format!("{x}/photos"))
        .json(&json!({ "blob_sha": blob, "name": "group.jpg" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let id = json_of(r).await["photo_id"].as_str().unwrap().to_string();
    let url = format!("{base}/v1/x-tessera/photos/{id}");
    photo_when(key, &url, |p| p["status"] == "published").await;
    url
}

/// A project of `c`'s with the recommended threshold: its id.
async fn guarded_project(c: &reqwest::Client, base: &str, name: &str) -> String {
    new_project(c, base, json!({ "name": name, "match_threshold": 0.363 })).await
}
