//! A reconstruction recipe over real HTTP on the real embedded adapters, from upload to
//! a sealed snapshot whose points parse.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tessera_api::AuthMode;

mod support;
use support::*;

/// Parse `application/x-sfm-points-v1`: the count and the ids, checking the layout.
fn parse_points(b: &[u8]) -> Vec<u64> {
    assert_eq!(&b[..8], b"SFMP3D\0\0");
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 1);
    let n = u64::from_le_bytes(b[12..20].try_into().unwrap()) as usize;
    assert_eq!(b.len(), 44 + 26 * n);
    (0..n)
        .map(|i| u64::from_le_bytes(b[44 + 26 * i + 18..44 + 26 * i + 26].try_into().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_recipe_over_http_ends_in_a_sealed_snapshot_whose_points_parse() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let (pid, did) = dataset_of_samples(&c, &s.base, "recipe", 6, 64 * 1024).await;
    let (pid, did) = (pid.as_str(), did.as_str());
    problem(
        c.post(format!(
            "{}/v1/projects/{pid}/pipelines/incremental",
            s.base
        ))
        .json(&json!({"dataset_id": did, "spec": {"kind": "global"}}))
        .send()
        .await
        .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let r = c
        .post(format!("{}/v1/projects/{pid}/pipelines/incremental", s.base))
        .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}, "matches": {"pairs": {"strategy": "exhaustive"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let lro: Value = r.json().await.unwrap();
    let job = lro["job_id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/jobs/{job}"));
    assert!(!lro["task_ids"].as_array().unwrap().is_empty());
    // Watch it to the end over SSE.
    let events = read_events(
        c.get(format!("{}/v1/jobs/{job}/events", s.base))
            .send()
            .await
            .unwrap(),
        None,
    )
    .await;
    assert!(events.iter().any(|e| e.1 == "phase_completed"));
    let detail: Value = c
        .get(format!("{}{location}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["status"], "succeeded", "{detail}");
    let recon: Value = c
        .get(format!("{}/v1/reconstructions/{job}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(recon["dataset_id"], did);
    let snaps: Value = c
        .get(format!("{}/v1/reconstructions/{job}/snapshots", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seq = snaps["seqs"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    let file = |name: &str| format!("{}/v1/reconstructions/{job}/snapshots/{seq}/{name}", s.base);
    let points = c.get(file("points.bin")).send().await.unwrap();
    assert_eq!(
        points.headers()["content-type"],
        "application/x-sfm-points-v1"
    );
    assert!(
        points.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    let etag = points.headers()["etag"].to_str().unwrap().to_string();
    let body = points.bytes().await.unwrap();
    let ids = parse_points(&body);
    assert!(ids.len() > 100, "a real model: {} points", ids.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted by id");
    assert_eq!(
        c.get(file("points.bin"))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap()
            .status(),
        304
    );
    let rec = c
        .get(file("points.bin"))
        .header("range", "bytes=44-69")
        .send()
        .await
        .unwrap();
    assert_eq!(rec.status(), 206);
    assert_eq!(
        rec.bytes().await.unwrap().as_ref(),
        &body[44..70],
        "one fixed-stride record"
    );
    let summary: Value = c
        .get(file("summary.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        summary["models"][0]["num_points3D"].as_u64().unwrap() as usize,
        ids.len()
    );
    let images: Value = c
        .get(file("images.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(images["images"].as_array().unwrap().len() >= 4);
    let cams: Value = c
        .get(file("cameras.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cams["cameras"][0]["model"], "SIMPLE_RADIAL");
    assert!(
        parse_points(
            &c.get(file("points_preview.bin"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        )
        .len()
            <= ids.len()
    );
    problem(
        c.get(file("database.db")).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    problem(
        c.get(format!(
            "{}/v1/reconstructions/{job}/snapshots/9999/points.bin",
            s.base
        ))
        .send()
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    // The sub-model: the model as of the latest sealed snapshot, with its summary.
    let subs: Value = c
        .get(format!("{}/v1/reconstructions/{job}/submodels", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(subs["total"], 1, "{subs}");
    let sub = &subs["items"][0];
    assert_eq!(sub["snapshot_seq"], seq);
    assert_eq!(sub["idx"], 0);
    assert!(
        sub["summary"]["num_points3D"].as_u64().unwrap() > 0,
        "{sub}"
    );
    assert!(
        sub["summary"]["num_reg_images"].as_u64().unwrap() >= 3,
        "{sub}"
    );
    let one: Value = c
        .get(format!(
            "{}/v1/submodels/{}",
            s.base,
            sub["submodel_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(&one, sub);
    problem(
        c.get(format!("{}/v1/submodels/{job}-1", s.base))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
}

/// Where a JSON document holds `key`, the first value under it (depth first).
fn find<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|x| find(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

/// sfmapi's `{"pairs": {"strategy": "vocabtree"}}` is served on an engine that can
/// retrieve (both can): the match stage trains a tree from the dataset's own features,
/// since no tree ships with Tessera and a client may not name a file on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vocabulary_tree_recipe_trains_its_tree_from_the_dataset_and_maps_it() {
    let s = serve(AuthMode::ApiKey, true).await;
    let c = admin_client(&s).await;
    let caps = json_of(
        c.get(format!("{}/v1/capabilities", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(caps["features"]["pairs.vocabtree"], true, "{caps}");
    let (pid, did) = dataset_of_samples(&c, &s.base, "retrieval", 6, 64 * 1024).await;
    let url = format!("{}/v1/projects/{pid}/pipelines/incremental", s.base);
    let ask = |pairs: Value| {
        c.post(&url)
            .json(&json!({"dataset_id": did, "spec": {"kind": "incremental"}, "matches": {"pairs": pairs}}))
            .send()
    };
    // A tree named by the client: a server path, or another tenant's object.
    for (pairs, field) in [
        (
            json!({"strategy": "vocabtree", "tree": "/etc/passwd"}),
            "pairs.tree",
        ),
        (
            json!({"strategy": "vocabtree", "vocab_tree_path": "blobs/other/tree.bin"}),
            "pairs.vocab_tree_path",
        ),
        (
            json!({"strategy": "vocabtree", "num_images": 0}),
            "pairs.num_images",
        ),
    ] {
        let p = problem(ask(pairs).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(p.to_string().contains(field), "{p}");
    }
    let r = ask(json!({"strategy": "vocabtree", "num_images": 4}))
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let job = r.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    read_events(
        c.get(format!("{}/v1/jobs/{job}/events", s.base))
            .send()
            .await
            .unwrap(),
        None,
    )
    .await;
    let detail = json_of(
        c.get(format!("{}/v1/jobs/{job}", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(detail["status"], "succeeded", "{detail}");
    assert_eq!(
        detail["x-tessera"]["options"]["pairs"],
        json!({"strategy": "vocab_tree", "num_images": 4}),
        "no tree named: trained from the set"
    );
    let tree = find(&detail, "vocab_tree").expect("the match stage says what it trained");
    let words = tree["words"].as_u64().unwrap();
    assert!(words.is_power_of_two() && words >= 256, "{tree}");
    assert!(tree["descriptors"].as_u64().unwrap() > 1000, "{tree}");
    assert_eq!(tree["process"]["exit_code"], 0, "{tree}");
    // "Run again" sends the options back as the job shows them: the same recipe.
    let again = ask(detail["x-tessera"]["options"]["pairs"].clone())
        .await
        .unwrap();
    assert_eq!(again.status(), 202);
    assert_eq!(again.json::<Value>().await.unwrap()["job_id"], job.as_str());
    let recon = json_of(
        c.get(format!("{}/v1/reconstructions/{job}/submodels", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let registered = find(&recon, "num_reg_images")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    assert!(
        registered >= 5,
        "retrieval pairs over 6 overlapping drone photos map them: {recon}"
    );
}
