//! Erasing a job: refused while it runs; once it has ended, its record, tasks, events and
//! fingerprint go, and the same plan submitted again is a new job. Real SQLite, the real
//! photo jobs.

mod support;

use support::rig;
use tessera_core::audit::Actor;
use tessera_core::catalog::CatalogError;
use tessera_jobs::erase_job::erase_job;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_erased_only_once_it_has_ended_and_then_entirely() {
    let r = rig().await;
    let p = r.project(None).await;
    let (_, event) = r.upload(&p, "grace_hopper.jpg").await;
    let job = r.ingest(&p, &event).await;
    let actor = Actor::cli(p.tenant.clone());

    let running = erase_job(&r.engine, job, &actor).await;
    assert!(
        matches!(running, Err(CatalogError::Conflict(ref m)) if m.contains("cancel it first")),
        "{running:?}"
    );
    assert!(r.engine.job(job).await.is_ok(), "nothing was erased");

    r.settle().await;
    assert!(!r.engine.job_tasks(job).await.unwrap().is_empty());
    assert!(
        !r.engine
            .ports()
            .events
            .read_after(job, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let stranger =
        Actor::cli(tessera_core::TenantId::try_from("someone-else".to_string()).unwrap());
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
    assert!(
        r.engine
            .ports()
            .events
            .read_after(job, 0, 10)
            .await
            .unwrap()
            .is_empty(),
        "its events"
    );
    let again = r.ingest(&p, &event).await;
    assert_ne!(
        again, job,
        "the same plan is a new job once the old one is erased"
    );
}
