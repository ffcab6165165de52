//! The photo pipeline on AWS, end to end through a real AWS-compatible server: a
//! PutObject through the SDK → moto's S3 notification lands in the uploads queue → the
//! ingest function (called in-process with the SQS event it received) → rows in
//! DynamoDB → face_process → variants in S3 under versioned keys, published last. Then
//! redelivery and poison: duplicate S3 events in moto's and in real S3's shape, a
//! message failing until SQS dead-letters it (the photo stays unpublished), and an
//! unparsable message archived on the first try and written to S3 by the archiver.

mod support;

use std::time::Duration;
use support::{Deployment, PREFIX, models, put_upload, shared};
use tessera_core::domain::Project;
use tessera_core::photo::{Photo, keys};
use tessera_core::ports::ObjectStore;
use tessera_core::ports::queue::Queue;
use tessera_core::ports::state_store::StateStore;
use tessera_core::{PhotoId, TenantId, records};
use tessera_jobs::photos::{kinds, project};
use tessera_lambda::{Function, Role, routes};

async fn project_with_subject(d: &Deployment) -> Project {
    let store = &d.adapters.store;
    let p = project::create(store, TenantId::local(), "on-aws", Some(0.363), 0.35)
        .await
        .unwrap();
    let bytes = std::fs::read(shared().join("testdata/faces/grace_hopper.jpg")).unwrap();
    project::enrol(
        &d.functions[routes::INGEST].engine,
        models(),
        p.id,
        "grace",
        vec![("grace_hopper.jpg".into(), bytes)],
        &tessera_core::audit::Actor::cli(TenantId::local()),
    )
    .await
    .unwrap();
    // The enrolment's sweep runs now, over an empty project: left queued, it may run
    // between a photo's ingest and its first decision and re-decide it (correct, and
    // one render more), which would make "processed once" below depend on timing.
    while d.pump_once().await > 0 {}
    project::load(store, p.id).await.unwrap()
}

async fn row(d: &Deployment, photo: PhotoId) -> Option<Photo> {
    d.adapters
        .store
        .get(&records::photo_key(photo))
        .await
        .unwrap()
        .map(|i| records::decode(&i).unwrap())
}

async fn jobs_of_kind(d: &Deployment, kind: &str) -> usize {
    let engine = &d.functions[routes::INGEST].engine;
    engine
        .list_jobs(&TenantId::local(), None, 1000)
        .await
        .unwrap()
        .0
        .iter()
        .filter(|j| j.kind == kind)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_s3_upload_is_published_with_every_variant_through_the_functions() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let p = project_with_subject(&d).await;
    let (photo, upload_key) = put_upload(&d, &p, "composite_pd_1280x896.jpg").await;

    d.pump_until(Duration::from_secs(120), || async {
        row(&d, photo)
            .await
            .is_some_and(|r| r.published_at.is_some())
            && jobs_of_kind(&d, kinds::FACE_PROCESS_JOB).await == 1
    })
    .await;
    // Let cleanup run too.
    for _ in 0..5 {
        d.pump_once().await;
    }

    let r = row(&d, photo).await.unwrap();
    assert_eq!(r.upload_key, upload_key);
    assert_eq!(r.variant_version, 1);
    assert!(
        r.faces.as_ref().is_some_and(|f| !f.is_empty()),
        "faces were detected"
    );
    assert!(
        r.staged_keys.is_empty(),
        "nothing left staged once published"
    );
    let objects = &d.adapters.objects;
    for rendition in &r.renditions {
        assert!(
            rendition.key.contains("/v1/"),
            "versioned key {}",
            rendition.key
        );
        for k in [&rendition.key, &rendition.thumb_key] {
            let meta = objects
                .head(k)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{k} in S3"));
            assert!(meta.size > 0);
        }
    }
    // A public file and Grace Hopper's own (she is in the composite).
    assert!(r.renditions.iter().any(|x| x.variant.is_none()));
    assert!(
        r.renditions.iter().any(|x| x.variant.is_some()),
        "{:?}",
        r.renditions
    );
    // The upload is never touched; nothing but the row's files under the photo's prefix.
    assert!(objects.head(&upload_key).await.unwrap().is_some());
    let (listed, _) = objects
        .list(&keys::derived_prefix(p.id, photo), None, 100)
        .await
        .unwrap();
    let mut expected: Vec<String> = r
        .renditions
        .iter()
        .flat_map(|x| [x.key.clone(), x.thumb_key.clone()])
        .chain(r.upload_thumb_key.clone())
        .chain(r.embeddings_key.clone())
        .collect();
    expected.sort();
    let mut got: Vec<String> = listed.into_iter().map(|m| m.key).collect();
    got.sort();
    assert_eq!(got, expected);
    // The face_process job's progress events are in DynamoDB, numbered without gaps.
    let engine = &d.functions[routes::FACE_PROCESS].engine;
    let (jobs, _) = engine
        .list_jobs(&TenantId::local(), None, 100)
        .await
        .unwrap();
    let job = jobs
        .iter()
        .find(|j| j.kind == kinds::FACE_PROCESS_JOB)
        .unwrap();
    let events = engine
        .ports()
        .events
        .read_after(job.id, 0, 1000)
        .await
        .unwrap();
    assert!(!events.is_empty());
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicates_poison_and_dead_letters_lose_nothing_and_publish_nothing_half_done() {
    // Visibility 1 s, dead-lettered after 3 receives, so redrive happens within the test.
    let d = Deployment::start(Duration::from_secs(1), 3).await;
    let p = project_with_subject(&d).await;
    let (photo, key) = put_upload(&d, &p, "grace_hopper.jpg").await;

    // Keep moto's notification body, then deliver it again, and once more in real
    // S3's shape (userIdentity, requestParameters, a sequencer, `/` not encoded).
    // (The other message is the s3:TestEvent sent when notifications were set up.)
    let (event, receipts) = d.receive_event(routes::UPLOADS).await;
    let moto_body = event
        .records
        .iter()
        .filter_map(|r| r.body.clone())
        .find(|b| b.contains("ObjectCreated"))
        .expect("moto notified the uploads queue");
    assert!(
        moto_body.contains("%2F"),
        "moto encodes `/` in keys: {moto_body}"
    );
    let failed = d.functions[routes::UPLOADS].handle_sqs(event).await;
    assert!(failed.batch_item_failures.is_empty());
    d.acknowledge(routes::UPLOADS, receipts, &[]).await;
    let real_shape = std::fs::read_to_string(
        std::path::Path::new(
            &std::env::var("CARGO_MANIFEST_DIR")
                .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
        )
        .join("../../events/s3-put-via-sqs.json"),
    )
    .unwrap();
    let real: serde_json::Value = serde_json::from_str(&real_shape).unwrap();
    let mut notification: serde_json::Value =
        serde_json::from_str(real["Records"][0]["body"].as_str().unwrap()).unwrap();
    let encoded = tessera_jobs::photos::ObjectCreated::for_key("b", &key, 1, "1").key;
    notification["Records"][0]["s3"]["object"]["key"] = encoded.into();
    let q = &d.adapters.queue;
    q.send(routes::UPLOADS, &moto_body, Duration::ZERO)
        .await
        .unwrap();
    q.send(routes::UPLOADS, &notification.to_string(), Duration::ZERO)
        .await
        .unwrap();

    d.pump_until(Duration::from_secs(120), || async {
        row(&d, photo)
            .await
            .is_some_and(|r| r.published_at.is_some())
    })
    .await;
    for _ in 0..5 {
        d.pump_once().await;
    }
    assert_eq!(
        jobs_of_kind(&d, kinds::FACE_PROCESS_JOB).await,
        1,
        "one face_process job"
    );
    assert_eq!(
        row(&d, photo).await.unwrap().variant_version,
        1,
        "processed once"
    );

    // Poison: archived to the dead-letter queue on the first try, then to S3.
    q.send(
        routes::FACE_PROCESS,
        "<html>not a task</html>",
        Duration::ZERO,
    )
    .await
    .unwrap();
    d.pump_once().await;
    assert_eq!(q.depth(routes::FACE_PROCESS).await.unwrap().dead, 1);
    let dlq = tessera_aws::queue::dead_letter_name(routes::FACE_PROCESS);
    let (dead, receipts) = d.receive_event(&dlq).await;
    assert_eq!(dead.records.len(), 1);
    assert_eq!(
        dead.records[0]
            .attributes
            .get("ApproximateReceiveCount")
            .map(String::as_str),
        Some("1"),
        "archived on the first receive, not after redrives"
    );
    let archived = tessera_lambda::archive::archive_batch(&d.adapters.objects, dead).await;
    assert!(archived.batch_item_failures.is_empty());
    d.acknowledge(&dlq, receipts, &[]).await;
    let (files, _) = d
        .adapters
        .objects
        .list(&format!("archive/{PREFIX}{dlq}/"), None, 10)
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    let record: serde_json::Value =
        serde_json::from_slice(&d.adapters.objects.get(&files[0].key).await.unwrap()).unwrap();
    assert_eq!(record["body"], "<html>not a task</html>");
    assert!(
        record["message_attributes"]["tessera_archive_reason"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{record}"
    );

    // A message that fails every time: a face-process function whose table is wrong
    // (a real fault in the real service: DynamoDB answers ResourceNotFound). SQS
    // redelivers it until the redrive policy moves it to the dead-letter queue; the
    // photo it was for stays unpublished.
    d.paused.lock().unwrap().push(routes::FACE_PROCESS);
    let (photo2, _) = put_upload(&d, &p, "astronaut.png").await;
    d.pump_until(Duration::from_secs(60), || async {
        row(&d, photo2).await.is_some() && q.depth(routes::FACE_PROCESS).await.unwrap().visible > 0
    })
    .await;
    let mut broken = d.settings.clone();
    broken.table = "no-such-table".into();
    let faulty = Function::connect(
        &broken,
        routes::FACE_PROCESS,
        tessera_jobs::registry_with(std::sync::Arc::new(
            tessera_jobs::photos::FaceService::with_models(models()),
        )),
        Role::Run,
    )
    .await;
    let start = std::time::Instant::now();
    let mut deliveries = 0;
    // (The dead-letter queue is empty again: the archiver took the poison message.)
    while q.depth(routes::FACE_PROCESS).await.unwrap().dead < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not dead-lettered"
        );
        let (event, receipts) = d.receive_event(routes::FACE_PROCESS).await;
        if event.records.is_empty() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        deliveries += event.records.len();
        let response = faulty.handle_sqs(event).await;
        assert_eq!(
            response.batch_item_failures.len(),
            receipts.len(),
            "every message fails"
        );
        d.acknowledge(
            routes::FACE_PROCESS,
            receipts,
            &response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect::<Vec<_>>(),
        )
        .await;
    }
    assert_eq!(
        deliveries, 3,
        "delivered max_receives times, then dead-lettered"
    );
    let r2 = row(&d, photo2).await.unwrap();
    assert!(r2.published_at.is_none(), "never published");
    assert!(r2.renditions.is_empty(), "no variant points anywhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_put_under_an_ingested_key_unpublishes_the_photo_and_deletes_its_files() {
    let d = Deployment::start(Duration::from_secs(30), 5).await;
    let p = project_with_subject(&d).await;
    let (photo, upload_key) = put_upload(&d, &p, "grace_hopper.jpg").await;
    d.pump_until(Duration::from_secs(120), || async {
        row(&d, photo)
            .await
            .is_some_and(|r| r.published_at.is_some())
    })
    .await;
    let before = row(&d, photo).await.unwrap();
    let public = before.public().unwrap().key.clone();
    assert_ne!(
        public, upload_key,
        "the upload key is never what is published"
    );
    let objects = &d.adapters.objects;
    let served = objects.get(&public).await.unwrap();

    // What a leaked presigned URL used twice (moto checks no signature) would do.
    let other = std::fs::read(shared().join("testdata/faces/astronaut.png")).unwrap();
    objects
        .client()
        .put_object()
        .bucket(objects.bucket())
        .key(&upload_key)
        .body(other.into())
        .send()
        .await
        .unwrap();
    d.pump_until(Duration::from_secs(120), || async {
        row(&d, photo)
            .await
            .is_some_and(|r| r.published_at.is_none())
    })
    .await;
    let after = row(&d, photo).await.unwrap();
    assert_eq!(after.sha256, before.sha256);
    assert_eq!(
        after.variant_version, before.variant_version,
        "nothing made of the new bytes"
    );
    // Never replaced by the new bytes: deleted at the unpublish, so a download URL
    // handed out for it stops working at once.
    assert!(!served.is_empty());
    assert!(objects.head(&public).await.unwrap().is_none());
}
