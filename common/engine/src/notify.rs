//! Raising notices: turning the end of a task (and of its job) into webhook deliveries.
//!
//! A task whose end may be news (its tenant has a webhook, and it may have ended its
//! job, or its handler says what it did) is committed with `notify_pending` set, in the
//! same transaction as its terminal state. The engine then raises the notices and
//! clears the flag in one transaction with the deliveries it creates; a worker that
//! dies in between leaves the task in the `advance` due index, and the reaper raises
//! them. With a notice bus (EventBridge on AWS), every notice is published there too,
//! whether or not the tenant has a webhook: inline, or by a durable job of its own when
//! the bus fails. Each delivery is a sealed engine job keyed by a fingerprint of
//! (webhook, notice id), so raising the same notice twice (a repeated raise, two failed
//! tasks of one job) creates one delivery.

use crate::{Engine, EngineError};
use tessera_core::catalog::CatalogError;
use tessera_core::catalog::webhooks::{self, Delivery};
use tessera_core::job::{Job, JobStatus};
use tessera_core::notify::{
    DELIVERY_JOB, DELIVERY_TASK, Notice, NoticeType, PUBLISH_JOB, PUBLISH_TASK, Subscription,
};
use tessera_core::ports::NoticeBusError;
use tessera_core::ports::state_store::{Condition, MAX_TRANSACTION_ITEMS, StoreError, Write};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};
use tessera_core::{Millis, TenantId};

/// Writes one delivery takes: its fingerprint, job and task, and its delivery record.
const DELIVERY_WRITES: usize = 4;

/// How long a process trusts its read of a tenant's webhooks. Every task end that may
/// be news reads them: uncached, a burst of one tenant's photos read the one partition
/// `TENANT#<t>#WEBHOOKS` at the burst's rate (the load rehearsal measured a third of a
/// partition's read capacity at the extrapolated peak). Cached, a process reads it at
/// most once per this period, so a webhook made on another process receives notices
/// from at most this long after it was made (at once in the process that made it).
pub const WEBHOOK_CACHE: std::time::Duration = std::time::Duration::from_secs(10);

/// When a tenant's webhooks were read, and what they were.
type CachedWebhooks = (std::time::Instant, std::sync::Arc<Vec<Subscription>>);

/// A process's recent reads of tenants' webhooks.
#[derive(Default, Clone)]
pub(crate) struct WebhookCache(
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<TenantId, CachedWebhooks>>>,
);

fn catalog(e: CatalogError) -> EngineError {
    match e {
        CatalogError::Store(e) => EngineError::Store(e),
        other => EngineError::Refused(other.to_string()),
    }
}

/// The job notice of `job` if it has ended: succeeded, failed or cancelled.
pub fn job_notice(job: &Job, ended: &Task) -> Option<Notice> {
    let kind = match job.status() {
        JobStatus::Succeeded => NoticeType::JobSucceeded,
        JobStatus::Failed => NoticeType::JobFailed,
        JobStatus::Cancelled => NoticeType::JobCancelled,
        JobStatus::Queued | JobStatus::Running => return None,
    };
    let reason = (ended.state != TaskState::Succeeded)
        .then(|| ended.last_error.as_ref().map(|e| e.message.clone()))
        .flatten();
    Some(Notice::new(
        kind,
        // One notice per time the job ends: a resume or a rerun makes the next end new.
        &format!("job/{}/{}", job.id, job.counters.requeued),
        job.tenant.clone(),
        job.project,
        ended.finished_at.unwrap_or_else(Millis::now),
        serde_json::json!({
            "job_id": job.id,
            "kind": job.kind,
            "label": job.label,
            "status": job.status(),
            "task": ended.name,
            "reason": reason,
        }),
    ))
}

impl Engine {
    /// Whether the end of `task` should be looked at for notices: its tenant has a
    /// webhook and the task may have ended its job (it failed, or it is a sink) or its
    /// handler raises notices of its own. One query of the tenant's webhooks; nothing
    /// is written for a tenant without any.
    pub(crate) async fn may_notify(&self, task: &Task) -> Result<bool, EngineError> {
        // Telling of a notice is no news itself.
        if task.kind == DELIVERY_TASK || task.kind == PUBLISH_TASK {
            return Ok(false);
        }
        let Some(tenant) = &task.tenant else {
            return Ok(false);
        };
        let may_end_job = task.state != TaskState::Succeeded || task.dependents.is_empty();
        let own = self
            .registry
            .get(&task.kind)
            .is_some_and(|h| h.raises_notices());
        if !may_end_job && !own {
            return Ok(false);
        }
        Ok(self.bus.is_some() || !self.webhooks(tenant).await?.is_empty())
    }

    async fn webhooks(
        &self,
        tenant: &TenantId,
    ) -> Result<std::sync::Arc<Vec<Subscription>>, EngineError> {
        {
            let cache = self.webhooks.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, subs)) = cache.get(tenant)
                && at.elapsed() < WEBHOOK_CACHE
            {
                return Ok(subs.clone());
            }
        }
        let subs = std::sync::Arc::new(
            webhooks::list(self.ports.store.as_ref(), tenant)
                .await
                .map_err(catalog)?,
        );
        self.webhooks
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tenant.clone(), (std::time::Instant::now(), subs.clone()));
        Ok(subs)
    }

    /// Forget this process's read of `tenant`'s webhooks (one was just made or deleted
    /// here), so its notices go to the new set at once.
    pub fn forget_webhooks(&self, tenant: &TenantId) {
        self.webhooks
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
    }

    /// Raise the notices of ended task `task` (its job's, if the job has ended, and its
    /// handler's) and clear its `notify_pending`. Safe to repeat.
    pub(crate) async fn raise_ended(&self, task: &Task) -> Result<(), EngineError> {
        let job = self.job(task.job_id).await?;
        let mut notices: Vec<Notice> = job_notice(&job, task).into_iter().collect();
        if let Some(h) = self.registry.get(&task.kind) {
            notices.extend(h.notices(task, &job));
        }
        self.publish_or_queue(&notices).await?;
        let mut cleared = task.clone();
        cleared.notify_pending = false;
        let clear = Write::Put {
            item: records::task_item(&cleared),
            condition: Condition::Rev(task.rev),
        };
        match self.raise_with(&notices, Some(clear)).await {
            Ok(n) => {
                tracing::info!(task_id = %task.id, job_id = %task.job_id, notices = notices.len(), deliveries = n, "notices raised");
                Ok(())
            }
            Err(EngineError::Store(StoreError::Conflict { .. })) => {
                let now = self.task(task.id).await?;
                if !now.state.is_terminal() {
                    // Resumed meanwhile: the end still happened, and is told (published
                    // to the bus already).
                    self.raise_with(&notices, None).await?;
                } else if now.notify_pending {
                    // Written meanwhile (an advance chunk): raise against this revision.
                    Box::pin(self.raise_ended(&now)).await?;
                }
                // Otherwise another raise cleared it first.
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Queue one delivery of each of `notices` to every webhook of its tenant that
    /// wants it. Returns how many deliveries were created (those raised before are not
    /// created again).
    pub async fn raise(&self, notices: &[Notice]) -> Result<usize, EngineError> {
        self.publish_or_queue(notices).await?;
        self.raise_with(notices, None).await
    }

    /// Publish `notices` to the bus, if there is one; when that fails, make a durable
    /// job per notice that publishes it later ([`PUBLISH_JOB`], retried by the
    /// `notify.*` attempt policy, then dead with the reason). So a bus that is down or
    /// refuses this role never holds back what raised the notice (a photo being
    /// withheld, a task's end) and never leaves a task due for the reaper to retry on
    /// every pass. An error here is the state store's.
    async fn publish_or_queue(&self, notices: &[Notice]) -> Result<(), EngineError> {
        if self.bus.is_none() || notices.is_empty() {
            return Ok(());
        }
        let Err(e) = self.publish_now(notices).await else {
            return Ok(());
        };
        tracing::warn!(error = %e, notices = notices.len(), "publishing to the notice bus failed; each notice is queued to be published again");
        for n in notices {
            self.submit(publish_plan(n)).await?;
        }
        Ok(())
    }

    /// Publish `notices` to the bus now, if there is one. A notice the bus refuses for
    /// itself (too large, malformed: it can never be accepted) is logged and skipped,
    /// so that it does not hold back the others; any other failure is returned.
    pub(crate) async fn publish_now(&self, notices: &[Notice]) -> Result<(), EngineError> {
        let Some(bus) = &self.bus else {
            return Ok(());
        };
        let mut pending = notices.to_vec();
        while !pending.is_empty() {
            match bus.publish(&pending).await {
                Ok(()) => return Ok(()),
                Err(NoticeBusError::Refused { id, why }) => {
                    tracing::error!(notice = %id, error = %why, "the bus refused a notice; not published");
                    let before = pending.len();
                    pending.retain(|n| n.id != id);
                    if pending.len() == before {
                        // The bus named a notice that was not sent: nothing to drop.
                        return Err(NoticeBusError::Refused { id, why }.into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// [`Self::raise`], committing `last` with the final batch of deliveries (a
    /// conflict on it is returned as the store's conflict).
    async fn raise_with(
        &self,
        notices: &[Notice],
        last: Option<Write>,
    ) -> Result<usize, EngineError> {
        let mut by_tenant: std::collections::BTreeMap<
            &TenantId,
            std::sync::Arc<Vec<Subscription>>,
        > = Default::default();
        let mut pending: Vec<(Subscription, &Notice)> = Vec::new();
        for n in notices {
            if !by_tenant.contains_key(&n.tenant) {
                let subs = self.webhooks(&n.tenant).await?;
                by_tenant.insert(&n.tenant, subs);
            }
            for s in by_tenant[&n.tenant].iter() {
                let repeat = pending.iter().any(|(p, q)| p.id == s.id && q.id == n.id);
                if s.wants(n) && !repeat && !self.delivered(s, n).await? {
                    pending.push((s.clone(), n));
                }
            }
        }
        let per_batch = (MAX_TRANSACTION_ITEMS - 1) / DELIVERY_WRITES;
        let mut created = 0;
        let mut batches: Vec<Vec<(Subscription, &Notice)>> = Vec::new();
        while !pending.is_empty() {
            let rest = pending.split_off(pending.len().min(per_batch));
            batches.push(std::mem::replace(&mut pending, rest));
        }
        if batches.is_empty() {
            batches.push(Vec::new());
        }
        let count = batches.len();
        for (i, mut batch) in batches.into_iter().enumerate() {
            let tail = if i + 1 == count { last.clone() } else { None };
            created += self.commit_deliveries(&mut batch, tail).await?;
        }
        Ok(created)
    }

    /// Whether `notice` was raised to `sub` before: its delivery's fingerprint exists.
    /// Read first so that a notice raised by many tasks (a cancel of a big job, where
    /// every task's end sees the job cancelled) costs one read each, not a failed
    /// transaction each.
    async fn delivered(&self, sub: &Subscription, notice: &Notice) -> Result<bool, EngineError> {
        let plan = delivery_plan(sub, notice);
        let fp = tessera_core::spec::fingerprint(&plan.kind, &plan.spec);
        let key = records::fingerprint_key(&plan.tenant, &plan.kind, &fp);
        Ok(self.ports.store.get(&key).await?.is_some())
    }

    /// Commit one batch of deliveries (and `tail`), dropping those already raised.
    async fn commit_deliveries(
        &self,
        batch: &mut Vec<(Subscription, &Notice)>,
        tail: Option<Write>,
    ) -> Result<usize, EngineError> {
        loop {
            let mut writes = Vec::new();
            let mut prepared = Vec::new();
            for (sub, notice) in batch.iter() {
                let p = self.prepare(delivery_plan(sub, notice))?;
                writes.extend(p.writes.iter().cloned());
                writes.push(webhooks::delivery_record(
                    sub.id,
                    &Delivery {
                        notice: notice.id.clone(),
                        kind: notice.kind,
                        job_id: p.job_id,
                        created_at: Millis::now(),
                    },
                ));
                prepared.push(p);
            }
            let tail_at = writes.len();
            if let Some(t) = &tail {
                writes.push(t.clone());
            }
            if writes.is_empty() {
                return Ok(0);
            }
            match self.ports.store.transact(writes).await {
                Ok(()) => {
                    for p in &prepared {
                        self.offer_prepared(p).await?;
                    }
                    return Ok(prepared.len());
                }
                Err(StoreError::Conflict { index, .. }) if index < tail_at => {
                    // That delivery was raised before (its fingerprint exists).
                    let offset: usize = prepared
                        .iter()
                        .map(|p| p.writes.len() + 1)
                        .scan(0, |acc, n| {
                            *acc += n;
                            Some(*acc)
                        })
                        .position(|end| index < end)
                        .expect("the index is inside a delivery");
                    batch.remove(offset);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The job that publishes `notice` to the bus later: its fingerprint is the notice id,
/// so the same notice queued again is the same job.
fn publish_plan(notice: &Notice) -> crate::JobPlan {
    crate::JobPlan {
        tenant: notice.tenant.clone(),
        project: notice.project,
        kind: PUBLISH_JOB.into(),
        label: format!("{} to the notice bus", notice.kind),
        spec: serde_json::json!({ "notice": notice.id }),
        priority: 0,
        tasks: vec![crate::TaskPlan::new(
            "publish",
            PUBLISH_TASK,
            serde_json::json!({ "notice": notice }),
        )],
    }
}

/// The name of a delivery job's one task.
const DELIVERY_TASK_NAME: &str = "deliver";

/// The task of delivery job `job`: its id follows from the job's (no query to find it).
pub fn delivery_task(job: tessera_core::JobId) -> tessera_core::TaskId {
    crate::plan::task_id_for(job, DELIVERY_TASK_NAME)
}

/// The job that delivers `notice` to `sub`: its fingerprint is (webhook, notice id), so
/// the same notice raised again is the same job.
fn delivery_plan(sub: &Subscription, notice: &Notice) -> crate::JobPlan {
    crate::JobPlan {
        tenant: sub.tenant.clone(),
        project: notice.project,
        kind: DELIVERY_JOB.into(),
        label: format!("{} to webhook {}", notice.kind, sub.id),
        spec: serde_json::json!({ "webhook": sub.id, "notice": notice.id }),
        priority: 0,
        tasks: vec![crate::TaskPlan::new(
            DELIVERY_TASK_NAME,
            DELIVERY_TASK,
            serde_json::json!({ "webhook": sub.id, "notice": notice }),
        )],
    }
}
