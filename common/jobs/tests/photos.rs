//! Photo jobs on the real embedded adapters and the real models: duplicate and
//! reordered events, thumbnail_dims versus face_process, reprocess without
//! re-detection, replaced files deleted, and unpublishing on a final failure (or a
//! cancellation after the run staged a version).

mod support;

use support::{derived, detail, rig};
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Pipeline, keys};
use tessera_jobs::photos::{self, ObjectCreated, project};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_reordered_events_are_harmless() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    assert!(
        event.key.contains("my+composite"),
        "the event key is URL-encoded: {}",
        event.key
    );
    // The same event twice is one job; a later duplicate with a newer sequencer is a
    // second ingest that finds the row; an older one arriving last is ignored.
    let a = r.ingest(&p, &event).await;
    let b = r.ingest(&p, &event).await;
    assert_eq!(a, b);
    let newer = ObjectCreated {
        sequencer: "00000000000000B0".into(),
        ..event.clone()
    };
    let older = ObjectCreated {
        sequencer: "0000000000000090".into(),
        ..event.clone()
    };
    r.ingest(&p, &newer).await;
    r.settle().await;
    r.ingest(&p, &older).await;
    r.settle().await;

    let row = r.photo(photo).await;
    assert_eq!(row.pipeline, Pipeline::FaceProcess);
    assert_eq!(row.variant_version, 1, "processed once");
    assert!(row.published_at.is_some());
    assert_eq!(row.renditions.len(), 2);
    assert_eq!(
        r.jobs_of_kind(photos::kinds::FACE_PROCESS_JOB).await.len(),
        1
    );
    let ingests = r.jobs_of_kind(photos::kinds::INGEST_JOB).await;
    assert_eq!(ingests.len(), 3);
    assert!(
        ingests
            .iter()
            .all(|j| j.status() == tessera_core::job::JobStatus::Succeeded)
    );
    assert_eq!(
        r.objects(&keys::derived_prefix(p.id, photo)).await,
        derived(&row)
    );
    // The row keeps the faces without their embeddings, which are in one object it
    // points at (a group photo's row stays far below DynamoDB's item limit).
    let faces = row.faces.as_ref().unwrap();
    assert_eq!(faces.len(), 8);
    assert!(
        faces
            .iter()
            .all(|f| f.embedding.is_empty() && f.views.is_empty())
    );
    assert!(row.embeddings_key.is_some());
    let faces = r.faces(&row).await;
    assert!(
        faces
            .iter()
            .all(|f| (0.0..=1.0).contains(&f.bbox.x) && f.bbox.w < 0.2 && f.embedding.len() == 128)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_opted_out_publishes_a_written_copy_and_thumbnail_dims_never_undoes_face_process() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "grace_hopper.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert_eq!(row.pipeline, Pipeline::ThumbnailDims);
    assert_eq!(row.variant_version, 1);
    assert!(row.faces.is_none(), "thumbnail_dims does not detect");
    assert!(row.published_at.is_some());
    let public = row.public().unwrap();
    assert_ne!(
        public.key, row.upload_key,
        "the upload key is never served, even with nothing to blur"
    );
    assert!(public.key.contains("/v1/") && row.upload_thumb_key.is_none());
    assert_eq!(row.subjects_rev, 0);
    assert_eq!((row.width, row.height), (512, 600));
    let written = r.image(&public.key).await;
    let upload = r.image(&row.upload_key).await;
    assert_eq!(written.dimensions(), upload.dimensions());

    // Someone opts out: the sweep committed with the enrolment re-decides the photo,
    // which is detected for the first time and re-blurred.
    let (_, change) = r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    let after = r.photo(photo).await;
    assert_eq!(after.variant_version, 2);
    assert_eq!(after.renditions.len(), 2);
    assert!(after.published_at.is_some());
    assert_eq!(after.subjects_rev, change.subjects_rev);
    assert!(after.faces.as_ref().is_some_and(|f| f.len() == 1));
    let p = project::load(r.store(), p.id).await.unwrap();

    // A thumbnail_dims message re-sent from the archive acts on nothing.
    r.engine
        .submit(photos::follow_up_plan(
            p.tenant.clone(),
            p.id,
            photo,
            &format!("{}-resent", row.sha256),
            Pipeline::ThumbnailDims,
        ))
        .await
        .unwrap();
    r.settle().await;
    assert_eq!(r.photo(photo).await, after);
    assert!(
        r.engine
            .ports()
            .objects
            .head(&after.upload_key)
            .await
            .unwrap()
            .is_some()
    );
}

/// An opt-out re-decides every photo of its project, and a photo that does not show the
/// person decides as before: its files are published again as they are (no read of the
/// upload, nothing drawn or stored), at the new revision. A photo that shows them is
/// drawn again, and so is one whose files were drawn before their digest was kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_decision_that_changes_no_file_publishes_the_same_files_again() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (alone, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    let (group, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let first = r.photo(alone).await;
    // Version 1, or 2 when the group photo's faces changed a cluster's standing while the
    // portrait was being decided (that re-decides the project).
    let v = first.variant_version;
    assert!(first.published_at.is_some() && v >= 1, "{first:?}");
    let group_before = r.photo(group).await.variant_version;
    assert!(
        first.rendered.is_some(),
        "the digest is kept with the files"
    );
    assert!(r.faces(&first).await[0].decision.blurred_in(None));

    // Hopper opts out: she is in the group photo, not in the astronaut's portrait.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    let cur = project::load(r.store(), p.id).await.unwrap();
    let same = r.photo(alone).await;
    assert!(
        same.servable(cur.subjects_rev),
        "published at the new revision {}: {same:?}\n{}",
        cur.subjects_rev,
        r.story(alone).await
    );
    assert_eq!(same.variant_version, v, "the same files: nothing drawn");
    assert_eq!(same.renditions, first.renditions);
    assert_eq!(same.rendered, first.rendered);
    assert!(r.faces(&same).await[0].decision.blurred_in(None));
    for rendition in &same.renditions {
        assert!(
            r.engine
                .ports()
                .objects
                .head(&rendition.key)
                .await
                .unwrap()
                .is_some(),
            "{} is served, so it is there",
            rendition.key
        );
    }
    let redrawn = r.photo(group).await;
    assert!(redrawn.servable(cur.subjects_rev));
    assert_eq!(
        redrawn.variant_version,
        group_before + 1,
        "the group photo shows her: drawn"
    );
    assert_eq!(redrawn.renditions.len(), 3);
    assert!(redrawn.rendered.is_some());

    // Files drawn before their digest was kept are drawn again at the next re-decision.
    r.store()
        .transact(vec![tessera_core::ports::state_store::Write::Set {
            key: tessera_core::records::photo_key(alone),
            fields: vec![("rendered".into(), serde_json::Value::Null)],
            condition: tessera_core::ports::state_store::Condition::None,
        }])
        .await
        .unwrap();
    project::reblur_all(&r.engine, p.id).await.unwrap();
    r.settle().await;
    let cur = project::load(r.store(), p.id).await.unwrap();
    let legacy = r.photo(alone).await;
    assert!(
        legacy.servable(cur.subjects_rev),
        "at rev {}: {legacy:?}",
        cur.subjects_rev
    );
    assert_eq!(legacy.variant_version, v + 1, "no digest: drawn again");
    assert_eq!(
        legacy.rendered, first.rendered,
        "the same plans, the same digest"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reprocess_reblurs_from_stored_faces_and_deletes_what_it_replaced() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let first = r.photo(photo).await;
    let first_faces = r.faces(&first).await;
    assert_eq!((first.variant_version, first.renditions.len()), (1, 2));
    // The rendered files (the embeddings object stays: faces are detected once).
    let first_keys: Vec<String> = derived(&first)
        .into_iter()
        .filter(|k| Some(k) != first.embeddings_key.as_ref())
        .collect();
    let face_job = r.jobs_of_kind(photos::kinds::FACE_PROCESS_JOB).await[0].id;
    assert_eq!(r.detections_in(face_job).await, 1);

    // A second person opts out (the sweep re-blurs: version 2) and a region is drawn:
    // one more file, the region in all.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    assert_eq!(r.photo(photo).await.variant_version, 2);
    let region = FracRect {
        x: 0.0,
        y: 0.68,
        w: 0.3,
        h: 0.3,
    };
    let before_edit = r.photo(photo).await;
    let edits = r.set_regions(photo, &[region]).await;
    // What the region hides is not served meanwhile: unpublished until re-blurred, and
    // the files of the unpublished version are gone at once (a download URL handed out
    // for them stops working now).
    assert!(r.photo(photo).await.published_at.is_none());
    for rendition in &before_edit.renditions {
        for key in [&rendition.key, &rendition.thumb_key] {
            assert!(
                r.engine.ports().objects.head(key).await.unwrap().is_none(),
                "{key} still there after the unpublish"
            );
        }
    }
    let p = project::load(r.store(), p.id).await.unwrap();
    let job = r
        .engine
        .submit(photos::reprocess_plan(
            p.tenant.clone(),
            p.id,
            photo,
            p.subjects_rev,
            edits,
        ))
        .await
        .unwrap()
        .job_id;
    r.settle().await;
    let second = r.photo(photo).await;
    assert_eq!(second.variant_version, 3);
    assert!(second.published_at.is_some(), "published again, region in");
    assert_eq!(second.renditions.len(), 3, "N = 2 → 3 files");
    // Faces were not detected again: identical boxes and embeddings, no detection phase.
    let strip = |faces: Vec<tessera_core::photo::Face>| {
        faces
            .into_iter()
            .map(|f| (f.bbox, f.embedding))
            .collect::<Vec<_>>()
    };
    let second_faces = r.faces(&second).await;
    assert_eq!(strip(first_faces.clone()), strip(second_faces.clone()));
    // Stored once, unless a close call against the new subject was looked at again: then
    // a new object holds its new views, and the one it replaced is gone (below).
    let looked_again = first_faces
        .iter()
        .zip(&second_faces)
        .any(|(a, b)| !a.looked_again && b.looked_again && b.views.len() > a.views.len());
    assert_eq!(
        first.embeddings_key != second.embeddings_key,
        looked_again,
        "the embeddings object changes only with new views"
    );
    assert_eq!(r.detections_in(job).await, 0);
    // Old files are gone, new ones are all there, nothing else under the prefix.
    let now = r.objects(&keys::derived_prefix(p.id, photo)).await;
    assert_eq!(now, derived(&second));
    assert!(first_keys.iter().all(|k| !now.contains(k)));
    assert!(second.replaced_keys.is_empty() && second.staged_keys.is_empty());
    // Every file and thumbnail applies the region (the cameraman's photo is there).
    let upload = r.image(&second.upload_key).await;
    let before = detail(&upload, &region);
    assert!(before > 4.0, "the region has detail to lose: {before}");
    for rendition in &second.renditions {
        for key in [&rendition.key, &rendition.thumb_key] {
            let d = detail(&r.image(key).await, &region);
            assert!(d < before / 4.0, "{key}: detail {d} vs {before}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_failure_unpublishes_in_the_same_transaction() {
    let r = rig().await;
    // Someone opted out, so faces are searched and embedded (a project without a
    // threshold embeds none, and a re-decision of it never needs the faces' object).
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    let (photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert!(row.published_at.is_some());
    assert_eq!(row.pipeline, Pipeline::FaceProcess, "someone opted out");
    assert!(!row.faces.as_ref().unwrap().is_empty());

    // The upload disappears behind the pipeline's back, and so does the faces' object (a
    // re-decision that changes no file would not need the upload): the reprocess must
    // detect and draw again, and cannot finish.
    for key in [&row.upload_key, row.embeddings_key.as_ref().unwrap()] {
        r.engine.ports().objects.delete(key).await.unwrap();
    }
    let job = r
        .engine
        .submit(photos::reprocess_plan(
            p.tenant.clone(),
            p.id,
            photo,
            row.subjects_rev,
            1,
        ))
        .await
        .unwrap()
        .job_id;
    r.settle().await;
    let j = r.engine.job(job).await.unwrap();
    assert_eq!(j.status(), tessera_core::job::JobStatus::Failed);
    let after = r.photo(photo).await;
    assert!(
        after.published_at.is_none(),
        "a failed photo must not stay published"
    );
    assert_eq!(
        after.variant_version, row.variant_version,
        "nothing new was started"
    );
    // Why, for whoever reviews the photo, written with the failure.
    let reason = after.failure.as_deref().expect("the failure is recorded");
    assert!(
        reason.contains(&row.upload_key) || reason.contains("upload"),
        "{reason}"
    );
    assert!(matches!(
        photos::status::state(&after, false),
        photos::status::PhotoState::Failed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_swapped_under_an_ingested_key_unpublish_the_photo_and_are_never_served() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "grace_hopper.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert!(row.published_at.is_some());
    let public = row.public().unwrap().key.clone();
    assert_ne!(public, row.upload_key);
    let served = r.engine.ports().objects.get(&public).await.unwrap();

    // A second PUT through the same key: other bytes (another face), a newer event.
    let other = std::fs::read(support::shared().join("testdata/faces/astronaut.png")).unwrap();
    r.engine
        .ports()
        .objects
        .put(&row.upload_key, other.clone().into())
        .await
        .unwrap();
    let newer = ObjectCreated {
        sequencer: "00000000000000FF".into(),
        size: other.len() as u64,
        ..event.clone()
    };
    r.ingest(&p, &newer).await;
    r.settle().await;
    let after = r.photo(photo).await;
    assert!(
        after.published_at.is_none(),
        "unpublished on the changed upload"
    );
    assert_eq!(
        after.sha256, row.sha256,
        "the row still describes the ingested bytes"
    );
    // The published object was never replaced by other bytes: it was deleted at the
    // unpublish (a download URL for it stops working at once), and a re-blur refuses
    // the swapped bytes.
    assert!(!served.is_empty());
    assert!(
        r.engine
            .ports()
            .objects
            .head(&public)
            .await
            .unwrap()
            .is_none(),
        "the unpublished version's file is gone"
    );
    let job = r
        .engine
        .submit(photos::reprocess_plan(p.tenant.clone(), p.id, photo, 0, 7))
        .await
        .unwrap()
        .job_id;
    r.settle().await;
    assert_eq!(
        r.engine.job(job).await.unwrap().status(),
        tessera_core::job::JobStatus::Failed
    );
    let last = r.photo(photo).await;
    assert!(last.published_at.is_none());
    assert_eq!(
        last.variant_version, after.variant_version,
        "nothing made from other bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_from_before_orientation_are_migrated_and_republished() {
    use tessera_imaging::{Orientation, encode, metadata, orient};
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    // A portrait as a phone stores it: pixels turned (stored 896 × 1280), orientation 6.
    let upright = image::open(support::shared().join("testdata/faces/composite_pd_1280x896.jpg"))
        .unwrap()
        .to_rgb8();
    let stored = orient::apply(
        image::DynamicImage::ImageRgb8(upright.clone()),
        Orientation::from_exif(8),
    )
    .to_rgb8();
    let tiff = metadata::orientation_exif(Orientation::from_exif(6));
    let bytes = encode::jpeg(&stored, None, Some(&tiff)).unwrap();
    let (photo, event) = r.upload_bytes(&p, "IMG_0002.jpg", bytes).await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let current = r.photo(photo).await;
    assert_eq!(
        (current.width, current.height, current.orientation),
        (1280, 896, 6)
    );

    // Rewrite it as the old code wrote it: stored-pixel geometry, no faces found (they
    // were sideways), a manual region drawn on the stored pixels, the upload served.
    let region_stored = FracRect {
        x: 0.1,
        y: 0.2,
        w: 0.3,
        h: 0.1,
    };
    let mut legacy = serde_json::to_value(&current).unwrap();
    let o = legacy.as_object_mut().unwrap();
    for k in ["orientation", "rules", "subjects_rev"] {
        o.remove(k);
    }
    o.insert("width".into(), 896.into());
    o.insert("height".into(), 1280.into());
    o.insert("faces".into(), serde_json::json!([]));
    o.insert(
        "blur_regions".into(),
        serde_json::to_value([region_stored]).unwrap(),
    );
    o.insert(
        "renditions".into(),
        serde_json::json!([{ "variant": null, "key": current.upload_key, "thumb_key": current.renditions[0].thumb_key }]),
    );
    let mut item = r
        .store()
        .get(&tessera_core::records::photo_key(photo))
        .await
        .unwrap()
        .unwrap();
    item.body = legacy;
    r.store()
        .put(item, tessera_core::ports::state_store::Condition::None)
        .await
        .unwrap();
    let status = project::privacy_status(r.store(), p.id).await.unwrap();
    assert_eq!(status.not_current, 1, "a legacy row is not current");

    project::reblur_all(&r.engine, p.id).await.unwrap();
    r.settle().await;
    let migrated = r.photo(photo).await;
    assert_eq!(migrated.rules, tessera_core::photo::RULES);
    assert_eq!((migrated.width, migrated.height), (1280, 896));
    assert!(migrated.published_at.is_some());
    assert_ne!(migrated.public().unwrap().key, migrated.upload_key);
    let want = Orientation::from_exif(6).map_rect(region_stored);
    let got = migrated.blur_regions[0];
    assert!(
        (got.x - want.x).abs() < 1e-5 && (got.w - want.w).abs() < 1e-5,
        "{got:?} vs {want:?}"
    );
    let faces = migrated.faces.as_ref().unwrap();
    assert_eq!(faces.len(), 8, "detected again on the upright pixels");
    let astronauts: Vec<_> = faces
        .iter()
        .filter(|f| f.decision.shown_to().is_some())
        .collect();
    assert_eq!(astronauts.len(), 4);
    let public = r.image(&migrated.public().unwrap().key).await;
    for f in astronauts {
        assert!(detail(&public, &f.bbox) < detail(&upright, &f.bbox) / 3.0);
    }
    assert_eq!(
        project::privacy_status(r.store(), p.id)
            .await
            .unwrap()
            .not_current,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_embeddings_object_means_detecting_again_never_fewer_faces() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let first = r.photo(photo).await;
    let key = first.embeddings_key.clone().expect("faces were detected");
    r.engine.ports().objects.delete(&key).await.unwrap();
    // A second opt-out re-decides the photo: its faces are found again (one detection),
    // not decided without embeddings, and not dropped.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.settle().await;
    let again = r.photo(photo).await;
    assert!(again.published_at.is_some(), "{again:?}");
    assert_eq!(
        again.faces.as_ref().map(Vec::len),
        first.faces.as_ref().map(Vec::len)
    );
    let reprocess = r
        .jobs_of_kind(photos::kinds::REPROCESS_JOB)
        .await
        .into_iter()
        .find(|j| j.spec["photo"] == photo.to_string())
        .unwrap();
    assert_eq!(r.detections_in(reprocess.id).await, 1, "detected again");
    let faces = r.faces(&again).await;
    assert!(faces.iter().all(|f| f.embedding.len() == 128));
    assert!(
        r.engine
            .ports()
            .objects
            .head(again.embeddings_key.as_ref().unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photos_jobs_queued_before_its_erasure_end_without_acting() {
    // Seen in the load rehearsal: a sweep queued a reprocess (and its cleanup) for a
    // photo that was erased before they ran; both failed ("no row"), so a finished
    // erasure showed up as failed tasks. An erased photo's late tasks have nothing left
    // to act on: they succeed, and nothing of the photo comes back.
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert!(row.published_at.is_some());
    let prefix = keys::derived_prefix(p.id, photo);
    tessera_jobs::photos::erase::erase_photo(
        &r.engine,
        &row,
        &tessera_core::audit::Actor::cli(p.tenant.clone()),
    )
    .await
    .unwrap();
    assert!(r.objects(&prefix).await.is_empty());
    let job = r
        .engine
        .submit(photos::reprocess_plan(p.tenant.clone(), p.id, photo, 1, 0))
        .await
        .unwrap()
        .job_id;
    r.settle().await;
    let j = r.engine.job(job).await.unwrap();
    assert_eq!(j.status(), tessera_core::job::JobStatus::Succeeded, "{j:?}");
    assert_eq!(j.counters.succeeded, 2, "the reprocess and its cleanup");
    assert!(
        r.store()
            .get(&tessera_core::records::photo_key(photo))
            .await
            .unwrap()
            .is_none(),
        "no row written back"
    );
    assert!(r.objects(&prefix).await.is_empty(), "no file written back");
}

/// An opt-out withholds every photo decided before it, though `published_at` is still
/// set. Cancelling such a photo's re-decision before it ran leaves nobody to publish it:
/// it is failed with the reason, as an unpublished one is, not left `processing` for
/// ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_decision_after_an_opt_out_cancelled_before_it_ran_fails_the_photo_with_the_reason() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let before = r.photo(photo).await;
    assert!(before.published_at.is_some(), "{before:?}");
    let (_, change) = r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    // The sweep the opt-out committed would submit the re-decision itself; here it is
    // submitted directly, and both are cancelled before any runs.
    r.engine
        .cancel(
            change.reblur_job,
            tessera_core::job::CancelMode::Cooperative,
        )
        .await
        .unwrap();
    let job = r.redecide(photo).await;
    r.engine
        .cancel(job, tessera_core::job::CancelMode::Cooperative)
        .await
        .unwrap();
    r.settle().await;
    let row = r.photo(photo).await;
    assert!(
        row.subjects_rev < change.subjects_rev,
        "never decided again: {row:?}"
    );
    let project = photos::project::load(r.store(), p.id).await.unwrap();
    assert_eq!(project.subjects_rev, change.subjects_rev);
    let state = tessera_jobs::photos::status::current(&row, &project);
    match state {
        tessera_jobs::photos::status::PhotoState::Failed { reason } => {
            assert!(reason.contains("cancel"), "{reason}")
        }
        other => panic!("withheld with nobody to publish it: {other:?}\n{row:?}"),
    }
    assert!(row.published_at.is_none(), "{row:?}");
}

/// Cancelling a published photo's re-decision before it ran leaves the photo as it was:
/// the run changed nothing, so there is nothing to fail (a run cancelled after it staged,
/// or a re-decision of saved regions, which unpublished the photo, cancelled before it
/// staged, fails the photo with the reason: `races.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_decision_cancelled_before_it_ran_leaves_the_photo_as_it_was() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let before = r.photo(photo).await;
    assert!(before.published_at.is_some(), "{before:?}");
    let job = r.redecide(photo).await;
    r.engine
        .cancel(job, tessera_core::job::CancelMode::Cooperative)
        .await
        .unwrap();
    r.settle().await;
    assert_eq!(r.photo(photo).await, before);
    assert_eq!(
        r.engine.job(job).await.unwrap().status(),
        tessera_core::job::JobStatus::Cancelled
    );
}

/// A re-decision sweep cancelled before it reached a project's photos leaves them
/// withheld (decided before the opt-out) with nobody to re-decide them. Each says so,
/// with the job to resume, rather than `processing` for ever; resuming the sweep
/// re-decides and publishes them, and the project no longer says it stalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sweep_says_so_on_every_photo_it_left_withheld_until_it_is_resumed() {
    use tessera_jobs::photos::status::{PhotoState, current, project_photos_page};
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let mut ids = Vec::new();
    for file in ["astronaut.png", "grace_hopper.jpg"] {
        let (photo, event) = r.upload(&p, file).await;
        r.ingest(&p, &event).await;
        ids.push(photo);
    }
    r.settle().await;
    let (_, change) = r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    r.engine
        .cancel(
            change.reblur_job,
            tessera_core::job::CancelMode::Cooperative,
        )
        .await
        .unwrap();
    r.settle().await;
    let project = photos::project::load(r.store(), p.id).await.unwrap();
    let stall = project
        .stalled_sweep()
        .expect("the project says its sweep stalled");
    assert_eq!(stall.job_id, change.reblur_job.to_string());
    assert_eq!(stall.subjects_rev, change.subjects_rev);
    let (page, _) = project_photos_page(r.store(), &project, None, 10)
        .await
        .unwrap();
    assert_eq!(page.len(), 2);
    for listed in &page {
        let tessera_jobs::photos::status::Listed::Row(row, state) = listed else {
            panic!("a refusal: {listed:?}");
        };
        assert!(!row.servable(project.subjects_rev), "{row:?}");
        match state {
            PhotoState::Stalled { reason } => assert!(
                reason.contains(&row.file_name)
                    && reason.contains("cancelled")
                    && reason.contains(&format!("/v1/jobs/{}:resume", change.reblur_job)),
                "{reason}"
            ),
            other => panic!("withheld with no word of why: {other:?}"),
        }
        let v = serde_json::to_value(state).unwrap();
        assert_eq!(
            v["status"], "processing",
            "the API's states are unchanged: {v}"
        );
    }
    r.engine.resume(change.reblur_job).await.unwrap();
    r.settle().await;
    let project = photos::project::load(r.store(), p.id).await.unwrap();
    assert!(project.sweep_stalled.is_none(), "{project:?}");
    for id in ids {
        let row = r.photo(id).await;
        assert_eq!(
            current(&row, &project),
            PhotoState::Published,
            "{}",
            r.story(id).await
        );
    }
}

/// A photo whose files follow older rules is withheld until it is processed again, though
/// `published_at` is still set. Cancelling that processing before it ran leaves nobody to
/// publish it: it is failed with the reason, as one withheld by an opt-out is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_to_new_rules_cancelled_before_it_ran_fails_the_photo_with_the_reason() {
    use tessera_core::ports::state_store::{Condition, Write};
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    // A row written under the rules before the current ones.
    r.store()
        .transact(vec![Write::Set {
            key: tessera_core::records::photo_key(photo),
            fields: vec![("rules".into(), (tessera_core::photo::RULES - 1).into())],
            condition: Condition::None,
        }])
        .await
        .unwrap();
    let project = photos::project::load(r.store(), p.id).await.unwrap();
    let before = r.photo(photo).await;
    assert!(before.published_at.is_some() && !before.servable(project.subjects_rev));
    let job = r.redecide(photo).await;
    r.engine
        .cancel(job, tessera_core::job::CancelMode::Cooperative)
        .await
        .unwrap();
    r.settle().await;
    let row = r.photo(photo).await;
    match tessera_jobs::photos::status::current(&row, &project) {
        tessera_jobs::photos::status::PhotoState::Failed { reason } => {
            assert!(reason.contains("cancel"), "{reason}")
        }
        other => panic!("withheld with nobody to publish it: {other:?}\n{row:?}"),
    }
}

/// A sweep part that had already handed on (its follow-up part submitted) and then ended
/// without success records no stall: the follow-up carries the sweep on, and a stall
/// naming this part would read as stalled until the next subject change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_part_that_had_handed_on_records_no_stall_when_it_ends_cancelled() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (_photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let (_, change) = r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    // The part the sweep's first part hands on to, as its run would submit it (its cursor
    // past every photo id).
    r.engine
        .submit(photos::reblur::part_plan(
            p.tenant.clone(),
            p.id,
            change.subjects_rev,
            Some("~".into()),
            1,
        ))
        .await
        .unwrap();
    r.engine
        .cancel(
            change.reblur_job,
            tessera_core::job::CancelMode::Cooperative,
        )
        .await
        .unwrap();
    let project = photos::project::load(r.store(), p.id).await.unwrap();
    assert!(project.sweep_stalled.is_none(), "{project:?}");
    r.settle().await;
}

/// A rename by this build keeps the fields of the project's record it does not know: in
/// a rolling deploy, an older build renaming a project dropped a newer build's notice
/// that the project's sweep had stalled (`sweep_stalled`), and the project then read as
/// current with photos withheld and nobody told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_keeps_the_fields_a_newer_build_wrote() {
    use tessera_core::ports::state_store::{Condition, Write};
    let r = rig().await;
    let p = r.project(None).await;
    let key = tessera_core::records::project_key(p.id);
    let newer = serde_json::json!({ "subjects_rev": 7, "said": "by a newer build" });
    r.store()
        .transact(vec![Write::Set {
            key: key.clone(),
            fields: vec![("from_a_newer_build".into(), newer.clone())],
            condition: Condition::None,
        }])
        .await
        .unwrap();
    let renamed = tessera_core::projects::update(
        r.store(),
        p.id,
        Some("renamed"),
        Some(Some("described".into())),
    )
    .await
    .unwrap();
    assert_eq!(renamed.name, "renamed");
    let stored = r.store().get(&key).await.unwrap().unwrap();
    assert_eq!(stored.body["from_a_newer_build"], newer);
    assert_eq!(stored.body["name"], "renamed");
    assert_eq!(stored.body["description"], "described");
    let found = tessera_core::projects::by_name(r.store(), &p.tenant, "renamed")
        .await
        .unwrap();
    assert_eq!(found.id, p.id);
    let listing = tessera_core::ports::state_store::Query::partition(
        tessera_core::ports::state_store::Index::ByParent,
        tessera_core::records::tenant_projects_partition(&p.tenant),
        10,
    );
    let listed = r.store().query(&listing).await.unwrap().items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].body["from_a_newer_build"], newer);
    assert_eq!(
        listed[0].by_parent.as_ref().map(|k| k.sk.as_str()),
        Some("renamed")
    );
    assert!(
        tessera_core::projects::by_name(r.store(), &p.tenant, "p")
            .await
            .is_err(),
        "the old name is free"
    );
}

/// A project with no threshold blurs every face and recognises nobody, so it makes no
/// biometric template of the people in its photos: its faces are found, blurred and kept
/// (boxes and landmarks), never embedded, and no embeddings object is stored. Setting a
/// threshold re-decides every photo; the stored faces are embedded then, without
/// detecting again, and the opted-out person is told apart from the bystanders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_without_a_threshold_embeds_no_face_until_one_is_set() {
    use tessera_core::privacy::FaceDecision;
    let r = rig().await;
    let p = r.project(None).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let first = r.photo(photo).await;
    assert!(first.published_at.is_some(), "{first:?}");
    assert_eq!(first.pipeline, Pipeline::FaceProcess);
    assert_eq!(first.faces.as_ref().map(Vec::len), Some(8));
    assert!(first.embeddings_key.is_none(), "no template stored");
    assert_eq!(
        r.objects(&keys::derived_prefix(p.id, photo)).await,
        derived(&first),
        "nothing but the files under the photo's prefix"
    );
    let faces = r.faces(&first).await;
    assert!(
        faces
            .iter()
            .all(|f| f.embedding.is_empty() && f.decision == FaceDecision::FailClosed),
        "{faces:?}"
    );

    // A threshold: every photo is decided again, its stored faces embedded then.
    project::set_settings(
        &r.engine,
        p.id,
        project::Settings {
            threshold: Some(0.363),
            expand: 0.35,
            keep_metadata: Default::default(),
        },
        &tessera_core::audit::Actor::cli(p.tenant.clone()),
    )
    .await
    .unwrap();
    r.settle().await;
    let second = r.photo(photo).await;
    assert!(second.published_at.is_some(), "{second:?}");
    assert!(second.variant_version > first.variant_version);
    assert!(second.embeddings_key.is_some());
    let faces = r.faces(&second).await;
    assert_eq!(faces.len(), 8);
    assert!(faces.iter().all(|f| f.embedding.len() == 128));
    let opted_out = faces
        .iter()
        .filter(|f| matches!(f.decision, FaceDecision::Subject { .. }))
        .count();
    assert_eq!(opted_out, 4, "{faces:?}");
    assert!(
        faces
            .iter()
            .any(|f| matches!(f.decision, FaceDecision::NotOptedOut { .. })),
        "the bystanders are no longer blurred: {faces:?}"
    );
    let reprocess = r
        .jobs_of_kind(photos::kinds::REPROCESS_JOB)
        .await
        .into_iter()
        .find(|j| j.spec["photo"] == photo.to_string())
        .expect("the sweep re-decided the photo");
    assert_eq!(r.detections_in(reprocess.id).await, 0, "not detected again");
}
