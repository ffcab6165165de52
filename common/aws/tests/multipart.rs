//! Files above the multipart threshold go up in parts and come back whole.

use sha2::{Digest, Sha256};
use tessera_aws::object_store::{MULTIPART_THRESHOLD, PART_SIZE};
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_conformance::moto::MotoServer;
use tessera_core::ports::ObjectStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_is_uploaded_in_parts_and_downloaded_intact() {
    let moto = MotoServer::start();
    let a = AwsAdapters::connect(&AwsSettings::local(
        &moto.endpoint,
        "t",
        "big-objects",
        "m-",
    ))
    .await;
    a.objects.ensure_bucket().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("model.bin");
    let size = MULTIPART_THRESHOLD + PART_SIZE + 12345;
    let data: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();

    let meta = a.objects.put_file("jobs/x/model.bin", &src).await.unwrap();
    assert_eq!(meta.size, size);
    let parts = size.div_ceil(PART_SIZE);
    assert!(
        meta.etag.trim_matches('"').ends_with(&format!("-{parts}")),
        "a multipart upload of {parts} parts (ETag {})",
        meta.etag
    );
    let dst = dir.path().join("back.bin");
    let got = a
        .objects
        .get_to_file("jobs/x/model.bin", &dst)
        .await
        .unwrap();
    assert_eq!(got.size, size);
    assert_eq!(
        Sha256::digest(std::fs::read(&dst).unwrap()),
        Sha256::digest(&data)
    );
    let mid = a
        .objects
        .get_range("jobs/x/model.bin", PART_SIZE - 5..PART_SIZE + 5)
        .await
        .unwrap();
    assert_eq!(
        &mid[..],
        &data[(PART_SIZE - 5) as usize..(PART_SIZE + 5) as usize]
    );
}
