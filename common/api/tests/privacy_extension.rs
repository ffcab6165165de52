//! The privacy extension over real HTTP on the real embedded adapters: enrolment,
//! blurring, serving and re-blurring, and erasure down to tombstones and the audit trail.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tessera_api::AuthMode;

mod support;
use support::*;

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
    // The photo of the astronaut alone is other bytes than her reference photo: a photo
    // takes its upload in once, and the reference upload is checked below.
    let alone = {
        let img = image::load_from_memory(&face_photo("astronaut.png")).unwrap();
        let mut out = std::io::Cursor::new(Vec::new());
        img.to_rgb8()
            .write_to(&mut out, image::ImageFormat::Jpeg)
            .unwrap();
        out.into_inner()
    };
    for (bytes, name) in [
        (face_photo("composite_pd_1280x896.jpg"), "group.jpg"),
        (alone, "alone.jpg"),
    ] {
        let sha = upload(&c, &s.base, &bytes, 256 * 1024).await;
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

/// An opt-out's sweep cancelled before it reached a published photo leaves the photo
/// withheld (decided before the opt-out) with nobody to re-decide it. The photo, the
/// project's privacy view and the job all say so over HTTP, with the job to resume; once
/// resumed, the photo is decided again and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sweep_is_reported_on_its_photos_until_it_is_resumed() {
    let s = serve_with(AuthMode::ApiKey, false, Some(face_models())).await;
    let c = admin_client(&s).await;
    let pid = &new_project(
        &c,
        &s.base,
        json!({"name": "gala", "match_threshold": 0.363}),
    )
    .await;
    let x = format!("{}/v1/x-tessera/projects/{pid}", s.base);
    let (worker, running) = start_worker_joinable(&s);
    let photo = upload(&c, &s.base, &face_photo("grace_hopper.jpg"), 256 * 1024).await;
    let added: Value = c
        .post(format!("{x}/photos"))
        .json(&json!({"blob_sha": photo, "name": "hopper.jpg"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let photo_url = format!(
        "{}/v1/x-tessera/photos/{}",
        s.base,
        added["photo_id"].as_str().unwrap()
    );
    photo_when(&c, &photo_url, |v| v["status"] == "published").await;
    // Nothing runs the sweep: it is cancelled while it waits in the queue.
    worker.cancel();
    running.await.unwrap();
    let reference = upload(&c, &s.base, &face_photo("astronaut.png"), 256 * 1024).await;
    let r = c
        .post(format!("{x}/subjects"))
        .json(&json!({"label": "astronaut", "blob_shas": [reference]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let enrolled: Value = r.json().await.unwrap();
    let sweep = enrolled["reblur_job_id"].as_str().unwrap().to_string();
    let privacy = get_json(&c, &format!("{x}/privacy")).await;
    assert_eq!(privacy["photos_not_current"], 1, "{privacy}");
    let r = c
        .post(format!("{}/v1/jobs/{sweep}:cancel", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let withheld = get_json(&c, &photo_url).await;
    assert_eq!(withheld["status"], "processing", "{withheld}");
    let reason = withheld["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("hopper.jpg") && reason.contains(&format!("/v1/jobs/{sweep}:resume")),
        "{withheld}"
    );
    assert!(withheld["published_at"].is_null(), "{withheld}");
    let privacy = get_json(&c, &format!("{x}/privacy")).await;
    assert_eq!(
        privacy["sweep_stalled"]["job_id"],
        sweep.as_str(),
        "{privacy}"
    );
    let r = c
        .post(format!("{}/v1/jobs/{sweep}:resume", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let _worker = start_worker(&s);
    let again = photo_when(&c, &photo_url, |v| v["status"] == "published").await;
    assert!(again["reason"].is_null(), "{again}");
    let privacy = get_json(&c, &format!("{x}/privacy")).await;
    assert!(privacy["sweep_stalled"].is_null(), "{privacy}");
    assert_eq!(privacy["photos_not_current"], 0, "{privacy}");
}
