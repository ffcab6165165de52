//! Heavy tasks on a remote runner (AWS Batch): the orchestrator's rules.
//!
//! A heavy task's message goes to the orchestrator, which launches one remote job per
//! claim epoch: a put-if-absent marker `LAUNCH#<task>` / `<epoch>` makes a redelivered
//! message harmless. The remote job runs [`Engine::run_task`], so claim, heartbeat,
//! fencing and completion are the same as on any worker. When the runner reports that
//! a job ended, [`Engine::remote_ended`] closes what the job left open: a task still
//! running under that job's lease fails with the runner's reason (retried, escalated or
//! dead like any failure); a task the job never claimed is offered again after a
//! back-off, and fails permanently, naming the cause, after
//! [`MAX_UNCLAIMED_LAUNCHES`] such ends in a row.

use crate::dispatch::Handled;
use crate::plan::TaskMessage;
use crate::{Engine, EngineError, TaskError};
use async_trait::async_trait;
use tessera_core::ports::queue::Delivery;
use tessera_core::ports::state_store::{Condition, Item, ItemKey, StoreError};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};
use tessera_core::{ErrorClass, TaskId};

/// Starts a remote job that runs one task (the compute boundary to AWS Batch).
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Start a job running `task`; returns the runner's job id. The job's lease owner
    /// must be [`remote_owner`] of that id.
    async fn launch(&self, task: &Task) -> Result<String, TaskError>;
}

/// The lease owner a remote job claims under.
pub fn remote_owner(job_id: &str) -> String {
    format!("batch:{job_id}")
}

/// Launch markers are only needed while a redelivery of the same epoch can arrive; a
/// store with expiry (DynamoDB's TTL on `ttl_s`) drops them after a week.
fn expiry() -> u64 {
    tessera_core::Millis::now()
        .plus(std::time::Duration::from_secs(7 * 24 * 3600))
        .0 as u64
        / 1000
}

/// Remote jobs that may end before claiming their task (the container never started,
/// no capacity) before the task fails for good, naming the cause.
pub const MAX_UNCLAIMED_LAUNCHES: u32 = 5;

/// How long to wait before launching again after the `n`th unclaimed end: 30 s,
/// doubling, at most 15 min (the five tries span about 7.5 min of waiting, enough for a
/// compute environment to scale up from zero).
pub fn unclaimed_backoff(n: u32) -> std::time::Duration {
    let s = 30u64.saturating_mul(1 << n.saturating_sub(1).min(10));
    std::time::Duration::from_secs(s.min(900))
}

fn marker(task: TaskId, epoch: u64) -> ItemKey {
    ItemKey::new(format!("LAUNCH#{task}"), format!("{epoch:020}"))
}

/// How a remote job ended, as its runner reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEnd {
    /// The runner's job id.
    pub job_id: String,
    /// The task it ran.
    pub task: TaskId,
    /// Whether the runner says it succeeded.
    pub succeeded: bool,
    /// The runner's reason (status reason, container reason, exit code).
    pub reason: String,
}

impl RemoteEnd {
    /// The class of a failed job: out of memory is a resource failure (retried one
    /// class up); anything else is transient.
    pub fn class(&self) -> ErrorClass {
        let r = self.reason.to_ascii_lowercase();
        if r.contains("outofmemory") || r.contains("out of memory") || r.contains("exit code 137") {
            ErrorClass::Resource
        } else {
            ErrorClass::Transient
        }
    }
}

/// What the orchestrator did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launched {
    /// A job was started.
    Started(String),
    /// A job for this epoch was started before (redelivery).
    AlreadyStarted,
    /// The task is not waiting for a runner (finished, running, unknown).
    NotNeeded(&'static str),
    /// It can never be launched here (no worker for its class): failed, with this reason.
    Failed(String),
}

impl Engine {
    /// Launch the task a delivery names on `launcher`, once per claim epoch, and
    /// acknowledge the message.
    pub async fn launch_delivery(
        &self,
        d: &Delivery,
        launcher: &dyn Launcher,
    ) -> Result<Launched, EngineError> {
        let queue = &self.config.queue;
        let Ok(msg) = serde_json::from_str::<TaskMessage>(&d.body) else {
            self.ports
                .queue
                .archive(queue, d, "unparsable task message")
                .await?;
            return Ok(Launched::NotNeeded("unparsable: archived"));
        };
        let out = self.launch_task(msg.task, launcher).await;
        if out.is_ok() {
            match self.ports.queue.delete(queue, &d.receipt).await {
                Ok(()) | Err(tessera_core::ports::QueueError::StaleReceipt(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        out
    }

    /// Launch `task` unless a job for its current epoch exists.
    pub async fn launch_task(
        &self,
        id: TaskId,
        launcher: &dyn Launcher,
    ) -> Result<Launched, EngineError> {
        let Some(item) = self.ports.store.get(&records::task_key(id)).await? else {
            return Ok(Launched::NotNeeded("no such task"));
        };
        let task = records::task_from(&item)?;
        if task.state != TaskState::Queued {
            return Ok(Launched::NotNeeded("not queued"));
        }
        let mark = Item::new(
            marker(id, task.epoch),
            serde_json::json!({"task": id, "epoch": task.epoch, "state": "launching", "ttl_s": expiry()}),
        );
        match self.ports.store.put(mark, Condition::Absent).await {
            Ok(()) => {}
            Err(StoreError::Conflict { .. }) => return Ok(Launched::AlreadyStarted),
            Err(e) => return Err(e.into()),
        }
        match launcher.launch(&task).await {
            Ok(job) => {
                tracing::info!(task_id = %id, epoch = task.epoch, remote_job = %job, "remote job launched");
                let done = Item::new(
                    marker(id, task.epoch),
                    serde_json::json!({"task": id, "epoch": task.epoch, "state": "launched", "remote_job": job, "ttl_s": expiry()}),
                );
                self.ports.store.put(done, Condition::Exists).await?;
                Ok(Launched::Started(job))
            }
            Err(e) if e.class == tessera_core::ErrorClass::Permanent => {
                // Nothing to retry: no worker for the task's class in this deployment
                // (no WorkerImage), a definition Batch refuses. The task fails now,
                // naming why, instead of its message cycling to the dead-letter queue.
                tracing::error!(task_id = %id, epoch = task.epoch, error = %e.message, "heavy task cannot be launched; failing it");
                // Nothing was launched: the marker goes first, so that a resumed task (same
                // epoch) or a redelivery after a failed write launches again.
                self.forget_launch(id, task.epoch).await?;
                let failed = crate::lifecycle::failed(
                    &task,
                    e.class,
                    &format!("launching task {id}: {}", e.message),
                    tessera_core::Millis::now(),
                    &self.backoff(&task.kind),
                    0.0,
                );
                // Conditioned on the task as read: a claim that lands meanwhile wins.
                if self.finish_dead(failed, Condition::Rev(task.rev)).await? {
                    Ok(Launched::Failed(e.message))
                } else {
                    Ok(Launched::NotNeeded("changed while its launch was refused"))
                }
            }
            Err(e) => {
                // Not launched: the marker goes, so the redelivery tries again.
                self.forget_launch(id, task.epoch).await?;
                Err(EngineError::Refused(format!(
                    "launching task {id}: {}",
                    e.message
                )))
            }
        }
    }

    /// Close what an ended remote job left open.
    pub async fn remote_ended(&self, end: &RemoteEnd) -> Result<Option<Handled>, EngineError> {
        if end.succeeded {
            return Ok(None);
        }
        let owner = remote_owner(&end.job_id);
        let error = TaskError {
            class: end.class(),
            message: format!("remote job {} failed: {}", end.job_id, end.reason),
            moved_on: false,
        };
        if let Some(h) = self.fail_abandoned(end.task, &owner, error).await? {
            tracing::warn!(task_id = %end.task, remote_job = %end.job_id, reason = %end.reason, "remote job failed while running its task");
            return Ok(Some(h));
        }
        // Never claimed (the container did not start): forget the launch and offer again.
        let Some(item) = self.ports.store.get(&records::task_key(end.task)).await? else {
            return Ok(None);
        };
        let task = records::task_from(&item)?;
        if task.state != TaskState::Queued {
            return Ok(None);
        }
        // Counted per task, whatever the epoch: a worker image that cannot start, or a
        // queue with no capacity, ends every launch the same way.
        let ends = self.count_unclaimed_end(task.id).await?;
        if ends >= MAX_UNCLAIMED_LAUNCHES {
            let error = TaskError::permanent(format!(
                "remote job {} ended before it started its task, {ends} launches in a row (last: {}); the worker image may fail to start, or its queue may have no capacity or GPU quota — see the Batch job's status reason",
                end.job_id, end.reason
            ));
            tracing::error!(task_id = %task.id, remote_job = %end.job_id, ends, reason = %end.reason, "remote jobs never claim this task; failing it");
            let failed = crate::lifecycle::failed(
                &task,
                error.class,
                &error.message,
                tessera_core::Millis::now(),
                &self.backoff(&task.kind),
                0.0,
            );
            // Conditioned on the task as read: a claim that lands meanwhile wins.
            return Ok(self
                .finish_dead(failed, Condition::Rev(task.rev))
                .await?
                .then_some(Handled::Ran(TaskState::Failed)));
        }
        self.forget_launch(task.id, task.epoch).await?;
        let delay = unclaimed_backoff(ends);
        self.offer(&task, delay).await?;
        tracing::warn!(task_id = %task.id, remote_job = %end.job_id, reason = %end.reason, ends, delay_s = delay.as_secs(), "remote job ended before claiming its task; offered again after a back-off");
        Ok(None)
    }

    /// Delete the launch marker of `task` at `epoch`: nothing runs it, so a later offer
    /// of the same epoch must launch again.
    async fn forget_launch(&self, task: TaskId, epoch: u64) -> Result<(), EngineError> {
        self.ports
            .store
            .transact(vec![tessera_core::ports::Write::Delete {
                key: marker(task, epoch),
                condition: Condition::None,
            }])
            .await?;
        Ok(())
    }

    /// One more remote end that never claimed `task`; how many there have been.
    async fn count_unclaimed_end(&self, task: TaskId) -> Result<u32, EngineError> {
        let key = ItemKey::new(format!("LAUNCH#{task}"), "unclaimed");
        loop {
            let current = self.ports.store.get(&key).await?;
            let (n, condition) = match &current {
                Some(i) => (
                    i.body["ends"].as_u64().unwrap_or(0) as u32,
                    Condition::Rev(i.rev),
                ),
                None => (0, Condition::Absent),
            };
            let item = Item::new(
                key.clone(),
                serde_json::json!({"task": task, "ends": n + 1, "ttl_s": expiry()}),
            );
            match self.ports.store.put(item, condition).await {
                Ok(()) => return Ok(n + 1),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
