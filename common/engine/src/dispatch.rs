//! One delivery, end to end: parse, admit, claim, run beside a heartbeat, then record
//! success or a classified failure under the fencing epoch (how each end is written:
//! [`crate::ending`]).

use crate::context::TaskContext;
use crate::handler::{TaskError, TaskOutput};
use crate::lifecycle::{self, ClaimDecision};
use crate::plan::TaskMessage;
use crate::{Engine, EngineError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_core::event::EventKind;
use tessera_core::ports::compute::{ComputeError, ResourceDemand};
use tessera_core::ports::queue::{Delivery, QueueError};
use tessera_core::ports::state_store::{Condition, StoreError, Write};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};
use tessera_core::{ErrorClass, Millis};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The task ran; this is its state afterwards.
    Ran(TaskState),
    /// Nothing to do (finished, waiting, running elsewhere, not due yet).
    Skipped(&'static str),
    /// The message was archived as poison.
    Poison(String),
    /// This worker lost the lease while running; nothing was written.
    LostLease,
    /// Not due yet (backing off): the message was hidden again for this long instead of
    /// being deleted. A Lambda must report it as a batch item failure, or the event
    /// source would delete it.
    Later(Duration),
}

/// How soon a task that was not admitted in time is offered again.
const ADMISSION_REOFFER: Duration = Duration::from_secs(2);

/// The result of a claim attempt. Returned once per claim and never stored, so the
/// size difference between the variants does not matter.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Claim {
    /// This worker now holds the task at `task.epoch`.
    Claimed(Task),
    /// The task was not claimable; why.
    Skipped(&'static str, Option<Millis>),
}

/// Most rounds a claim or a completion retries after losing a race on another item.
const RACE_ROUNDS: usize = 64;

impl Engine {
    /// Handle one queue delivery completely, deleting or archiving its message.
    pub async fn handle_delivery(&self, d: &Delivery) -> Result<Handled, EngineError> {
        let queue = &self.config.queue;
        let msg: TaskMessage = match serde_json::from_str(&d.body) {
            Ok(m) => m,
            Err(e) => {
                let why = format!("unparsable task message: {e}");
                tracing::warn!(message_id = %d.message_id, error = %why, "archiving poison message");
                self.ports.queue.archive(queue, d, &why).await?;
                return Ok(Handled::Poison(why));
            }
        };
        let span = tracing::info_span!("task", task_id = %msg.task, job_id = %msg.job, message_id = %d.message_id);
        async {
            let Some(item) = self.ports.store.get(&records::task_key(msg.task)).await? else {
                let why = format!("task {} does not exist", msg.task);
                tracing::warn!(error = %why, "archiving poison message");
                self.ports.queue.archive(queue, d, &why).await?;
                return Ok(Handled::Poison(why));
            };
            let task = records::task_from(&item)?;
            let keeper = self.keep_hidden(d.receipt.clone());
            let outcome = self.claim_and_run(task).await;
            keeper.cancel();
            let (handled, delay) = outcome?;
            let ack = match delay {
                Some(d_) => self.ports.queue.extend(queue, &d.receipt, d_).await,
                None => self.ports.queue.delete(queue, &d.receipt).await,
            };
            match ack {
                Ok(()) | Err(QueueError::StaleReceipt(_)) => {}
                Err(e) => return Err(e.into()),
            }
            Ok(match delay {
                Some(d_) => Handled::Later(d_),
                None => handled,
            })
        }
        .instrument(span)
        .await
    }

    /// Keep a delivery hidden while this worker works on it; stops on cancel.
    fn keep_hidden(&self, receipt: String) -> CancellationToken {
        let stop = CancellationToken::new();
        let (engine, s) = (self.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = s.cancelled() => return,
                    _ = tokio::time::sleep(engine.config.heartbeat_every) => {
                        let q = &engine.config.queue;
                        if engine.ports.queue.extend(q, &receipt, engine.config.lease).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        stop
    }

    /// Admit, claim and run; returns what happened and, when the message should come
    /// back later instead of being deleted, after how long.
    async fn claim_and_run(&self, task: Task) -> Result<(Handled, Option<Duration>), EngineError> {
        let _permit = if task.resource_class.is_heavy()
            && matches!(task.state, TaskState::Queued | TaskState::Running)
        {
            let demand_bytes = task
                .memory_estimate
                .unwrap_or_else(|| task.resource_class.memory_bytes());
            let demand = ResourceDemand {
                class: task.resource_class,
                memory_bytes: demand_bytes,
            };
            // A bounded wait: a task that cannot be admitted in time gives its worker
            // slot back (light tasks behind it run) and its message comes back later.
            let gave_up = CancellationToken::new();
            let admit = self.ports.compute.admit(demand, &gave_up);
            let timer = async {
                tokio::time::sleep(self.config.admission_wait).await;
                gave_up.cancel();
                std::future::pending::<()>().await
            };
            let admitted = tokio::select! {
                r = admit => r,
                _ = timer => unreachable!("the timer never completes"),
            };
            match admitted {
                Ok(p) => Some(p),
                Err(ComputeError::Cancelled) => {
                    tracing::info!(task_id = %task.id, waited_s = self.config.admission_wait.as_secs_f64(), memory_bytes = demand_bytes, "not admitted in time; re-offered");
                    return Ok((
                        Handled::Skipped("waiting for memory"),
                        Some(ADMISSION_REOFFER),
                    ));
                }
                Err(e) => {
                    // Cannot ever fit here: a resource failure, retried one class up.
                    let claimed = match self.claim(task).await? {
                        Claim::Claimed(t) => t,
                        Claim::Skipped(why, _) => return Ok((Handled::Skipped(why), None)),
                    };
                    let state = self
                        .fail(&claimed, TaskError::from_classified(e), None)
                        .await?;
                    return Ok((state, None));
                }
            }
        } else {
            None
        };
        match self.claim(task).await? {
            Claim::Claimed(t) => Ok((self.execute(t).await?, None)),
            Claim::Skipped(why, Some(until)) => {
                Ok((Handled::Skipped(why), Some(until.since(Millis::now()))))
            }
            Claim::Skipped(why, None) => Ok((Handled::Skipped(why), None)),
        }
    }

    /// Claim a task: one conditional write that bumps its epoch. Re-reads and decides
    /// again after losing a race.
    pub async fn claim(&self, mut task: Task) -> Result<Claim, EngineError> {
        for _ in 0..RACE_ROUNDS {
            let started = Instant::now();
            let now = Millis::now();
            match lifecycle::decide_claim(&task, now, &self.config.owner, self.config.lease) {
                ClaimDecision::Claim(mut next) => {
                    let mut writes = vec![Write::Put {
                        item: records::task_item(&next),
                        condition: Condition::Rev(task.rev),
                    }];
                    // Its first claim (a run that gave its attempt back was claimed).
                    if task.attempts == 0 && task.moved_on == 0 {
                        writes.push(Write::add(records::job_key(task.job_id), "started", 1));
                    }
                    match self.ports.store.transact(writes).await {
                        Ok(()) => {
                            next.rev = task.rev + 1;
                            if let Some(stats) = &self.stats {
                                stats
                                    .claim_micros
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .push(started.elapsed().as_micros() as u32);
                            }
                            tracing::debug!(epoch = next.epoch, attempt = next.attempts, "claimed");
                            return Ok(Claim::Claimed(next));
                        }
                        Err(StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                ClaimDecision::Exhausted(dead) => {
                    match self.finish_dead(dead, Condition::Rev(task.rev)).await {
                        Ok(true) => {
                            return Ok(Claim::Skipped("attempt ceiling reached: dead", None));
                        }
                        Ok(false) => {}
                        Err(e) => return Err(e),
                    }
                }
                ClaimDecision::NotDue(at) => return Ok(Claim::Skipped("backing off", Some(at))),
                ClaimDecision::Busy(_) => {
                    return Ok(Claim::Skipped("running under another lease", None));
                }
                ClaimDecision::Waiting => {
                    return Ok(Claim::Skipped("waiting for dependencies", None));
                }
                ClaimDecision::Finished => return Ok(Claim::Skipped("already finished", None)),
            }
            task = self.task(task.id).await?;
        }
        Err(StoreError::Unavailable(format!(
            "claim of task {} lost {RACE_ROUNDS} races in a row",
            task.id
        ))
        .into())
    }

    /// End a task as dead (with its handler's compensations, the job counter and its
    /// dependents) conditioned on `condition`.
    /// Returns `false` when the condition no longer held (someone else changed the task).
    pub(crate) async fn finish_dead(
        &self,
        dead: Task,
        condition: Condition,
    ) -> Result<bool, EngineError> {
        let compensations = self
            .registry
            .get(&dead.kind)
            .map(|h| h.compensate(&dead))
            .unwrap_or_default();
        let message = dead
            .last_error
            .as_ref()
            .map_or_else(String::new, |e| e.message.clone());
        let reason = EventKind::Error {
            class: dead
                .last_error
                .as_ref()
                .map_or(ErrorClass::Transient, |e| e.class),
            message: format!("task `{}` is {}: {message}", dead.name, dead.state),
        };
        if self
            .commit_compensated(
                dead.clone(),
                condition,
                compensations,
                vec![(reason, Millis::now())],
            )
            .await?
            .is_err()
        {
            return Ok(false);
        }
        tracing::warn!(task_id = %dead.id, job_id = %dead.job_id, epoch = dead.epoch, state = %dead.state, error = %message, "task ended without running");
        Ok(true)
    }

    /// Run a claimed task beside its heartbeat and record the outcome.
    pub async fn execute(&self, claimed: Task) -> Result<Handled, EngineError> {
        let job = match self
            .ports
            .store
            .get(&records::job_key(claimed.job_id))
            .await?
        {
            Some(item) => records::job_from(&item)?,
            None => {
                let state = self
                    .fail(
                        &claimed,
                        TaskError::poison(format!(
                            "job {} of this task does not exist",
                            claimed.job_id
                        )),
                        None,
                    )
                    .await?;
                return Ok(state);
            }
        };
        let cancel = CancellationToken::new();
        let lost = Arc::new(Mutex::new(false));
        let stop_beat = CancellationToken::new();
        let beat = tokio::spawn(self.clone().heartbeat(
            claimed.clone(),
            cancel.clone(),
            stop_beat.clone(),
            lost.clone(),
        ));

        let defers = self
            .registry
            .get(&claimed.kind)
            .is_some_and(|h| h.defers_events());
        let ctx = TaskContext {
            engine: self.clone(),
            task: claimed.clone(),
            job,
            cancel: cancel.clone(),
            deferred: defers.then(Default::default),
        };
        let result = self.run_handler(&ctx).await;
        stop_beat.cancel();
        let _ = beat.await;
        if *lost.lock().unwrap_or_else(|p| p.into_inner()) {
            tracing::warn!(
                epoch = claimed.epoch,
                "lease lost while running; this worker writes nothing more"
            );
            return Ok(Handled::LostLease);
        }
        // A run that lost its lease (above) stores none of its deferred events: its
        // successor tells its own story.
        let deferred = ctx.take_deferred();
        match result {
            Ok(out) => {
                self.complete(&claimed, &ctx.job().tenant, out, deferred)
                    .await
            }
            Err(e) => {
                self.fail_with(&claimed, e, Some(ctx.fence()), deferred)
                    .await
            }
        }
    }

    async fn run_handler(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let task = &ctx.task;
        if let Some(key) = &task.cache_key
            && let Some(hit) = self
                .ports
                .store
                .get(&records::cache_key(&ctx.job().tenant, key))
                .await?
        {
            tracing::info!(cache_key = %key, "cache hit: completing with the cached result");
            return Ok(TaskOutput::result(
                hit.body.get("result").cloned().unwrap_or_default(),
            ));
        }
        let Some(handler) = self.registry.get(&task.kind) else {
            return Err(TaskError::poison(format!(
                "no handler for task kind `{}` in this worker (it knows: {})",
                task.kind,
                self.registry.kinds().join(", ")
            )));
        };
        tokio::select! {
            r = handler.run(ctx) => r,
            _ = ctx.cancel.cancelled() => Err(TaskError::cancelled("the task's lease was lost or revoked")),
        }
    }

    /// Renew the lease under the epoch until stopped; on a refused renewal, mark the
    /// lease lost and cancel the work.
    async fn heartbeat(
        self,
        claimed: Task,
        cancel: CancellationToken,
        stop: CancellationToken,
        lost: Arc<Mutex<bool>>,
    ) {
        let mut current = claimed;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.config.heartbeat_every) => {}
            }
            let next = lifecycle::renewed(&current, Millis::now(), self.config.lease);
            // Only the lease and the beat are set, never the whole item: the task's
            // due-index entry stays where the claim put it, so a heartbeat every 2 s is
            // no index write (the reaper moves the entry when it finds it due and the
            // lease still held).
            match self
                .ports
                .store
                .transact(vec![Write::Set {
                    key: records::task_key(next.id),
                    fields: vec![
                        (
                            "lease".into(),
                            serde_json::to_value(&next.lease).expect("serializable"),
                        ),
                        (
                            "heartbeat_at".into(),
                            serde_json::to_value(next.heartbeat_at).expect("serializable"),
                        ),
                    ],
                    condition: records::fenced(current.epoch),
                }])
                .await
            {
                Ok(()) => current = next,
                Err(StoreError::Conflict { .. }) => {
                    *lost.lock().unwrap_or_else(|p| p.into_inner()) = true;
                    tracing::warn!(task_id = %current.id, epoch = current.epoch, "heartbeat refused: lease lost or revoked; cancelling the work");
                    cancel.cancel();
                    return;
                }
                Err(e) => {
                    tracing::warn!(task_id = %current.id, error = %e, "heartbeat failed; will retry")
                }
            }
        }
    }
}

impl Engine {
    /// Run one task by id, with no queue message: how the Batch container's
    /// `tessera stage --task ID` runs a heavy task through the same claim, heartbeat,
    /// fencing and completion as any worker (admission is Batch's job there).
    pub async fn run_task(&self, id: tessera_core::TaskId) -> Result<Handled, EngineError> {
        let span = tracing::info_span!("task", task_id = %id);
        async {
            let Some(item) = self.ports.store.get(&records::task_key(id)).await? else {
                return Ok(Handled::Poison(format!("task {id} does not exist")));
            };
            let task = records::task_from(&item)?;
            match self.claim(task).await? {
                Claim::Claimed(t) => self.execute(t).await,
                Claim::Skipped(why, Some(until)) => {
                    tracing::info!(why, "not runnable yet");
                    Ok(Handled::Later(until.since(Millis::now())))
                }
                Claim::Skipped(why, None) => Ok(Handled::Skipped(why)),
            }
        }
        .instrument(span)
        .await
    }

    /// Close a task whose remote runner ended without closing it (a Batch job that
    /// failed: out of memory, host lost, container error). Only a task still running
    /// under a lease held by `owner` is touched, at that epoch, so a task that was
    /// already retried elsewhere is left alone. The failure is classified by the caller
    /// and then handled like any other: retried, escalated or dead.
    pub async fn fail_abandoned(
        &self,
        id: tessera_core::TaskId,
        owner: &str,
        error: TaskError,
    ) -> Result<Option<Handled>, EngineError> {
        let Some(item) = self.ports.store.get(&records::task_key(id)).await? else {
            return Ok(None);
        };
        let task = records::task_from(&item)?;
        let held = task.state == TaskState::Running
            && task.lease.as_ref().is_some_and(|l| l.owner == owner);
        if !held {
            return Ok(None);
        }
        self.fail(&task, error, None).await.map(Some)
    }
}
