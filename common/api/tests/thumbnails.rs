//! Thumbnails of an image whose header reads but whose pixels do not decode: the first
//! request reads and tries to decode the original, and says why it failed; every
//! request after it answers the same from what was remembered, without reading the
//! original again (a client retrying in a loop cannot make the server decode it again
//! and again). Real HTTP, real SQLite, the real folder store, counting its reads.

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::json;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_api::AuthMode;
use tessera_core::ports::ObjectStore;
use tessera_core::ports::object_store::{ObjectMeta, ObjectStoreError};

mod support;
use support::*;

/// The folder store, counting every read of a dataset image's bytes.
struct CountsOriginalReads {
    inner: Arc<dyn ObjectStore>,
    reads: AtomicUsize,
}

impl CountsOriginalReads {
    fn saw(&self, key: &str) {
        if key.starts_with("datasets/") {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl ObjectStore for CountsOriginalReads {
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
        self.saw(key);
        self.inner.get(key).await
    }
    async fn get_at_most(&self, key: &str, max: u64) -> Result<Bytes, ObjectStoreError> {
        self.saw(key);
        self.inner.get_at_most(key, max).await
    }
    async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<tessera_core::ports::object_store::ObjectStream, ObjectStoreError> {
        self.saw(key);
        self.inner.get_stream(key, range).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectStoreError> {
        self.saw(key);
        self.inner.get_range(key, range).await
    }
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        self.saw(key);
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

/// A PNG whose header says 64×64 and whose compressed pixels are garbage.
fn png_with_damaged_pixels() -> Vec<u8> {
    let mut png = Vec::new();
    image::RgbImage::from_pixel(64, 64, image::Rgb([200, 30, 30]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let at = png.windows(4).position(|w| w == b"IDAT").unwrap() + 4;
    let len = u32::from_be_bytes(png[at - 8..at - 4].try_into().unwrap()) as usize;
    for b in &mut png[at..at + len] {
        *b = 0xA5;
    }
    png
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thumbnail_that_failed_to_decode_is_not_decoded_again() {
    let counter = std::sync::Mutex::new(None);
    let s = serve_over(AuthMode::ApiKey, false, None, Default::default(), |inner| {
        let c = Arc::new(CountsOriginalReads {
            inner,
            reads: AtomicUsize::new(0),
        });
        *counter.lock().unwrap() = Some(c.clone());
        c
    })
    .await;
    let counter = counter.into_inner().unwrap().unwrap();
    let (admin, _) = admin_and_viewer(&s).await;
    let (_, did) = dataset_of_samples(&admin, &s.base, "thumbs", 0, 1 << 20).await;
    let sha = upload(&admin, &s.base, &png_with_damaged_pixels(), 1 << 20).await;
    let r = admin
        .post(format!("{}/v1/datasets/{did}/images", s.base))
        .json(&json!({ "name": "damaged.png", "blob_sha": sha }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "the header reads, so it registers");
    let image = json_of(r).await["image_id"].as_str().unwrap().to_string();
    let thumbnail = format!("{}/v1/images/{image}/thumbnail?size=128", s.base);

    let before = counter.reads.load(Ordering::SeqCst);
    let first = problem(
        admin.get(&thumbnail).send().await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let first_reads = counter.reads.load(Ordering::SeqCst) - before;
    assert!(first_reads >= 1, "the first request reads the original");
    let why = first["detail"].as_str().unwrap().to_string();
    assert!(why.contains("damaged.png"), "{first}");

    for size in ["128", "64", "128"] {
        let again = problem(
            admin
                .get(format!(
                    "{}/v1/images/{image}/thumbnail?size={size}",
                    s.base
                ))
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(again["detail"].as_str(), Some(why.as_str()));
    }
    assert_eq!(
        counter.reads.load(Ordering::SeqCst) - before,
        first_reads,
        "asking again read the original again"
    );
}
