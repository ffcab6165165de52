//! Re-deciding every photo of a project after its subjects or privacy settings changed.
//!
//! The change and the first part of this sweep are committed in one transaction
//! ([`super::project`]), so an opt-out can never be stored without the work that
//! applies it. A part pages through the project's photos from its cursor and submits a
//! `reprocess` job for each photo whose files were decided at an older subject revision
//! (or under older rules), [`BATCH`] photos' jobs a transaction. It does a bounded
//! amount of work — [`PHOTOS_PER_PART`] photos (checked at page boundaries) or
//! [`TIME_PER_PART`] (checked before every batch), whichever comes first — and
//! then hands on: it submits the next part with the cursor where it stopped, as a job
//! of its own, and ends. So a sweep of any size finishes, each run stays far inside
//! its function's timeout (the ingest function's 120 s on AWS), and a part killed at
//! any moment is run again by the engine from its own cursor, never from the first
//! photo. Everything is idempotent — reprocess jobs and parts are keyed by their specs,
//! and a photo already at the revision is skipped — so a re-run repeats at most one
//! part's work and submits nothing twice.

use super::{payload_project, project, reprocess_plan, view};
use async_trait::async_trait;
use std::time::{Duration, Instant};
use tessera_core::domain::SweepStall;
use tessera_core::event::Phase;
use tessera_core::notify::{Notice, NoticeType};
use tessera_core::ports::state_store::{Condition, Index, Query, Write};
use tessera_core::task::Task;
use tessera_core::{ProjectId, TenantId, records};
use tessera_engine::{JobPlan, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan};

/// Photos read per page.
pub const PAGE: usize = 100;
/// Photos whose re-blurs are submitted in one transaction (a reprocess job is four
/// writes: its fingerprint, the job and two tasks; 20 of them and the fence are 81 of a
/// transaction's 100). One at a time, each was a read and three or four sequential
/// writes and a seal, and a part spent nearly all of its budget submitting.
pub const BATCH: usize = 20;
/// Most photos one part reads before it hands on.
pub const PHOTOS_PER_PART: u64 = 1_000;
/// Longest one part runs before it hands on, checked before each batch: a twelfth of the
/// ingest function's 120 s timeout. A part ends within the budget plus what follows the
/// last check — one batch's submission, the page's progress and checkpoint, the hand-on —
/// each a few sequential writes. The load rehearsal saw one page of 100 slow submissions outlast
/// the timeout when the time was checked between pages, and a part run 50 s with a 30 s
/// budget. With 10 s and with 5 s its longest parts ran 34.7 s and 34.1 s: that was one
/// submission taking 8 s and the hand-on after it, while a burst queued on its one shared
/// store (the part's recorded `seconds_submitting`), not the budget, and 5 s only doubled
/// the parts (16 → 31) and their writes. More parts cost a few writes each.
pub const TIME_PER_PART: Duration = Duration::from_secs(10);

/// The sweep for `project` at `subjects_rev` (one job per revision): its first part.
pub fn plan(tenant: TenantId, project: ProjectId, subjects_rev: u64) -> JobPlan {
    part_plan(tenant, project, subjects_rev, None, 0)
}

/// Part `part` of the sweep, starting after `cursor` (`None`: the first photo).
pub fn part_plan(
    tenant: TenantId,
    project: ProjectId,
    subjects_rev: u64,
    cursor: Option<String>,
    part: u32,
) -> JobPlan {
    let spec = part_spec(project, subjects_rev, cursor.is_some().then_some(part));
    let mut payload = spec.clone();
    if let Some(c) = &cursor {
        payload["after"] = c.clone().into();
    }
    JobPlan {
        tenant,
        project: Some(project),
        kind: super::kinds::REBLUR_JOB.into(),
        label: if part == 0 {
            format!("re-decide every photo of {project} at subjects rev {subjects_rev}")
        } else {
            format!(
                "re-decide the photos of {project} at subjects rev {subjects_rev} (part {})",
                part + 1
            )
        },
        spec,
        priority: 0,
        tasks: vec![TaskPlan::new("sweep", super::kinds::REBLUR, payload)],
    }
}

/// The spec of the sweep's part `part` (`None`: the first, submitted with the change).
/// It names the part, not its cursor: where a part hands on depends on timing, so a part
/// retried after it had already handed on must find the follow-up it submitted then
/// (its job is keyed by this spec), not start a second chain.
fn part_spec(project: ProjectId, subjects_rev: u64, part: Option<u32>) -> serde_json::Value {
    let mut spec = serde_json::json!({ "project": project, "subjects_rev": subjects_rev });
    if let Some(part) = part {
        spec["part"] = part.into();
    }
    spec
}

/// What a part's task payload says: the sweep's subject revision, which part this is and
/// where it starts.
struct PartPayload {
    project: ProjectId,
    subjects_rev: u64,
    part: u32,
    after: Option<String>,
}

impl PartPayload {
    fn of(task: &Task) -> Result<Self, TaskError> {
        let payload = &task.payload;
        Ok(PartPayload {
            project: payload_project(task)?,
            subjects_rev: payload
                .get("subjects_rev")
                .and_then(|r| r.as_u64())
                .ok_or_else(|| TaskError::poison("reblur payload has no subjects_rev"))?,
            part: payload.get("part").and_then(|p| p.as_u64()).unwrap_or(0) as u32,
            after: payload
                .get("after")
                .and_then(|a| a.as_str())
                .map(str::to_string),
        })
    }
}

/// The sweep's handler.
pub struct Sweep {
    /// How long one part runs before it hands on ([`TIME_PER_PART`]).
    pub time_per_part: Duration,
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            time_per_part: TIME_PER_PART,
        }
    }
}

/// Record on the project that the sweep of `task` ended without finishing: what a part
/// that ends cancelled, failed or dead commits with its end. Only while the project is
/// still at the part's subject revision (a later change's sweep covers every photo), and
/// only if the part had not handed on yet: once its follow-up part is submitted, that
/// part carries the sweep on, and a stall naming this one would stand for ever. Either
/// condition false, the engine ends the part without the record.
fn stalled(task: &Task) -> Vec<Write> {
    let Ok(PartPayload {
        project,
        subjects_rev: rev,
        part,
        after,
    }) = PartPayload::of(task)
    else {
        return Vec::new();
    };
    let stall = SweepStall {
        subjects_rev: rev,
        job_id: task.job_id.to_string(),
        reason: task.failure_message(&format!("task `{}` ended without success", task.name)),
        at: task.finished_at.unwrap_or_else(tessera_core::Millis::now),
        after,
    };
    let mut writes = vec![Write::Set {
        key: records::project_key(project),
        fields: vec![(
            "sweep_stalled".into(),
            serde_json::to_value(&stall).expect("a stall serializes"),
        )],
        condition: Condition::field_eq("subjects_rev", rev),
    }];
    if let Some(tenant) = &task.tenant {
        let kind = super::kinds::REBLUR_JOB;
        let next = part_spec(project, rev, Some(part + 1));
        writes.push(Write::Check {
            key: records::fingerprint_key(
                tenant,
                kind,
                &tessera_core::spec::fingerprint(kind, &next),
            ),
            condition: Condition::Absent,
        });
    }
    writes
}

/// Clear the project's stall of the sweep at `rev`: a part of it runs again (the job was
/// resumed), so the photos it has not reached are being re-decided after all. Fenced by
/// the part's lease, so a run that lost its part to a cancellation (which recorded the
/// stall) cannot clear it. A clear that fails is logged, not the part's failure: it
/// changes only what is reported, and the part's own success clears nothing else.
async fn clear_stall(
    ctx: &TaskContext,
    p: &tessera_core::domain::Project,
    rev: u64,
) -> Result<(), TaskError> {
    if p.stalled_sweep().is_none() {
        return Ok(());
    }
    let clear = Write::Set {
        key: records::project_key(p.id),
        fields: vec![("sweep_stalled".into(), serde_json::Value::Null)],
        condition: Condition::field_eq("subjects_rev", rev),
    };
    match ctx.try_commit(vec![clear]).await {
        // Cleared, or a later change moved the revision (and cleared it itself).
        Ok(_) => Ok(()),
        Err(e) if e.class == tessera_core::error::ErrorClass::Transient => {
            tracing::warn!(project = %p.id, subjects_rev = rev, error = %e, "the sweep's stall was not cleared; it reads stalled until the next part or change");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[async_trait]
impl TaskHandler for Sweep {
    fn raises_notices(&self) -> bool {
        true
    }

    /// A part cancelled stops the chain of parts: the photos after its cursor are
    /// withheld (decided before the change) and nobody re-decides them.
    fn compensates_cancellation(&self) -> bool {
        true
    }

    /// A part that ends without success (cancelled, failed, dead) says so on the
    /// project ([`stalled`]), which is what the photos it did not reach then report.
    fn compensate(&self, task: &Task) -> Vec<Write> {
        stalled(task)
    }

    /// `reblur.finished` from the last part (no follow-up, not superseded): every photo
    /// of the project has had its re-decision queued against the new subjects; each
    /// photo's own `photo.published` says when it is served again.
    fn notices(
        &self,
        task: &tessera_core::task::Task,
        job: &tessera_core::job::Job,
    ) -> Vec<Notice> {
        let Some(r) = task.result.as_ref() else {
            return Vec::new();
        };
        let last = task.state == tessera_core::task::TaskState::Succeeded
            && r.get("follow_up").is_some_and(|f| f.is_null())
            && r.get("photos").is_some();
        let Some(project) = job.project.filter(|_| last) else {
            return Vec::new();
        };
        let rev = r
            .get("subjects_rev")
            .and_then(|v| v.as_u64())
            .unwrap_or_default();
        vec![Notice::new(
            NoticeType::ReblurFinished,
            &format!("reblur/{project}/{rev}"),
            job.tenant.clone(),
            Some(project),
            task.finished_at.unwrap_or_else(tessera_core::Millis::now),
            serde_json::json!({
                "project_id": project, "subjects_rev": rev, "parts": r.get("part").and_then(|p| p.as_u64()).map(|p| p + 1),
            }),
        )]
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let PartPayload {
            project: project_id,
            subjects_rev: target,
            part,
            after: start,
        } = PartPayload::of(ctx.task())?;
        let store = ctx.ports().store.as_ref();
        let p = project::load(store, project_id)
            .await
            .map_err(TaskError::from_classified)?;
        if p.subjects_rev > target {
            // A later change committed its own sweep, which covers every photo.
            tracing::info!(project = %project_id, target, now = p.subjects_rev, part, "superseded by a later subject change");
            return Ok(TaskOutput::result(serde_json::json!({
                "project": project_id, "superseded_by": p.subjects_rev, "part": part,
            })));
        }
        clear_stall(ctx, &p, target).await?;
        if part == 0 {
            // The change that started this sweep deleted the subject sets of older views
            // after it committed; this is the durable second try (they may hold the
            // embeddings of someone removed).
            let objects = ctx.ports().objects.as_ref();
            let current = view::read(store, objects, project_id, 0)
                .await
                .map_err(TaskError::from_classified)?;
            let gone =
                view::retire_subject_sets(objects, project_id, current.subjects.as_deref()).await?;
            if gone > 0 {
                tracing::info!(project = %project_id, gone, "older subject sets deleted");
            }
        }
        let started = ctx.phase_started(Phase::Publish).await?;
        let clock = Instant::now();
        let (mut seen, mut submitted) = (0u64, 0u64);
        let mut q = Query::partition(
            Index::ByParent,
            records::project_photos_partition(project_id),
            PAGE,
        );
        q.after = start;
        let mut follow_up = None;
        // Where the next part starts, once this one has done its share: the sort key of
        // the last photo it handled (the time is checked before every batch, since
        // one page of slow submissions alone could outlast the function), or the end
        // of the last page it read.
        let mut hand_on: Option<String> = None;
        let mut last: Option<String> = None;
        // Where a part's time goes (in its result), for the load rehearsal's report: reading
        // pages, submitting re-blurs, and the rest (progress, checkpoints, the hand-on).
        let (mut reading, mut submitting) = (Duration::ZERO, Duration::ZERO);
        // The slowest of its sequential writes (a submission, progress, a checkpoint, the
        // hand-on): what is done after the budget runs out is a few of them, so a part's
        // length is bounded by its budget, its reads and a few of its own slowest writes,
        // however slow the store is at the moment (the load rehearsal checks that bound).
        let mut slowest_write = Duration::ZERO;
        'pages: loop {
            let read = Instant::now();
            let page = store.query(&q).await?;
            reading += read.elapsed();
            // The page in batches of [`BATCH`] photos, each batch's re-blurs submitted in
            // one transaction; the time is checked before every batch.
            for chunk in page.items.chunks(BATCH) {
                if let Some(after) = &last
                    && clock.elapsed() >= self.time_per_part
                {
                    hand_on = Some(after.clone());
                    break 'pages;
                }
                let mut plans = Vec::new();
                for item in chunk {
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
                    if photo.needs_reprocess(target) {
                        plans.push(reprocess_plan(
                            p.tenant.clone(),
                            project_id,
                            photo.id,
                            target,
                            photo.edits_rev,
                        ));
                    }
                }
                if !plans.is_empty() {
                    let submit = Instant::now();
                    submitted += ctx.submit_all(plans).await?.len() as u64;
                    submitting += submit.elapsed();
                    slowest_write = slowest_write.max(submit.elapsed());
                }
                last = chunk
                    .last()
                    .and_then(|i| i.by_parent.as_ref())
                    .map(|k| k.sk.clone());
            }
            let write = Instant::now();
            ctx.progress(Phase::Publish, seen, None, None).await?;
            ctx.checkpoint().await?;
            slowest_write = slowest_write.max(write.elapsed() / 2);
            let Some(next) = page.next else { break };
            if seen >= PHOTOS_PER_PART || clock.elapsed() >= self.time_per_part {
                hand_on = Some(next);
                break;
            }
            q.after = Some(next);
        }
        if let Some(cursor) = hand_on {
            // Hand on: the next part starts where this one stopped.
            let write = Instant::now();
            ctx.progress(Phase::Publish, seen, None, None).await?;
            slowest_write = slowest_write.max(write.elapsed());
            let write = Instant::now();
            let next_part = ctx
                .submit(part_plan(
                    p.tenant.clone(),
                    project_id,
                    target,
                    Some(cursor),
                    part + 1,
                ))
                .await?;
            slowest_write = slowest_write.max(write.elapsed());
            follow_up = Some(next_part.job_id);
        }
        ctx.phase_completed(Phase::Publish, started).await?;
        tracing::info!(project = %project_id, subjects_rev = target, part, photos = seen, reprocess = submitted, follow_up = ?follow_up, seconds = clock.elapsed().as_secs_f64(), "sweep part done");
        Ok(TaskOutput::result(serde_json::json!({
            "project": project_id, "subjects_rev": target, "part": part, "photos": seen,
            "reprocess_jobs": submitted, "follow_up": follow_up,
            "seconds": clock.elapsed().as_secs_f64(),
            "seconds_reading": reading.as_secs_f64(),
            "seconds_submitting": submitting.as_secs_f64(),
            "budget_seconds": self.time_per_part.as_secs_f64(),
            "slowest_write_seconds": slowest_write.as_secs_f64(),
        })))
    }
}
