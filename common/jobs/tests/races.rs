//! Races between an upload and an opt-out, made deterministic with pause points: the
//! task is held at the racy moment while the test enrols someone, then let go. Either
//! way the photo must end decided at the new subjects, the new subject blurred — never
//! published raw. The same for blur regions saved while a render runs: the render that
//! lacks them never publishes. (One test: pause points are per process.)

mod support;

use std::time::Duration;
use support::{detail, rig};
use tessera_core::geometry::FracRect;
use tessera_core::job::JobStatus;
use tessera_core::photo::Pipeline;
use tessera_engine::Worker;
use tessera_jobs::photos::{self, fault, project};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_opt_out_racing_an_upload_is_applied_before_anything_is_published() {
    let r = rig().await;
    let stop = CancellationToken::new();
    let worker = Worker::new(r.engine.clone(), 3, Some(Duration::from_millis(200)));
    let s = stop.clone();
    let running = tokio::spawn(async move { worker.run(s).await });
    let wait = |what: &'static str, n: std::sync::Arc<tokio::sync::Notify>| async move {
        tokio::time::timeout(Duration::from_secs(60), n.notified())
            .await
            .unwrap_or_else(|_| panic!("no task reached {what}"));
    };

    // 1. Ingest read the project (nobody opted out: thumbnail_dims) and is held before
    //    writing its row; the enrolment and its whole sweep happen meanwhile.
    let p = r.project(Some(0.363)).await;
    let (reached, release) = fault::hold(fault::INGEST_BEFORE_ROW);
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    wait("ingest", reached).await;
    let (_, change) = r.enrol(&p, "astronaut", "astronaut.png").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while r.engine.job(change.reblur_job).await.unwrap().status() != JobStatus::Succeeded {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep did not finish"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    release.notify_one();

    // 2. thumbnail_dims decided "nothing to hide" and is held before publishing; someone
    //    opts out meanwhile.
    let q = project::create(
        r.store(),
        tessera_core::TenantId::local(),
        "second",
        Some(0.363),
        0.35,
    )
    .await
    .unwrap();
    let (reached, release) = fault::hold(fault::BEFORE_PUBLISH);
    let (photo2, event2) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event2).await;
    wait("publish", reached).await;
    let (_, change2) = r.enrol(&q, "hopper", "grace_hopper.jpg").await;
    release.notify_one();

    // 3. A render is held before publishing while blur regions are saved on its photo:
    //    it rendered without them, so it must not publish. (After the sweep of step 2,
    //    so that nothing but the held render's retry can re-blur the photo.)
    // Every job so far ends first: the pause point is armed for whichever task reaches
    // it next, and that must be this photo's render.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let jobs = r
            .engine
            .list_jobs(&tessera_core::TenantId::local(), None, 1000)
            .await
            .unwrap()
            .0;
        let running = jobs.iter().filter(|j| !j.is_over()).count();
        if running == 0 && jobs.iter().any(|j| j.id == change2.reblur_job) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{running} jobs still running before the edit race"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (reached, release) = fault::hold(fault::BEFORE_PUBLISH);
    let (photo3, event3) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event3).await;
    wait("publish of the edited photo", reached).await;
    let region = FracRect {
        x: 0.0,
        y: 0.68,
        w: 0.3,
        h: 0.3,
    };
    let edits = r.set_regions(photo3, &[region]).await;
    release.notify_one();

    stop.cancel();
    running.await.unwrap();
    r.settle().await;

    for (photo, rev, blurred_faces) in [
        (photo, change.subjects_rev, 4),
        (photo2, change2.subjects_rev, 3),
    ] {
        let row = r.photo(photo).await;
        assert_eq!(
            row.pipeline,
            Pipeline::ThumbnailDims,
            "ingest chose before the opt-out"
        );
        assert!(row.published_at.is_some(), "{row:?}");
        assert_eq!(row.subjects_rev, rev, "published at the new subjects");
        let faces = row.faces.as_ref().expect("detected after all");
        let hidden: Vec<_> = faces
            .iter()
            .filter(|f| f.decision.blurred_in(None))
            .collect();
        assert_eq!(hidden.len(), blurred_faces, "{faces:?}");
        // In pixels: each hidden face lost its detail in the public file.
        let upload = r.image(&row.upload_key).await;
        let public = r.image(&row.public().unwrap().key).await;
        for f in hidden {
            let (before, after) = (detail(&upload, &f.bbox), detail(&public, &f.bbox));
            assert!(
                after < before / 3.0,
                "face {:?}: detail {after} vs {before}",
                f.bbox
            );
        }
    }
    // The edited photo: published only with its region, by a retry of the held render
    // (nothing else was submitted to re-blur it).
    let row = r.photo(photo3).await;
    assert!(row.published_at.is_some(), "{row:?}");
    assert_eq!(row.edits_rev, edits);
    let upload = r.image(&row.upload_key).await;
    for rendition in &row.renditions {
        let (before, after) = (
            detail(&upload, &region),
            detail(&r.image(&rendition.key).await, &region),
        );
        assert!(
            after < before / 3.0,
            "{}: the region was not applied ({after} vs {before})",
            rendition.key
        );
    }
    let runs = runs_of(
        &r,
        photos::kinds::FACE_PROCESS_JOB,
        photos::kinds::FACE_PROCESS,
        photo3,
    )
    .await;
    assert!(runs >= 2, "the held render's publication was refused");

    // The held thumbnail_dims could not publish: its publication was refused by the
    // subject revision it no longer matched, and it ran again with that attempt given
    // back. (Its later runs meet the sweep's re-decision of the same photo, which
    // publishes it, as checked above; those row conflicts are counted, and the held task
    // may end dead after them: a known fight between two runs of one photo.)
    let held = tasks_of(
        &r,
        photos::kinds::THUMBNAIL_DIMS_JOB,
        photos::kinds::THUMBNAIL_DIMS,
        photo2,
    )
    .await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(
        held[0].moved_on >= 1,
        "the held publication was refused and run again, its attempt given back: {:?}",
        held[0]
    );
}

/// The `task_kind` tasks of `photo`'s `job_kind` job.
async fn tasks_of(
    r: &support::Rig,
    job_kind: &str,
    task_kind: &str,
    photo: tessera_core::PhotoId,
) -> Vec<tessera_core::task::Task> {
    let job = r
        .jobs_of_kind(job_kind)
        .await
        .into_iter()
        .find(|j| j.spec["photo"] == photo.to_string())
        .unwrap();
    r.engine
        .job_tasks(job.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.kind == task_kind)
        .collect()
}

/// Runs of the `task_kind` tasks of `photo`'s `job_kind` job: attempts, and runs
/// that gave theirs back because what they decided from moved on.
async fn runs_of(
    r: &support::Rig,
    job_kind: &str,
    task_kind: &str,
    photo: tessera_core::PhotoId,
) -> u32 {
    tasks_of(r, job_kind, task_kind, photo)
        .await
        .iter()
        .map(|t| t.attempts + t.moved_on)
        .sum()
}
