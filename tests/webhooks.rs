//! Webhooks against the real `tessera serve` (API keys, two tenants) and a receiver on
//! 127.0.0.1 that is down at first, then answers 500 once, then 200: every notice of the
//! tenant's photo arrives, each request's signature verifies with the webhook's secret,
//! the id of the delivery that got the 500 comes again with the 200, the deliveries are
//! listed with their tries, and nothing of the other tenant's project reaches the
//! receiver.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_core::catalog::api_keys;
use tessera_core::notify::verify;
use tessera_tests::{blob, get_json, keyed_client, post_json, repo_root, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request the receiver got, and the status it answered.
#[derive(Debug, Clone)]
struct Received {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
    answered: u16,
}

/// Answer every request on `listener`: the first with 500, the rest with 200.
async fn receive(listener: tokio::net::TcpListener, log: Arc<Mutex<Vec<Received>>>) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let log = log.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let n = conn.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let headers: BTreeMap<String, String> = head
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let len: usize = headers
                .get("content-length")
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + len {
                let n = conn.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let answered = {
                let mut log = log.lock().unwrap();
                let answered = if log.is_empty() { 500 } else { 200 };
                log.push(Received {
                    headers,
                    body: buf[head_end..].to_vec(),
                    answered,
                });
                answered
            };
            let reply = format!(
                "HTTP/1.1 {answered} {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                if answered == 200 {
                    "OK"
                } else {
                    "Internal Server Error"
                }
            );
            let _ = conn.write_all(reply.as_bytes()).await;
        });
    }
}

/// A project of the caller's tenant and one photo added to it; the photo's id.
async fn project_with_photo(c: &reqwest::Client, base: &str, name: &str) -> (String, String) {
    let p = post_json(
        c,
        &format!("{base}/v1/projects"),
        serde_json::json!({ "name": name }),
    )
    .await;
    let pid = p["project_id"].as_str().unwrap().to_string();
    let jpeg = std::fs::read(repo_root().join("sample/images/IMG_9380.jpg")).unwrap();
    let sha = blob(c, base, &jpeg).await;
    let added = post_json(
        c,
        &format!("{base}/v1/x-tessera/projects/{pid}/photos"),
        serde_json::json!({ "blob_sha": sha, "name": format!("{name}.jpg") }),
    )
    .await;
    (pid, added["photo_id"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notices_arrive_signed_with_stable_ids_through_an_outage_and_only_for_their_tenant() {
    let dir = tempfile::tempdir().unwrap();
    // The receiver's port, closed until the first tries have failed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The receiver is on loopback, which an operator must allow.
    let server = serve(
        dir.path(),
        "api_key",
        &[("TESSERA_WEBHOOKS_ALLOW_PRIVATE", "1")],
    );
    let (key_a, base) = (server.first_key.clone().unwrap(), server.base.clone());
    // Tenant B's key, made as an operator makes one: with the state store itself.
    let store = tessera_local::SqliteStateStore::open(
        &tessera_local::StateDir::open(dir.path())
            .unwrap()
            .state_db(),
    )
    .unwrap();
    let (_, key_b) = api_keys::create(&store, &"tenant-b".parse().unwrap(), true)
        .await
        .unwrap();
    let (a, b) = (keyed_client(&key_a), keyed_client(&key_b));
    // A webhook outlives the key that made it: a key that is not an admin's makes none.
    let (_, plain) = api_keys::create(&store, &tessera_core::TenantId::local(), false)
        .await
        .unwrap();
    let r = keyed_client(&plain)
        .post(format!("{base}/v1/x-tessera/webhooks"))
        .json(&serde_json::json!({ "url": "https://example.com/h" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // A's webhook covers every project of A, and every notice type.
    let hook = post_json(
        &a,
        &format!("{base}/v1/x-tessera/webhooks"),
        serde_json::json!({ "url": format!("http://127.0.0.1:{port}/hook") }),
    )
    .await;
    let (hook_id, secret) = (
        hook["id"].as_str().unwrap().to_string(),
        hook["secret"].as_str().unwrap().to_string(),
    );
    assert!(secret.starts_with("whsec_"), "{hook}");
    let listed = get_json(&a, &format!("{base}/v1/x-tessera/webhooks")).await;
    assert_eq!(listed["items"][0]["id"], hook_id.as_str());
    assert!(
        !listed.to_string().contains(&secret),
        "a list shows the secret: {listed}"
    );
    // Unknown notice types are refused by name.
    let r = a
        .post(format!("{base}/v1/x-tessera/webhooks"))
        .json(&serde_json::json!({ "url": "https://example.com/h", "events": ["photo.eaten"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("photo.eaten"));

    let (pid_b, photo_b) = project_with_photo(&b, &base, "hooks-b").await;
    let (pid_a, photo_a) = project_with_photo(&a, &base, "hooks-a").await;

    // Wait until a delivery has failed against the closed port.
    let deliveries_url = format!("{base}/v1/x-tessera/webhooks/{hook_id}/deliveries");
    let deadline = Instant::now() + Duration::from_secs(180);
    let refused: Vec<String> = loop {
        let d = get_json(&a, &deliveries_url).await;
        let refused: Vec<String> = d["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| {
                i["last_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("could not be reached"))
            })
            .map(|i| i["notice_id"].as_str().unwrap().to_string())
            .collect();
        if !refused.is_empty() {
            break refused;
        }
        assert!(Instant::now() < deadline, "no delivery was tried: {d}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };

    // The receiver comes up: 500 first, then 200.
    let log = Arc::new(Mutex::new(Vec::<Received>::new()));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(receive(listener, log.clone()));

    let published = |log: &[Received]| {
        log.iter().any(|r| {
            r.answered == 200
                && serde_json::from_slice::<serde_json::Value>(&r.body).is_ok_and(|v| {
                    v["type"] == "photo.published" && v["data"]["photo_id"] == photo_a.as_str()
                })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let d = get_json(&a, &deliveries_url).await;
        let items = d["items"].as_array().unwrap().clone();
        let all_done = !items.is_empty() && items.iter().all(|i| i["state"] == "succeeded");
        let got = log.lock().unwrap().clone();
        let retried_ok = got.first().is_some_and(|first| {
            got.iter().skip(1).any(|r| {
                r.answered == 200
                    && r.headers.get("tessera-webhook-id")
                        == first.headers.get("tessera-webhook-id")
            })
        });
        if all_done && retried_ok && published(&got) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every notice arrived: deliveries {d:#}\nreceived {:#?}",
            got.iter()
                .map(|r| (r.answered, String::from_utf8_lossy(&r.body).to_string()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let got = log.lock().unwrap().clone();
    let mut kinds = BTreeSet::new();
    for r in &got {
        let id = &r.headers["tessera-webhook-id"];
        let ts: i64 = r.headers["tessera-webhook-timestamp"].parse().unwrap();
        let sig = &r.headers["tessera-webhook-signature"];
        assert!(
            verify(&secret, id, ts, &r.body, sig),
            "the signature of {id} does not verify"
        );
        assert!(!verify("whsec_wrong", id, ts, &r.body, sig));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["id"], id.as_str(), "the header id is the body's");
        assert_eq!(v["tenant"], "local", "{v}");
        let text = String::from_utf8_lossy(&r.body);
        for other in [&pid_b, &photo_b, &"tenant-b".to_string()] {
            assert!(
                !text.contains(other.as_str()),
                "tenant B's {other} reached A's webhook: {text}"
            );
        }
        assert!(text.contains(&pid_a), "{text}");
        kinds.insert(v["type"].as_str().unwrap().to_string());
    }
    assert!(
        kinds.contains("photo.published") && kinds.contains("job.succeeded"),
        "{kinds:?}"
    );
    // Each delivery tried while the receiver was down, and the one that got the 500,
    // was delivered later under the same id, and is listed with its tries.
    let first_id = got[0].headers["tessera-webhook-id"].clone();
    let d = get_json(&a, &deliveries_url).await;
    let listed = |id: &str| {
        d["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["notice_id"] == id)
            .unwrap_or_else(|| panic!("{id} is not listed: {d:#}"))
            .clone()
    };
    for id in refused.iter().chain([&first_id]) {
        let item = listed(id);
        assert!(item["attempts"].as_u64().unwrap() >= 2, "{item}");
        assert_eq!(item["state"], "succeeded", "{item}");
        assert_eq!(item["result"]["status"], 200, "{item}");
        assert!(
            got.iter()
                .any(|r| r.answered == 200 && &r.headers["tessera-webhook-id"] == id),
            "{id} never arrived"
        );
    }
    // Each notice was delivered (answered 200) exactly once.
    let ok: Vec<&String> = got
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| &r.headers["tessera-webhook-id"])
        .collect();
    let unique: BTreeSet<_> = ok.iter().collect();
    assert_eq!(
        ok.len(),
        unique.len(),
        "a notice was delivered twice: {ok:?}"
    );
    assert_eq!(unique.len(), d["items"].as_array().unwrap().len(), "{d:#}");

    // B sees no webhook, and cannot read A's.
    let listed_b = get_json(&b, &format!("{base}/v1/x-tessera/webhooks")).await;
    assert_eq!(listed_b["items"].as_array().unwrap().len(), 0, "{listed_b}");
    let r = b.get(&deliveries_url).send().await.unwrap();
    assert_eq!(r.status(), 404);

    // A blur region drawn on the served photo withholds it until it is re-blurred:
    // whoever copied it hears so, then hears of the new version.
    let r = a
        .put(format!("{base}/v1/x-tessera/photos/{photo_a}/blur-regions"))
        .json(&serde_json::json!({ "regions": [{ "x": 0.1, "y": 0.1, "w": 0.2, "h": 0.2 }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    let about_a = |r: &Received, kind: &str| {
        r.answered == 200
            && serde_json::from_slice::<serde_json::Value>(&r.body)
                .is_ok_and(|v| v["type"] == kind && v["data"]["photo_id"] == photo_a.as_str())
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let got = log.lock().unwrap().clone();
        let unpublished = got.iter().position(|r| about_a(r, "photo.unpublished"));
        let republished = got.iter().filter(|r| about_a(r, "photo.published")).count();
        if let Some(i) = unpublished
            && republished >= 2
        {
            let v: serde_json::Value = serde_json::from_slice(&got[i].body).unwrap();
            assert!(
                v["data"]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("blur regions"),
                "{v}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no photo.unpublished and new photo.published after a regions edit: {:#?}",
            got.iter()
                .map(|r| String::from_utf8_lossy(&r.body).to_string())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
