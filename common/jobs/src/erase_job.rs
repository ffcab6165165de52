//! Erasing a finished job: the files it made (a reconstruction's checkpoints, models and
//! exports), its tasks, its events and its record, so a run made by mistake goes away
//! for good.
//!
//! Only a job that has ended may go: a running task would write into what is being
//! deleted. The job record and its fingerprint go first, in one transaction with an
//! erasure marker and the audit entry: from then on the job is not listed or found, the
//! same request submitted again is a new job, and a crash half-way is finished by the
//! marker's second sweep ([`tessera_core::catalog::erasure`]). A stage-cache entry that
//! named this job finds no checkpoint there any more and the stage runs again.

use tessera_core::audit::{self, Actor};
use tessera_core::catalog::CatalogError;
use tessera_core::catalog::erasure::{self, Erasure};
use tessera_core::ports::state_store::{Condition, StoreError, Write};
use tessera_core::{JobId, Millis, ProjectId, records};
use tessera_engine::{Engine, EngineError};

/// What erasing a job removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JobErased {
    /// Objects deleted.
    pub objects: usize,
    /// Rows deleted (tasks and events).
    pub rows: usize,
}

/// The kinds of job that may be erased: a run, a run cut after a stage (sfmapi's
/// `features`, `matches` and `verify` jobs, which keep their files under the same
/// prefix) and the jobs that refine one.
pub const ERASABLE_KINDS: &[&str] = &[
    crate::reconstruct::KIND,
    "features",
    "matches",
    "verify",
    crate::reconstruct::refine::RELOCALIZE,
    crate::reconstruct::refine::TRIANGULATE,
];

/// What a job's erasure sweeps: its object prefix, its tasks and its events.
fn job_erasure(id: JobId) -> Erasure {
    Erasure {
        target: format!("job/{id}"),
        prefixes: vec![crate::reconstruct::checkpoint::job_prefix(id)],
        partitions: vec![
            ("by_parent".into(), records::job_tasks_partition(id)),
            ("table".into(), records::events_partition(id)),
        ],
        erased_at: Millis::now(),
        swept: false,
    }
}

/// Whether every task of `job` has ended: a cancelled job's running stage goes on to
/// its next checkpoint, and would write into what is being deleted.
fn ended(job: &tessera_core::job::Job) -> bool {
    job.is_over()
}

/// The runs of `project` (every erasable kind), read through the tenant's job list.
pub async fn project_runs(
    engine: &Engine,
    tenant: &tessera_core::TenantId,
    project: ProjectId,
) -> Result<Vec<tessera_core::job::Job>, CatalogError> {
    let mut runs = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = engine
            .list_jobs(tenant, after, 500)
            .await
            .map_err(|e| CatalogError::Unavailable(e.to_string()))?;
        runs.extend(
            page.into_iter().filter(|j| {
                j.project == Some(project) && ERASABLE_KINDS.contains(&j.kind.as_str())
            }),
        );
        match next {
            Some(n) => after = Some(n),
            None => return Ok(runs),
        }
    }
}

/// Erase every run of `project`, so that a project's erasure takes its features,
/// models and exports with it. Nothing is erased while any of them has a stage that has
/// not ended (409 naming it). A run erased meanwhile by someone else is skipped; a
/// request cut short is finished by asking again. Answers how many runs went.
pub async fn erase_project_runs(
    engine: &Engine,
    project: ProjectId,
    actor: &Actor,
) -> Result<usize, CatalogError> {
    let runs = project_runs(engine, &actor.tenant, project).await?;
    if let Some(live) = runs.iter().find(|j| !ended(j)) {
        return Err(CatalogError::Conflict(format!(
            "the run “{}” ({}) has not ended: cancel it, wait until every stage has stopped, then delete the project",
            live.label, live.id
        )));
    }
    let mut erased = 0;
    for run in &runs {
        match erase_job(engine, run.id, actor).await {
            Ok(_) => erased += 1,
            Err(CatalogError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(erased)
}

/// Erase job `id` of `actor`'s tenant, which must have ended.
pub async fn erase_job(
    engine: &Engine,
    id: JobId,
    actor: &Actor,
) -> Result<JobErased, CatalogError> {
    let store = engine.ports().store.as_ref();
    let job = engine.job(id).await.map_err(|e| match e {
        EngineError::NoSuchJob(_) => CatalogError::NotFound(format!("job {id} does not exist")),
        other => CatalogError::Unavailable(other.to_string()),
    })?;
    if job.tenant != actor.tenant {
        return Err(CatalogError::NotFound(format!("job {id} does not exist")));
    }
    // Runs only: a photo job's events and fingerprint are the photo's history, and
    // erasing a photo (or its project) is how that goes.
    if !ERASABLE_KINDS.contains(&job.kind.as_str()) {
        return Err(CatalogError::Invalid(format!(
            "job {id} is a {} job; only reconstructions and their refinements are deleted this way (a photo goes with DELETE /v1/x-tessera/photos/{{id}})",
            job.kind
        )));
    }
    if !ended(&job) {
        return Err(CatalogError::Conflict(format!(
            "job {id} has not ended (a stage may still be stopping after a cancel): cancel it, wait until every stage has stopped, then delete it"
        )));
    }
    let e = job_erasure(id);
    let writes = vec![
        Write::Delete {
            key: records::job_key(id),
            condition: Condition::Rev(job.rev),
        },
        Write::Delete {
            key: records::fingerprint_key(&job.tenant, &job.kind, &job.fingerprint),
            condition: Condition::None,
        },
        erasure::marker(&e),
        audit::entry(
            actor,
            "job.erase",
            e.target.clone(),
            serde_json::json!({ "label": job.label, "kind": job.kind }),
        ),
    ];
    match store.transact(writes).await {
        Ok(()) => {}
        Err(StoreError::Conflict { .. }) => {
            return Err(CatalogError::Conflict(format!(
                "job {id} changed while it was being deleted; nothing was deleted, try again"
            )));
        }
        Err(other) => return Err(other.into()),
    }
    let swept = erasure::sweep(store, engine.ports().objects.as_ref(), &e).await?;
    tracing::info!(job_id = %id, objects = swept.objects, rows = swept.rows, "job erased");
    Ok(JobErased {
        objects: swept.objects,
        rows: swept.rows,
    })
}
