//! Erasing a run: refused while any of its stages runs and for jobs that are not runs;
//! once every stage has ended, its record, tasks, events and fingerprint go, and the same
//! plan submitted again is a new job. Real SQLite; the run is planned and cancelled, not
//! run (nothing here needs COLMAP).

mod support;

use support::{events_of, rig, small_spec};
use tessera_core::TenantId;
use tessera_core::audit::Actor;
use tessera_core::catalog::CatalogError;
use tessera_core::job::CancelMode;
use tessera_jobs::erase_job::erase_job;

fn plan() -> tessera_engine::plan::JobPlan {
    tessera_jobs::reconstruct::plan(&small_spec(), TenantId::local(), None, "a run", 12, 12.0)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_erased_only_once_every_stage_has_ended_and_then_entirely() {
    let r = rig().await;
    let actor = Actor::cli(TenantId::local());
    let job = r.engine.submit(plan()).await.unwrap().job_id;

    let queued = erase_job(&r.engine, job, &actor).await;
    assert!(
        matches!(queued, Err(CatalogError::Conflict(ref m)) if m.contains("has not ended")),
        "{queued:?}"
    );
    assert!(r.engine.job(job).await.is_ok(), "nothing was erased");

    r.engine.cancel(job, CancelMode::Cooperative).await.unwrap();
    assert!(
        events_of(&r.engine, job).await > 0,
        "the cancel is an event"
    );
    let stranger = Actor::cli(TenantId::try_from("someone-else".to_string()).unwrap());
    assert!(matches!(
        erase_job(&r.engine, job, &stranger).await,
        Err(CatalogError::NotFound(_))
    ));

    let erased = erase_job(&r.engine, job, &actor).await.unwrap();
    assert!(erased.rows > 0, "{erased:?}");
    assert!(r.engine.job(job).await.is_err(), "the record is gone");
    assert!(
        r.engine.job_tasks(job).await.unwrap().is_empty(),
        "its tasks"
    );
    assert_eq!(events_of(&r.engine, job).await, 0, "its events");
    let again = r.engine.submit(plan()).await.unwrap().job_id;
    assert_ne!(
        again, job,
        "the same plan is a new job once the old one is erased"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_job_is_not_erased_as_a_run() {
    let r = rig().await;
    let p = r.project(None).await;
    let (_, event) = r.upload(&p, "grace_hopper.jpg").await;
    let job = r.ingest(&p, &event).await;
    r.settle().await;
    let refused = erase_job(&r.engine, job, &Actor::cli(p.tenant.clone())).await;
    assert!(
        matches!(refused, Err(CatalogError::Invalid(_))),
        "{refused:?}"
    );
    assert!(r.engine.job(job).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_runs_go_with_it_once_all_have_ended_and_other_projects_keep_theirs() {
    use tessera_jobs::erase_job::{erase_project_runs, project_runs};
    let r = rig().await;
    let actor = Actor::cli(TenantId::local());
    let mine = r.project(None).await;
    let other =
        tessera_jobs::photos::project::create(r.store(), TenantId::local(), "another", None, 0.35)
            .await
            .unwrap();
    // Each with its own options: the same plan twice would be one job.
    let run_in = |project: tessera_core::ProjectId, label: &str| {
        let mut spec = small_spec();
        spec.project = project.to_string();
        spec.max_features += label.len() as u32;
        tessera_jobs::reconstruct::plan(&spec, TenantId::local(), Some(project), label, 12, 12.0)
            .unwrap()
    };
    let first = r
        .engine
        .submit(run_in(mine.id, "first"))
        .await
        .unwrap()
        .job_id;
    let second = r
        .engine
        .submit(run_in(mine.id, "second run"))
        .await
        .unwrap()
        .job_id;
    let kept = r
        .engine
        .submit(run_in(other.id, "kept"))
        .await
        .unwrap()
        .job_id;
    assert_eq!(
        project_runs(&r.engine, &actor.tenant, mine.id)
            .await
            .unwrap()
            .len(),
        2
    );

    // One run still queued: nothing goes, and the refusal names it.
    r.engine
        .cancel(first, CancelMode::Cooperative)
        .await
        .unwrap();
    let refused = erase_project_runs(&r.engine, mine.id, &actor).await;
    assert!(
        matches!(refused, Err(CatalogError::Conflict(ref m)) if m.contains("second")),
        "{refused:?}"
    );
    assert!(r.engine.job(first).await.is_ok(), "nothing was erased");

    r.engine
        .cancel(second, CancelMode::Cooperative)
        .await
        .unwrap();
    assert_eq!(
        erase_project_runs(&r.engine, mine.id, &actor)
            .await
            .unwrap(),
        2
    );
    for gone in [first, second] {
        assert!(r.engine.job(gone).await.is_err(), "{gone} is erased");
        assert_eq!(events_of(&r.engine, gone).await, 0);
    }
    assert!(
        r.engine.job(kept).await.is_ok(),
        "another project's run stays"
    );
    assert!(
        project_runs(&r.engine, &actor.tenant, mine.id)
            .await
            .unwrap()
            .is_empty()
    );
}
