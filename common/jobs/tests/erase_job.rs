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
