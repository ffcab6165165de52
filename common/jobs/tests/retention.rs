//! A project's upload retention on the real adapters and models: the original and its
//! unblurred thumbnail go when their time is up, the published (blurred) files stay,
//! and a photo that would need deciding again without its original is unpublished
//! with the reason — fail closed, never re-published from a stale decision.

mod support;

use std::time::Duration;
use support::rig;
use tessera_core::Millis;
use tessera_core::catalog::collect::collect_expired;
use tessera_core::projects;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn originals_past_retention_are_deleted_and_their_photos_fail_closed() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    assert!(
        projects::set_upload_retention(
            r.store(),
            p.id,
            Some(0),
            &tessera_core::audit::Actor::cli(p.tenant.clone())
        )
        .await
        .is_err(),
        "an original must outlive its processing"
    );
    projects::set_upload_retention(
        r.store(),
        p.id,
        Some(1),
        &tessera_core::audit::Actor::cli(p.tenant.clone()),
    )
    .await
    .unwrap();
    let p = projects::load(r.store(), p.id).await.unwrap();
    assert_eq!(p.upload_retention_days, Some(1));
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let later = Millis::now().plus(Duration::from_secs(86_400 + 60));
    collect_expired(r.store(), r.engine.ports().objects.as_ref(), later, 100)
        .await
        .unwrap();
    let row = r.photo(photo).await;
    assert!(row.original_deleted_at.is_some(), "{row:?}");
    assert!(
        row.published_at.is_some(),
        "the blurred files stay published"
    );
    let uploads = r.objects(&format!("uploads/{}/{photo}/", p.id)).await;
    assert!(uploads.is_empty(), "{uploads:?}");
    assert!(
        r.objects(&format!("photos/{}/{photo}/upload-thumb", p.id))
            .await
            .is_empty(),
        "the unblurred thumbnail is gone too"
    );
    assert!(
        r.engine
            .ports()
            .objects
            .head(&row.public().unwrap().key)
            .await
            .unwrap()
            .is_some()
    );
    // Someone opts out: the photo cannot be decided again, so it is unpublished.
    r.enrol(&p, "astronaut", "astronaut.png").await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert!(row.published_at.is_none(), "{row:?}");
    let reprocess = r.jobs_of_kind("photo_reprocess").await;
    assert!(
        reprocess
            .iter()
            .all(|j| j.status() == tessera_core::job::JobStatus::Failed),
        "the re-decision failed on the missing original"
    );
}
