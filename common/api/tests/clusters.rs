//! The people a project's photos show, through the API: listed for an admin ("this person
//! appears in N photos"), refused to other keys, and opted out directly, after which every
//! photo is decided again and the cluster's faces are blurred. Real face models, real
//! SQLite, real HTTP.

use serde_json::json;
use tessera_api::AuthMode;

mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_lists_the_people_in_a_project_and_opts_one_out() {
    let s = serve_with(AuthMode::ApiKey, false, Some(face_models())).await;
    let (admin, viewer) = admin_and_viewer(&s).await;
    let base = s.base.clone();
    let p = json_of(
        admin
            .post(format!("{base}/v1/projects"))
            .json(&json!({ "name": "event", "match_threshold": 0.363 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap().to_string();
    let x = format!("{base}/v1/x-tessera/projects/{pid}");
    // Someone opted out already (a project nobody opted out of is not searched for faces).
    let reference = upload(&viewer, &base, &face_photo("astronaut.png"), 1 << 20).await;
    let r = viewer
        .post(format!("{x}/subjects"))
        .json(&json!({ "label": "astronaut", "blob_shas": [reference] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let group = upload(
        &viewer,
        &base,
        &face_photo("composite_pd_1280x896.jpg"),
        1 << 20,
    )
    .await;
    let added = json_of(
        viewer
            .post(format!("{x}/photos"))
            .json(&json!({ "blob_sha": group, "name": "group.jpg" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let photo_url = format!(
        "{base}/v1/x-tessera/photos/{}",
        added["photo_id"].as_str().unwrap()
    );
    let worker = start_worker(&s);
    let published = photo_when(&admin, &photo_url, |v| v["status"] == "published").await;
    let shown_before = published["faces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["decision"]["decision"] == "not_opted_out")
        .count();

    // A listing of who appears where is an admin's.
    let r = viewer.get(format!("{x}/clusters")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let listed = json_of(admin.get(format!("{x}/clusters")).send().await.unwrap()).await;
    let items = listed["items"].as_array().unwrap();
    assert!(!items.is_empty(), "{listed}");
    // The composite shows Grace Hopper three times: one person, three faces, one photo.
    let hopper = items
        .iter()
        .find(|c| c["faces"] == 3)
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(hopper["photos"], 1);
    assert_eq!(hopper["summary"], "this person appears in 1 photo");
    assert_eq!(hopper["standing"], "unsure");
    let cid = hopper["cluster_id"].as_str().unwrap();
    let astronaut = items
        .iter()
        .find(|c| c["standing"] == "opted_out")
        .unwrap_or_else(|| panic!("the astronaut's cluster matches her: {listed}"));
    assert_eq!(astronaut["subjects"][0]["label"], "astronaut");
    // Each face says which person it was found to be.
    let faces = published["faces"].as_array().unwrap();
    assert_eq!(
        faces.iter().filter(|f| f["cluster_id"] == cid).count(),
        3,
        "{published}"
    );

    // To other keys, a photo does not say who each face is.
    let as_viewer = json_of(viewer.get(&photo_url).send().await.unwrap()).await;
    assert!(
        as_viewer["faces"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["cluster_id"].is_null() && f["cluster_ruling"].is_null()),
        "{as_viewer}"
    );

    let opt_out = format!("{x}/clusters/{cid}/opt-out");
    let r = viewer
        .post(&opt_out)
        .json(&json!({ "label": "the woman in uniform" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = admin
        .post(format!("{x}/clusters/01J9Z8Q4M3W6T7V2X5Y8Z0A1B2/opt-out"))
        .json(&json!({ "label": "nobody" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = admin
        .post(&opt_out)
        .json(&json!({ "label": "the woman in uniform" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let enrolled = json_of(r).await;
    let sid = enrolled["subject_id"].as_str().unwrap().to_string();
    let version = published["variant_version"].as_u64().unwrap();
    let again = photo_when(&admin, &photo_url, |v| {
        v["status"] == "published" && v["variant_version"].as_u64() > Some(version)
    })
    .await;
    let faces = again["faces"].as_array().unwrap();
    for f in faces.iter().filter(|f| f["cluster_id"] == cid) {
        assert_eq!(f["decision"]["subject"], sid.as_str(), "{f}");
    }
    let shown_after = faces
        .iter()
        .filter(|f| f["decision"]["decision"] == "not_opted_out")
        .count();
    assert_eq!(
        shown_after + 3,
        shown_before,
        "her three faces, and no one else's"
    );
    // The opt-out is on record as an enrolment.
    let audit = json_of(
        admin
            .get(format!("{base}/v1/x-tessera/audit"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "subject.enrol"
                && e["detail"]["label"] == "the woman in uniform"),
        "{audit}"
    );
    worker.cancel();
}
