//! Thumbnails of an image whose header reads but whose pixels do not decode: the first
//! request reads and tries to decode the original, and says why it failed; every
//! request after it answers the same from what was remembered, without reading the
//! original again (a client retrying in a loop cannot make the server decode it again
//! and again). Real HTTP, real SQLite, the real folder store, counting its reads.

use reqwest::StatusCode;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_api::AuthMode;
use tessera_conformance::observed::{Hooks, Observed};

mod support;
use support::*;

/// Counts every read of a dataset image's bytes.
struct CountsOriginalReads {
    reads: AtomicUsize,
}

impl Hooks for CountsOriginalReads {
    fn read(&self, key: &str, _bytes: u64) {
        if key.starts_with("datasets/") {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
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
    let counter = Arc::new(CountsOriginalReads {
        reads: AtomicUsize::new(0),
    });
    let hooks = counter.clone();
    let s = serve_over(AuthMode::ApiKey, false, None, Default::default(), |inner| {
        Arc::new(Observed::new(inner, hooks))
    })
    .await;
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
