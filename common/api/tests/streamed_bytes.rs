//! A stored file is streamed to its client as the client takes it: clients that read
//! the first bytes of a large image and then stall hold a few chunks of the server's
//! memory each, not the image. Real HTTP, real SQLite, the real folder store, counting
//! the bytes that leave it.

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_core::ports::ObjectStore;
use tessera_core::ports::object_store::{ObjectMeta, ObjectStoreError, ObjectStream};

mod support;
use support::*;

/// The folder store, counting every byte read out of it.
struct CountsBytesOut {
    inner: Arc<dyn ObjectStore>,
    out: Arc<AtomicU64>,
}

impl CountsBytesOut {
    fn counted(&self, r: Result<Bytes, ObjectStoreError>) -> Result<Bytes, ObjectStoreError> {
        if let Ok(b) = &r {
            self.out.fetch_add(b.len() as u64, Ordering::SeqCst);
        }
        r
    }
}

#[async_trait]
impl ObjectStore for CountsBytesOut {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.put(key, bytes).await
    }
    async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.put_if_absent(key, bytes).await
    }
    async fn put_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.put_file(key, path).await
    }
    async fn get(&self, key: &str) -> Result<Bytes, ObjectStoreError> {
        self.counted(self.inner.get(key).await)
    }
    async fn get_at_most(&self, key: &str, max: u64) -> Result<Bytes, ObjectStoreError> {
        self.counted(self.inner.get_at_most(key, max).await)
    }
    async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<ObjectStream, ObjectStoreError> {
        let s = self.inner.get_stream(key, range).await?;
        let out = self.out.clone();
        Ok(ObjectStream {
            size: s.size,
            body: Box::pin(s.body.inspect(move |c| {
                if let Ok(c) = c {
                    out.fetch_add(c.len() as u64, Ordering::SeqCst);
                }
            })),
        })
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectStoreError> {
        self.counted(self.inner.get_range(key, range).await)
    }
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.get_to_file(key, path).await
    }
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, ObjectStoreError> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> Result<(), ObjectStoreError> {
        self.inner.delete(key).await
    }
    async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), ObjectStoreError> {
        self.inner.list(prefix, after, limit).await
    }
}

const LARGE: usize = 64 << 20;
const CLIENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_of_a_large_image_hold_chunks_not_the_image() {
    let out = Arc::new(AtomicU64::new(0));
    let counter = out.clone();
    let s = serve_over(AuthMode::ApiKey, false, None, Default::default(), |inner| {
        Arc::new(CountsBytesOut {
            inner,
            out: counter,
        })
    })
    .await;
    let (admin, _) = admin_and_viewer(&s).await;
    let (_, did) = dataset_of_samples(&admin, &s.base, "large", 1, 8 << 20).await;
    let images: Value = json_of(
        admin
            .get(format!("{}/v1/datasets/{did}/images", s.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let image = &images["items"][0];
    let id = image["image_id"].as_str().unwrap();
    // The image's stored bytes, replaced by a large file (what is served is the object).
    let key = format!("datasets/{did}/images/{}", image["name"].as_str().unwrap());
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
