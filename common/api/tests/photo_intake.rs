//! Adding a photo from an object in the tenant's incoming folder (`s3_key`) reads at
//! most one photo's worth of it, in one read: an object replaced by a huge one just
//! after its size was looked at is never read whole, and an object over the limit is
//! refused without being read. Real HTTP, real SQLite, the real folder store with the
//! replacement slipped in at the moment a check-then-read design would look.

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tessera_api::AuthMode;
use tessera_conformance::observed::{Hooks, Observed};
use tessera_core::ports::ObjectStore;
use tessera_jobs::photos::intake::MAX_BYTES;

mod support;
use support::*;

const KEY: &str = "incoming/local/burst/0001.jpg";

/// A writer that replaces [`KEY`] with an object larger than any photo just after the
/// first look at it answers; it records the most bytes any one read of [`KEY`] returned.
struct ReplacedAfterFirstLook {
    inner: Arc<dyn ObjectStore>,
    looked: AtomicBool,
    most_read: AtomicU64,
}

#[async_trait]
impl Hooks for ReplacedAfterFirstLook {
    fn read(&self, key: &str, bytes: u64) {
        if key == KEY {
            self.most_read.fetch_max(bytes, Ordering::SeqCst);
        }
    }
    async fn looked(&self, key: &str) {
        if key == KEY && !self.looked.swap(true, Ordering::SeqCst) {
            let huge = Bytes::from(vec![0xAB; (MAX_BYTES + (1 << 20)) as usize]);
            self.inner.put(KEY, huge).await.unwrap();
        }
    }
}

/// The sizes of the photo originals stored under `uploads/`.
async fn uploads(objects: &dyn ObjectStore) -> Vec<u64> {
    let (page, _) = objects.list("uploads/", None, 1000).await.unwrap();
    page.iter().map(|m| m.size).collect()
}

async fn project(c: &reqwest::Client, base: &str) -> String {
    let p = json_of(
        c.post(format!("{base}/v1/projects"))
            .json(&json!({ "name": "burst" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    p["project_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_key_replaced_after_its_size_was_checked_is_never_read_whole() {
    let store = std::sync::Mutex::new(None);
    let s = serve_over(AuthMode::ApiKey, false, None, Default::default(), |inner| {
        let w = Arc::new(ReplacedAfterFirstLook {
            inner: inner.clone(),
            looked: AtomicBool::new(false),
            most_read: AtomicU64::new(0),
        });
        *store.lock().unwrap() = Some(w.clone());
        Arc::new(Observed::new(inner, w))
    })
    .await;
    let store = store.into_inner().unwrap().unwrap();
    let (admin, _) = admin_and_viewer(&s).await;
    let pid = project(&admin, &s.base).await;
    let photo = face_photo("astronaut.png");
    store.inner.put(KEY, photo.clone().into()).await.unwrap();

    let r = admin
        .post(format!("{}/v1/x-tessera/projects/{pid}/photos", s.base))
        .json(&json!({ "s3_key": KEY }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    let most = store.most_read.load(Ordering::SeqCst);
    assert!(
        most <= MAX_BYTES + 1,
        "one read of the key returned {most} bytes, more than a photo may be ({status} {body})"
    );
    // What was measured is what was read: the photo as it was when it was asked for.
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        uploads(s.engine.ports().objects.as_ref()).await,
        vec![photo.len() as u64]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_key_over_the_limit_is_refused_unread_and_stores_nothing() {
    let s = serve(AuthMode::ApiKey, false).await;
    let (admin, _) = admin_and_viewer(&s).await;
    let pid = project(&admin, &s.base).await;
    let objects = s.engine.ports().objects.clone();
    let huge = Bytes::from(vec![0xCD; (MAX_BYTES + 1) as usize]);
    objects.put(KEY, huge).await.unwrap();
    let r = admin
        .post(format!("{}/v1/x-tessera/projects/{pid}/photos", s.base))
        .json(&json!({ "s3_key": KEY }))
        .send()
        .await
        .unwrap();
    let too_large = problem(r, StatusCode::PAYLOAD_TOO_LARGE).await;
    let detail = too_large["detail"].as_str().unwrap();
    assert!(
        detail.contains(KEY) && detail.contains("MiB"),
        "{too_large}"
    );
    assert!(uploads(objects.as_ref()).await.is_empty());

    // A name no key can hold is refused the same way from an object as from an upload.
    objects
        .put("incoming/local/ok.jpg", face_photo("astronaut.png").into())
        .await
        .unwrap();
    let r = admin
        .post(format!("{}/v1/x-tessera/projects/{pid}/photos", s.base))
        .json(&json!({ "s3_key": "incoming/local/ok.jpg", "name": "bad\u{7}.jpg" }))
        .send()
        .await
        .unwrap();
    let bad_name = problem(r, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(
        bad_name["detail"]
            .as_str()
            .unwrap()
            .contains("not a usable photo file name"),
        "{bad_name}"
    );
    assert!(uploads(objects.as_ref()).await.is_empty());
}
