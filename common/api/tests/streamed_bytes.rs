//! A stored file is streamed to its client as the client takes it: clients that read
//! the first bytes of a large image and then stall hold a few chunks of the server's
//! memory each, not the image. Real HTTP, real SQLite, the real folder store, counting
//! the bytes that leave it.

use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_conformance::observed::{Hooks, Observed};

mod support;
use support::*;

/// Counts every byte read out of the store.
struct CountsBytesOut(AtomicU64);

impl Hooks for CountsBytesOut {
    fn read(&self, _key: &str, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::SeqCst);
    }
}

/// A dataset named `name` of one sample image: the image's id and its object's key (the
/// one object the dataset holds).
async fn one_image(s: &Server, admin: &reqwest::Client, name: &str) -> (String, String) {
    let base = &s.base;
    let (_, did) = dataset_of_samples(admin, base, name, 1, 8 << 20).await;
    let (held, _) = s
        .engine
        .ports()
        .objects
        .list(&format!("datasets/{did}/"), None, 10)
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    let images: Value = json_of(
        admin
            .get(format!("{base}/v1/datasets/{did}/images"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let image = &images["items"][0];
    (
        image["image_id"].as_str().unwrap().to_string(),
        held[0].key.clone(),
    )
}

const LARGE: usize = 64 << 20;
const CLIENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_of_a_large_image_hold_chunks_not_the_image() {
    let counter = Arc::new(CountsBytesOut(AtomicU64::new(0)));
    let hooks = counter.clone();
    let s = serve_over(AuthMode::ApiKey, false, None, Default::default(), |inner| {
        Arc::new(Observed::new(inner, hooks))
    })
    .await;
    let out = &counter.0;
    let (admin, _) = admin_and_viewer(&s).await;
    let (id, key) = one_image(&s, &admin, "large").await;
    // The image's stored bytes, replaced by a large file (what is served is the object).
    let large: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
    s.engine
        .ports()
        .objects
        .put(&key, large.clone().into())
        .await
        .unwrap();

    let url = format!("{}/v1/images/{id}/bytes", s.base);
    let before = out.load(Ordering::SeqCst);
    let mut stalled = Vec::new();
    for _ in 0..CLIENTS {
        let mut r = admin.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.content_length(),
            Some(LARGE as u64),
            "the length is said up front"
        );
        let first = r.chunk().await.unwrap().expect("a first chunk");
        stalled.push((r, first));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = out.load(Ordering::SeqCst) - before;
    println!(
        "{CLIENTS} stalled clients of a {} MiB image: {:.1} MiB read from the store",
        LARGE >> 20,
        held as f64 / (1 << 20) as f64
    );
    assert!(
        held < (CLIENTS as u64) * (16 << 20),
        "{CLIENTS} stalled clients made the server read {held} bytes of a {LARGE}-byte image"
    );

    // Read on, a stalled client gets the rest of the image.
    let (mut resumed, first) = stalled.pop().unwrap();
    drop(stalled);
    let mut got = first.to_vec();
    while let Some(c) = resumed.chunk().await.unwrap() {
        got.extend_from_slice(&c);
    }
    assert!(got == large, "the streamed bytes are the object's");
}

/// Once armed with a key, replaces it with a shorter object right after the next look
/// at it answers: a file published again between a range's length and its bytes.
struct ReplacedOnNextLook {
    inner: Arc<dyn tessera_core::ports::ObjectStore>,
    armed_for: std::sync::Mutex<Option<String>>,
}

#[async_trait::async_trait]
impl Hooks for ReplacedOnNextLook {
    async fn looked(&self, key: &str) {
        let hit = {
            let mut armed = self.armed_for.lock().unwrap();
            let hit = armed.as_deref() == Some(key);
            if hit {
                *armed = None;
            }
            hit
        };
        if hit {
            self.inner.put(key, vec![7u8; 50].into()).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_of_a_file_replaced_while_it_is_read_is_asked_again_not_mixed() {
    let hooks = std::sync::Mutex::new(None);
    let s = serve_over(AuthMode::ApiKey, false, None, Default::default(), |inner| {
        let h = Arc::new(ReplacedOnNextLook {
            inner: inner.clone(),
            armed_for: std::sync::Mutex::new(None),
        });
        *hooks.lock().unwrap() = Some(h.clone());
        Arc::new(Observed::new(inner, h))
    })
    .await;
    let hooks = hooks.into_inner().unwrap().unwrap();
    let admin = admin_client(&s).await;
    let (id, key) = one_image(&s, &admin, "changing").await;
    // The next look at the image's bytes (the range's length) is followed by a shorter
    // object under the same key.
    *hooks.armed_for.lock().unwrap() = Some(key);
    let r = admin
        .get(format!("{}/v1/images/{id}/bytes", s.base))
        .header("range", "bytes=0-99")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "{:?}", r.headers());
    assert_eq!(r.headers()["retry-after"], "1");
    // Asked again, the file as it is now.
    let again = admin
        .get(format!("{}/v1/images/{id}/bytes", s.base))
        .header("range", "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 206);
    assert_eq!(again.headers()["content-range"], "bytes 0-9/50");
}
