//! Reading jobs and tasks, and the people's levers: cancel (cooperative or forced) and
//! resume.

use crate::lifecycle;
use crate::{Engine, EngineError};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Duration;
use tessera_core::event::EventKind;
use tessera_core::job::{CancelMode, CancelRequest, Job};
use tessera_core::ports::state_store::{Condition, Index, Query, StoreError, Write};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};
use tessera_core::{JobId, Millis, TaskId, TenantId};

/// What a cancel did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CancelReport {
    /// Tasks cancelled by this call.
    pub cancelled: usize,
    /// Tasks still running that will stop at their next phase boundary.
    pub stopping: usize,
}

/// What a resume did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResumeReport {
    /// Tasks put back in line.
    pub requeued: usize,
}

impl Engine {
    /// A job by id.
    pub async fn job(&self, id: JobId) -> Result<Job, EngineError> {
        match self.ports.store.get(&records::job_key(id)).await? {
            Some(item) => Ok(records::job_from(&item)?),
            None => Err(EngineError::NoSuchJob(id)),
        }
    }

    /// A task by id, as stored now.
    pub async fn task(&self, id: TaskId) -> Result<Task, EngineError> {
        match self.ports.store.get(&records::task_key(id)).await? {
            Some(item) => Ok(records::task_from(&item)?),
            None => Err(EngineError::NoSuchTask(id)),
        }
    }

    /// A page of a tenant's jobs, oldest first; pass the cursor back for the next page.
    ///
    /// The listing is spread over [`records::TENANT_JOB_SHARDS`] partitions (and the
    /// unsharded one of older entries), all keyed by job id: each is read from the
    /// cursor for up to `limit` entries and the pages are merged in id order, so the
    /// cursor (the last id returned) means the same in every partition. A partition
    /// that has more than it returned (a short page: entries whose records were gone,
    /// or a store's own page cap) bounds the merge: nothing past where it stopped is
    /// returned before what it still holds, so no job is skipped.
    pub async fn list_jobs(
        &self,
        tenant: &TenantId,
        after: Option<String>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>), EngineError> {
        let limit = limit.max(1);
        let mut jobs = std::collections::BTreeMap::new();
        let mut bound: Option<String> = None;
        for partition in records::tenant_jobs_partitions(tenant) {
            let mut q = Query::partition(Index::ByParent, partition, limit);
            q.after = after.clone();
            let page = self.ports.store.query(&q).await?;
            if let Some(n) = page.next {
                bound = Some(match bound {
                    Some(b) if b <= n => b,
                    _ => n,
                });
            }
            for item in &page.items {
                let job = records::job_from(item)?;
                jobs.insert(job.id.to_string(), job);
            }
        }
        if let Some(b) = &bound {
            jobs.retain(|id, _| id <= b);
        }
        let more = bound.is_some() || jobs.len() > limit;
        let jobs: Vec<Job> = jobs.into_values().take(limit).collect();
        let next = more
            .then(|| jobs.last().map(|j| j.id.to_string()).or(bound))
            .flatten();
        Ok((jobs, next))
    }

    /// Whether every job of `tenant` has ended, told apart from a moment that only looks
    /// so. [`Engine::list_jobs`] is no snapshot: it reads its shards one after another,
    /// so a job a running task submits between two reads is missed while that task's own
    /// job, read later, is already over. `seen` carries the previous call's job ids: the
    /// answer is `true` only when two calls in a row, the second begun after the first
    /// ended, list the same jobs, all over. A job created during the second call was
    /// created by a task of a job that was running then, and so not over in the first.
    /// Call it in a loop, keeping `seen`, until it answers `true`.
    pub async fn all_jobs_over(
        &self,
        tenant: &TenantId,
        seen: &mut Option<Vec<JobId>>,
    ) -> Result<bool, EngineError> {
        let mut ids = Vec::new();
        let mut over = true;
        let mut after = None;
        loop {
            let (page, next) = self.list_jobs(tenant, after, 500).await?;
            over &= page.iter().all(Job::is_over);
            ids.extend(page.iter().map(|j| j.id));
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        if !over {
            *seen = None;
            return Ok(false);
        }
        let same = seen.as_ref() == Some(&ids);
        *seen = Some(ids);
        Ok(same)
    }

    /// Every task of a job (read a page at a time).
    pub async fn job_tasks(&self, id: JobId) -> Result<Vec<Task>, EngineError> {
        let mut q = Query::partition(Index::ByParent, records::job_tasks_partition(id), 500);
        let mut out = Vec::new();
        loop {
            let page = self.ports.store.query(&q).await?;
            for item in &page.items {
                out.push(records::task_from(item)?);
            }
            match page.next {
                Some(c) => q.after = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// Give a job another label (what people call the run; nothing else changes: not
    /// its fingerprint, not its tasks). 1–200 characters, no control characters.
    pub async fn relabel(&self, id: JobId, label: &str) -> Result<Job, EngineError> {
        let label = label.trim();
        if label.is_empty() || label.chars().count() > 200 || label.chars().any(char::is_control) {
            return Err(EngineError::Refused(
                "label: give 1 to 200 characters, without line breaks or control characters".into(),
            ));
        }
        loop {
            let mut job = self.job(id).await?;
            if job.label == label {
                return Ok(job);
            }
            job.label = label.to_string();
            match self
                .ports
                .store
                .put(records::job_item(&job), Condition::Rev(job.rev))
                .await
            {
                Ok(()) => return self.job(id).await,
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Cancel a job. Waiting and queued tasks are cancelled now. Running tasks stop at
    /// their next checkpoint (cooperative) or lose their lease now, which kills their
    /// subprocesses (force).
    pub async fn cancel(&self, id: JobId, mode: CancelMode) -> Result<CancelReport, EngineError> {
        loop {
            let mut job = self.job(id).await?;
            if job
                .cancel
                .as_ref()
                .is_some_and(|c| c.mode == CancelMode::Force || mode == CancelMode::Cooperative)
            {
                break;
            }
            job.cancel = Some(CancelRequest {
                mode,
                at: Millis::now(),
            });
            match self
                .ports
                .store
                .put(records::job_item(&job), Condition::Rev(job.rev))
                .await
            {
                Ok(()) => break,
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let mut report = CancelReport::default();
        for mut task in self.job_tasks(id).await? {
            loop {
                let revoke = match task.state {
                    TaskState::Waiting | TaskState::Queued => true,
                    TaskState::Running => mode == CancelMode::Force,
                    _ => false,
                };
                if !revoke {
                    if task.state == TaskState::Running {
                        report.stopping += 1;
                    }
                    break;
                }
                let why = match mode {
                    CancelMode::Force => "job cancelled (forced)",
                    CancelMode::Cooperative => "job cancelled",
                };
                let next = lifecycle::cancelled(&task, Millis::now(), why);
                let compensations = match self.registry.get(&task.kind) {
                    Some(h) if h.compensates_cancellation() => h.compensate(&next),
                    _ => Vec::new(),
                };
                match self
                    .commit_compensated(next, Condition::Rev(task.rev), compensations, Vec::new())
                    .await?
                {
                    Ok(()) => {
                        report.cancelled += 1;
                        break;
                    }
                    Err(_) => {
                        task = self.task(task.id).await?;
                    }
                }
            }
        }
        let message = format!(
            "job cancelled ({mode:?}): {} tasks cancelled, {} stopping at their next checkpoint",
            report.cancelled, report.stopping
        );
        self.ports
            .events
            .append(id, None, EventKind::Warning { message }, None)
            .await?;
        tracing::info!(job_id = %id, ?mode, cancelled = report.cancelled, stopping = report.stopping, "job cancelled");
        Ok(report)
    }

    /// Put a job's failed, dead and cancelled tasks back in line (attempts start over,
    /// epochs keep growing so old workers stay fenced) and clear its cancel request.
    pub async fn resume(&self, id: JobId) -> Result<ResumeReport, EngineError> {
        loop {
            let mut job = self.job(id).await?;
            if job.cancel.is_none() {
                break;
            }
            job.cancel = None;
            match self
                .ports
                .store
                .put(records::job_item(&job), Condition::Rev(job.rev))
                .await
            {
                Ok(()) => break,
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let again: Vec<Task> = self
            .job_tasks(id)
            .await?
            .into_iter()
            .filter(|t| {
                matches!(
                    t.state,
                    TaskState::Failed | TaskState::Dead | TaskState::Cancelled
                )
            })
            .collect();
        let report = self.requeue(id, again, &BTreeSet::new()).await?;
        if report.requeued > 0 {
            self.ports
                .events
                .append(
                    id,
                    None,
                    EventKind::LogLine {
                        line: format!("job resumed: {} tasks requeued", report.requeued),
                    },
                    None,
                )
                .await?;
        }
        tracing::info!(job_id = %id, requeued = report.requeued, "job resumed");
        Ok(report)
    }

    /// Run finished tasks of a job again — succeeded ones too, for when a stage's stored
    /// output turned out to be damaged. A task whose dependency is also being re-run
    /// waits for it again.
    pub async fn rerun(&self, id: JobId, tasks: &[TaskId]) -> Result<ResumeReport, EngineError> {
        let set: BTreeSet<TaskId> = tasks.iter().copied().collect();
        let chosen: Vec<Task> = self
            .job_tasks(id)
            .await?
            .into_iter()
            .filter(|t| set.contains(&t.id))
            .collect();
        let report = self.requeue(id, chosen, &set).await?;
        self.ports
            .events
            .append(
                id,
                None,
                EventKind::LogLine {
                    line: format!("{} tasks will run again", report.requeued),
                },
                None,
            )
            .await?;
        Ok(report)
    }

    async fn requeue(
        &self,
        id: JobId,
        tasks: Vec<Task>,
        rerun: &BTreeSet<TaskId>,
    ) -> Result<ResumeReport, EngineError> {
        let mut report = ResumeReport::default();
        for mut task in tasks {
            while let Some(counter) = lifecycle::job_counter(task.state) {
                let mut next = lifecycle::resumed(&task, Millis::now());
                next.deps_pending
                    .extend(task.depends_on.iter().filter(|d| rerun.contains(d)));
                if !next.deps_pending.is_empty() {
                    next.state = TaskState::Waiting;
                }
                let writes = vec![
                    Write::Put {
                        item: records::task_item(&next),
                        condition: Condition::Rev(task.rev),
                    },
                    Write::Add {
                        key: records::job_key(id),
                        deltas: vec![(counter.to_string(), -1), ("requeued".to_string(), 1)],
                    },
                ];
                match self.ports.store.transact(writes).await {
                    Ok(()) => {
                        report.requeued += 1;
                        if next.state == TaskState::Queued {
                            self.offer(&next, Duration::ZERO).await?;
                        }
                        break;
                    }
                    Err(StoreError::Conflict { .. }) => {
                        task = self.task(task.id).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(report)
    }
}
