//! Re-deciding every photo of a project after its subjects or privacy settings changed.
//!
//! The change and this job are committed in one transaction ([`super::project`]), so an
//! opt-out can never be stored without the work that applies it. The job's one task
//! pages through the project's photos and submits a `reprocess` job for each photo
//! whose files were decided at an older subject revision (or under older rules).
//! Everything it does is idempotent — reprocess jobs are keyed by photo and revision,
//! and a photo already at the revision is skipped — so a sweep killed at any moment
//! is simply run again by the engine from the first page.

use super::{payload_project, project, reprocess_plan};
use async_trait::async_trait;
use tessera_core::event::Phase;
use tessera_core::ports::state_store::{Index, Query};
use tessera_core::{ProjectId, TenantId, records};
use tessera_engine::{JobPlan, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan};

/// Photos read per page.
pub const PAGE: usize = 100;

/// The sweep for `project` at `subjects_rev` (one job per revision).
pub fn plan(tenant: TenantId, project: ProjectId, subjects_rev: u64) -> JobPlan {
    let spec = serde_json::json!({ "project": project, "subjects_rev": subjects_rev });
    JobPlan {
        tenant,
        project: Some(project),
        kind: super::kinds::REBLUR_JOB.into(),
        label: format!("re-decide every photo of {project} at subjects rev {subjects_rev}"),
        spec: spec.clone(),
        priority: 0,
        tasks: vec![TaskPlan::new("sweep", super::kinds::REBLUR, spec)],
    }
}

/// The sweep's handler.
pub struct Sweep;

#[async_trait]
impl TaskHandler for Sweep {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let project_id = payload_project(ctx.task())?;
        let target = ctx
            .task()
            .payload
            .get("subjects_rev")
            .and_then(|r| r.as_u64())
            .ok_or_else(|| TaskError::poison("reblur payload has no subjects_rev"))?;
        let store = ctx.ports().store.as_ref();
        let p = project::load(store, project_id)
            .await
            .map_err(TaskError::from_classified)?;
        if p.subjects_rev > target {
            // A later change committed its own sweep, which covers every photo.
            tracing::info!(project = %project_id, target, now = p.subjects_rev, "superseded by a later subject change");
            return Ok(TaskOutput::result(serde_json::json!({
                "project": project_id, "superseded_by": p.subjects_rev,
            })));
        }
        let started = ctx.phase_started(Phase::Publish).await?;
        let (mut seen, mut submitted) = (0u64, 0u64);
        let mut q = Query::partition(
            Index::ByParent,
            records::project_photos_partition(project_id),
            PAGE,
        );
        loop {
            let page = store.query(&q).await?;
            for item in &page.items {
                seen += 1;
                // One unreadable row must not stop every other photo's re-blur.
                let photo: tessera_core::photo::Photo = match records::decode(item) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!(project = %project_id, error = %e, "photo row unreadable; skipped by the sweep");
                        ctx.emit(tessera_core::event::EventKind::Warning {
                            message: format!("photo row skipped: {e}"),
                        })
                        .await?;
                        continue;
                    }
                };
                if !photo.needs_reprocess(target) {
                    continue;
                }
                ctx.submit(reprocess_plan(
                    p.tenant.clone(),
                    project_id,
                    photo.id,
                    target,
                    photo.edits_rev,
                ))
                .await?;
                submitted += 1;
            }
            ctx.progress(Phase::Publish, seen, None, None).await?;
            ctx.checkpoint().await?;
            match page.next {
                Some(c) => q.after = Some(c),
                None => break,
            }
        }
        ctx.phase_completed(Phase::Publish, started).await?;
        tracing::info!(project = %project_id, subjects_rev = target, photos = seen, reprocess = submitted, "sweep done");
        Ok(TaskOutput::result(serde_json::json!({
            "project": project_id, "subjects_rev": target, "photos": seen, "reprocess_jobs": submitted,
        })))
    }
}
