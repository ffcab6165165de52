//! Races between an upload and an opt-out, made deterministic with pause points: the
//! task is held at the racy moment while the test enrols someone, then let go. Either
//! way the photo must end decided at the new subjects, the new subject blurred — never
//! published raw. The same for blur regions saved while a render runs: the render that
//! lacks them never publishes. And two runs of one photo at once: the older stands
//! down, whichever write finds the newer out; and a cancelled run fails the photo only
//! if the version it staged is still the row's; a run that fails for good, only if no
//! run submitted after it staged since. (One test: pause points are per process.)

mod support;

use std::time::Duration;
use support::{detail, rig};
use tessera_core::geometry::FracRect;
use tessera_core::job::{CancelMode, JobStatus};
use tessera_core::photo::Pipeline;
use tessera_core::task::TaskState;
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
    all_over(&r, change2.reblur_job, "before the edit race").await;
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

    // 4. Two runs of one photo at once: its first processing is held before publishing
    //    (its version 1 staged), a re-decision submitted meanwhile stages version 2 and
    //    is held too; the first is let go before the second. The first finds a newer
    //    version staged and stands down: it neither publishes version 1 nor runs again
    //    to stage a third over the second's, which publishes.
    all_over(&r, change2.reblur_job, "before the two runs").await;
    let (reached, release_first) = fault::hold(fault::BEFORE_PUBLISH);
    let (photo4, event4) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event4).await;
    wait("publish of a first processing", reached).await;
    let (reached, release_second) = fault::hold(fault::BEFORE_PUBLISH);
    let redecision = r.redecide(photo4).await;
    wait("publish of the re-decision", reached).await;
    release_first.notify_one();
    let first = over(
        &r,
        photos::kinds::FACE_PROCESS_JOB,
        photos::kinds::FACE_PROCESS,
        photo4,
    )
    .await;
    release_second.notify_one();

    // 5. The same found out one write earlier: a first processing held after deciding,
    //    before staging its version, while a re-decision stages and publishes version 1.
    all_over(&r, redecision, "before the staging race").await;
    let (reached, release) = fault::hold(fault::BEFORE_STAGING);
    let (photo5, event5) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event5).await;
    wait("staging of a first processing", reached).await;
    let redecided = r.redecide(photo5).await;
    r.wait_over(redecided).await;
    release.notify_one();
    let late = over(
        &r,
        photos::kinds::FACE_PROCESS_JOB,
        photos::kinds::FACE_PROCESS,
        photo5,
    )
    .await;

    // 6. Regions saved while a run is held after deciding, before staging, and a
    //    re-decision with them (as the API submits one) has read the row when the held
    //    run is let go: the held run lacks the regions, so its staging is refused and the
    //    re-decision, the run that read the row later, stages and publishes them.
    all_over(&r, redecided, "before the regions race").await;
    let (reached, release_stale) = fault::hold(fault::BEFORE_STAGING);
    let (photo6, event6) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event6).await;
    wait("staging of a run without the regions", reached).await;
    let edits6 = r.set_regions(photo6, &[region]).await;
    let (reached, release_with) = fault::hold(fault::BEFORE_STAGING);
    let with_regions = r.redecide(photo6).await;
    wait("staging of the run with the regions", reached).await;
    release_stale.notify_one();
    let stale = over(
        &r,
        photos::kinds::FACE_PROCESS_JOB,
        photos::kinds::FACE_PROCESS,
        photo6,
    )
    .await;
    release_with.notify_one();

    // 7. A run whose job is cancelled (forced) after it staged its version, which
    //    unpublished the photo: the photo is failed with the reason, not left withheld
    //    with nobody to publish it or say why.
    all_over(&r, with_regions, "before the cancelled run").await;
    let (reached, release_cancelled) = fault::hold(fault::BEFORE_PUBLISH);
    let (photo7, event7) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event7).await;
    wait("publish of a run to be cancelled", reached).await;
    let cancelled = r
        .jobs_of_kind(photos::kinds::FACE_PROCESS_JOB)
        .await
        .into_iter()
        .find(|j| j.spec["photo"] == photo7.to_string())
        .unwrap()
        .id;
    r.engine.cancel(cancelled, CancelMode::Force).await.unwrap();
    release_cancelled.notify_one();

    // 8. An older run cancelled after a newer one staged over it and published: what
    //    its cancellation undoes is no longer its own, and the photo stays published.
    all_over(&r, cancelled, "before the older run's cancellation").await;
    let (reached, release_older) = fault::hold(fault::BEFORE_PUBLISH);
    let (photo8, event8) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event8).await;
    wait("publish of the older run", reached).await;
    let newer = r.redecide(photo8).await;
    r.wait_over(newer).await;
    let older = r
        .jobs_of_kind(photos::kinds::FACE_PROCESS_JOB)
        .await
        .into_iter()
        .find(|j| j.spec["photo"] == photo8.to_string())
        .unwrap()
        .id;
    r.engine.cancel(older, CancelMode::Force).await.unwrap();
    release_older.notify_one();

    // 9. An older run that fails for good before staging, after a re-decision submitted
    //    later staged and published the photo (its attempts spent on errors, say): the
    //    later run decided from what was stored after the older one's reason, so the
    //    photo stays published, and no notice says it failed.
    all_over(&r, older, "before the older run's failure").await;
    let (reached, release_failing) = fault::hold_then_fail(fault::BEFORE_STAGING);
    let (photo9, event9) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    r.ingest(&q, &event9).await;
    wait("staging of the older run to fail", reached).await;
    let newer9 = r.redecide(photo9).await;
    r.wait_over(newer9).await;
    release_failing.notify_one();
    let failed9 = over(
        &r,
        photos::kinds::FACE_PROCESS_JOB,
        photos::kinds::FACE_PROCESS,
        photo9,
    )
    .await;

    // 10. An opt-out's re-decision that fails for good while the photo's earlier
    //     version, decided before the opt-out, is published: that version shows the
    //     person unblurred, so the photo is withdrawn with the reason (fail closed).
    //     A project of its own, so that the sweep re-decides this photo alone.
    let w = project::create(
        r.store(),
        tessera_core::TenantId::local(),
        "third",
        Some(0.363),
        0.35,
    )
    .await
    .unwrap();
    let (photo10, event10) = r.upload(&w, "composite_pd_1280x896.jpg").await;
    let ingested10 = r.ingest(&w, &event10).await;
    all_over(&r, ingested10, "before the re-decision to fail").await;
    assert!(r.photo(photo10).await.published_at.is_some());
    let (reached, release_failing) = fault::hold_then_fail(fault::BEFORE_STAGING);
    let (_, change10) = r.enrol(&w, "astronaut", "astronaut.png").await;
    wait("staging of the re-decision to fail", reached).await;
    release_failing.notify_one();
    all_over(&r, change10.reblur_job, "after the re-decision's failure").await;

    // 11. Regions saved on a published photo (which unpublishes it), and the
    //     re-decision that would publish them cancelled before it staged anything:
    //     the photo is failed with the reason, not withheld with nobody to say why.
    let (photo11, event11) = r.upload(&q, "composite_pd_1280x896.jpg").await;
    let ingested11 = r.ingest(&q, &event11).await;
    all_over(&r, ingested11, "before the cancelled re-decision").await;
    assert!(r.photo(photo11).await.published_at.is_some());
    let (reached, release_cancelled11) = fault::hold(fault::BEFORE_STAGING);
    r.set_regions(photo11, &[region]).await;
    let redecision11 = r.redecide(photo11).await;
    wait("staging of the re-decision to cancel", reached).await;
    r.engine
        .cancel(redecision11, CancelMode::Force)
        .await
        .unwrap();
    release_cancelled11.notify_one();
    all_over(&r, redecision11, "after the cancelled re-decision").await;

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
    // back. (Its later run may meet the sweep's re-decision of the same photo, which
    // publishes it, as checked above: whichever of the two staged its version first
    // stands down, so neither ends failed.)
    let held = tasks_of(
        &r,
        photos::kinds::THUMBNAIL_DIMS_JOB,
        photos::kinds::THUMBNAIL_DIMS,
        photo2,
    )
    .await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].state, TaskState::Succeeded, "{:?}", held[0]);
    assert!(
        held[0].moved_on >= 1,
        "the held publication was refused and run again, its attempt given back: {:?}",
        held[0]
    );

    // The two runs: the first stood down at once, the second published its version 2.
    assert_eq!(first.state, TaskState::Succeeded, "{first:?}");
    assert_eq!(
        (first.attempts, first.moved_on),
        (1, 0),
        "one run, not run again: {first:?}"
    );
    assert!(
        first
            .result
            .as_ref()
            .is_some_and(|r| r["taken_over"].is_string()),
        "{first:?}"
    );
    let row = r.photo(photo4).await;
    assert!(row.published_at.is_some(), "{row:?}");
    assert!(row.failure.is_none(), "{row:?}");
    assert_eq!(
        row.variant_version, 2,
        "no third version staged over the second"
    );
    assert_eq!(
        r.engine.job(redecision).await.unwrap().status(),
        JobStatus::Succeeded
    );
    for rendition in &row.renditions {
        assert!(rendition.key.contains("/v2/"), "{}", rendition.key);
    }
    // The first run's files were taken away by the run that staged over them.
    let (v1, _) = tessera_core::photo::keys::rendition(q.id, photo4, 1, None);
    assert!(
        r.engine.ports().objects.head(&v1).await.unwrap().is_none(),
        "{v1} left behind"
    );

    // The late first processing stood down before staging anything.
    assert_eq!(late.state, TaskState::Succeeded, "{late:?}");
    assert_eq!((late.attempts, late.moved_on), (1, 0), "{late:?}");
    assert!(
        late.result
            .as_ref()
            .is_some_and(|r| r["taken_over"].is_string()),
        "{late:?}"
    );
    let row = r.photo(photo5).await;
    assert!(
        row.published_at.is_some() && row.failure.is_none(),
        "{row:?}"
    );
    assert_eq!(row.variant_version, 1, "published by the re-decision alone");
    assert_eq!(
        r.engine.job(redecided).await.unwrap().status(),
        JobStatus::Succeeded
    );

    // The run without the regions staged nothing: its staging was refused, and it ran
    // again reading them, with its attempt given back (nothing failed: a user saving
    // regions again and again must not spend its attempts). The run with them staged and
    // published, or stood down to that second run, which read them too; either way the
    // region is in the file. (Staged without them, its publication is what is refused
    // instead.) It is seen queued to run again, or, where a worker claimed it again
    // between two of `over`'s looks (16 ms apart once under CI's load), already run
    // again: that second run is then its first counted attempt.
    let given_back = match stale.state {
        TaskState::Queued => 0,
        TaskState::Succeeded => 1,
        other => panic!("neither to run again nor run again ({other:?}): {stale:?}"),
    };
    assert_eq!(
        (stale.attempts, stale.moved_on),
        (given_back, 1),
        "its attempt given back: {stale:?}"
    );
    assert!(
        stale
            .last_error
            .as_ref()
            .is_some_and(|e| e.message.contains("changed after it was read")),
        "refused at staging, not at publication: {stale:?}"
    );
    let published = tasks_of(
        &r,
        photos::kinds::REPROCESS_JOB,
        photos::kinds::REPROCESS,
        photo6,
    )
    .await
    .into_iter()
    .find(|t| t.job_id == with_regions)
    .expect("the re-decision's task");
    assert_eq!(published.state, TaskState::Succeeded, "{published:?}");
    let row = r.photo(photo6).await;
    assert!(
        row.published_at.is_some() && row.failure.is_none(),
        "{row:?}"
    );
    assert_eq!(row.edits_rev, edits6);
    let upload = r.image(&row.upload_key).await;
    let public = r.image(&row.public().unwrap().key).await;
    let (before, after) = (detail(&upload, &region), detail(&public, &region));
    assert!(after < before / 3.0, "the region: {after} vs {before}");

    let row = r.photo(photo7).await;
    assert!(row.published_at.is_none(), "{row:?}");
    assert!(
        row.failure
            .as_deref()
            .is_some_and(|f| f.contains("cancelled")),
        "{row:?}"
    );
    assert_eq!(
        r.engine.job(cancelled).await.unwrap().status(),
        JobStatus::Cancelled
    );

    let row = r.photo(photo8).await;
    assert!(
        row.published_at.is_some() && row.failure.is_none(),
        "the newer run's publication stands: {row:?}"
    );
    assert_eq!(row.variant_version, 2, "{row:?}");
    assert_eq!(
        r.engine.job(older).await.unwrap().status(),
        JobStatus::Cancelled
    );
    assert_eq!(
        r.engine.job(newer).await.unwrap().status(),
        JobStatus::Succeeded
    );

    assert_eq!(failed9.state, TaskState::Failed, "{failed9:?}");
    assert!(failed9.compensation_refused, "{failed9:?}");
    let handlers = tessera_jobs::registry_with(std::sync::Arc::new(
        photos::FaceService::with_models(support::models()),
    ));
    let notices_of = |t: &tessera_core::task::Task, job: &tessera_core::job::Job| {
        handlers.get(&t.kind).unwrap().notices(t, job)
    };
    let job9 = r.engine.job(failed9.job_id).await.unwrap();
    assert!(
        notices_of(&failed9, &job9).is_empty(),
        "a refused failure raises no photo.failed"
    );
    let row = r.photo(photo9).await;
    assert!(
        row.published_at.is_some() && row.failure.is_none(),
        "the newer run's publication stands: {row:?}"
    );
    assert_eq!(row.variant_version, 1, "{row:?}");
    assert_eq!(
        r.engine.job(newer9).await.unwrap().status(),
        JobStatus::Succeeded
    );

    let failed10 = tasks_of(
        &r,
        photos::kinds::REPROCESS_JOB,
        photos::kinds::REPROCESS,
        photo10,
    )
    .await;
    assert_eq!(failed10.len(), 1, "{failed10:?}");
    assert_eq!(failed10[0].state, TaskState::Failed, "{:?}", failed10[0]);
    assert!(!failed10[0].compensation_refused, "{:?}", failed10[0]);
    let job10 = r.engine.job(failed10[0].job_id).await.unwrap();
    let raised = notices_of(&failed10[0], &job10);
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(
        raised[0].kind,
        tessera_core::notify::NoticeType::PhotoFailed,
        "{raised:?}"
    );
    let row = r.photo(photo10).await;
    assert!(row.published_at.is_none(), "{row:?}");
    assert!(
        row.failure
            .as_deref()
            .is_some_and(|f| f.contains("injected failure")),
        "{row:?}"
    );

    let row = r.photo(photo11).await;
    assert!(row.published_at.is_none(), "{row:?}");
    assert!(
        row.failure
            .as_deref()
            .is_some_and(|f| f.contains("cancelled")),
        "withheld with the reason: {row:?}"
    );
    assert_eq!(
        r.engine.job(redecision11).await.unwrap().status(),
        JobStatus::Cancelled
    );
}

/// Wait (at most two minutes) until every job so far has ended, `last` among them, so
/// that a pause point armed next is reached by the task the test starts next.
async fn all_over(r: &support::Rig, last: tessera_core::JobId, before: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let jobs = r
            .engine
            .list_jobs(&tessera_core::TenantId::local(), None, 1000)
            .await
            .unwrap()
            .0;
        let running = jobs.iter().filter(|j| !j.is_over()).count();
        if running == 0 && jobs.iter().any(|j| j.id == last) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{running} jobs still running {before}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The one `task_kind` task of `photo`'s `job_kind` job, once it has ended (at most a
/// minute), or as it is once queued to run again.
async fn over(
    r: &support::Rig,
    job_kind: &str,
    task_kind: &str,
    photo: tessera_core::PhotoId,
) -> tessera_core::task::Task {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let tasks = tasks_of(r, job_kind, task_kind, photo).await;
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        let t = &tasks[0];
        // Held running until now: queued again means it is to run again.
        if t.state.is_terminal() || t.state == TaskState::Queued {
            return t.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task did not end: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
