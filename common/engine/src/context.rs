//! What a handler sees while it runs: its task, its job, the ports, fenced event
//! emission, cancellation, and subprocesses that die with the task.

use crate::handler::TaskError;
use crate::{Engine, Ports};
use crate::{JobPlan, Submitted};
use std::time::Instant;
use tessera_core::Millis;
use tessera_core::event::{EventKind, Phase};
use tessera_core::job::Job;
use tessera_core::ports::compute::{LineSink, ProcessReport, ProcessSpec};
use tessera_core::ports::event_log::Fence;
use tessera_core::ports::state_store::{StoreError, Write};
use tessera_core::records;
use tessera_core::task::Task;
use tokio_util::sync::CancellationToken;

/// The running task's view of the world.
pub struct TaskContext {
    pub(crate) engine: Engine,
    pub(crate) task: Task,
    pub(crate) job: Job,
    pub(crate) cancel: CancellationToken,
    /// The events of a run whose handler defers them
    /// ([`crate::TaskHandler::defers_events`]), each with when it happened: stored with
    /// the run's end, in the transaction that ends it.
    pub(crate) deferred: Option<std::sync::Mutex<Vec<(EventKind, Millis)>>>,
}

impl TaskContext {
    /// The task as claimed (running, with this worker's epoch).
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The job, as read when the task was claimed.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The adapters.
    pub fn ports(&self) -> &Ports {
        &self.engine.ports
    }

    /// This job's local scratch directory (created on first use; may hold a previous
    /// attempt's files, so stages check what they find against their checkpoints).
    pub fn scratch_dir(&self) -> std::io::Result<std::path::PathBuf> {
        let dir = self
            .engine
            .config
            .scratch
            .join(self.task.job_id.to_string());
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// The fence every write of this run must carry.
    pub fn fence(&self) -> Fence {
        Fence {
            task: self.task.id,
            epoch: self.task.epoch,
        }
    }

    /// The write that makes a transaction fail once this run has lost its lease: first
    /// in a transaction the handler commits through another use case (one that commits
    /// follow-up work of its own with it), as [`TaskContext::commit`] puts it first.
    pub fn fence_write(&self) -> Write {
        Write::Check {
            key: records::task_key(self.task.id),
            condition: records::fenced(self.task.epoch),
        }
    }

    /// The engine, for a use case that prepares a job in its own transaction (with
    /// [`TaskContext::fence_write`] among its writes).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Cancelled when the lease is lost (taken over, revoked by a forced cancel).
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Commit `writes` in one transaction, only while this run still holds its lease
    /// (the task is running under this worker's epoch). A handler's own state changes
    /// made before it finishes go through here, so a worker whose lease was taken over
    /// can never write after its successor.
    pub async fn commit(&self, mut writes: Vec<Write>) -> Result<(), TaskError> {
        writes.insert(0, self.fence_write());
        match self.engine.ports.store.transact(writes).await {
            Ok(()) => Ok(()),
            Err(StoreError::Conflict { index: 0, .. }) => Err(self.lease_lost()),
            Err(e) => Err(e.into()),
        }
    }

    /// [`Self::commit`], telling a conflict of one of `writes` apart from every other
    /// failure: `Ok(Some(i))` when write `i` found its condition false, so that nothing
    /// was committed and the stored state is other than the run read it. (A store that
    /// timed out may have committed; that stays an error, never a conflict.)
    pub async fn try_commit(&self, mut writes: Vec<Write>) -> Result<Option<usize>, TaskError> {
        writes.insert(0, self.fence_write());
        match self.engine.ports.store.transact(writes).await {
            Ok(()) => Ok(None),
            Err(StoreError::Conflict { index: 0, .. }) => Err(self.lease_lost()),
            Err(StoreError::Conflict { index, .. }) => Ok(Some(index - 1)),
            Err(e) => Err(e.into()),
        }
    }

    fn lease_lost(&self) -> TaskError {
        TaskError::cancelled(format!(
            "task {} lost its lease (epoch {}); another worker owns it now",
            self.task.id, self.task.epoch
        ))
    }

    /// Submit a follow-up job (idempotent: an identical plan is the same job, so a
    /// retried task does not start it twice).
    pub async fn submit(&self, plan: JobPlan) -> Result<Submitted, TaskError> {
        Ok(self.engine.submit(plan).await?)
    }

    /// Submit many small follow-up jobs in as few transactions as they fit in, each under
    /// this run's fence ([`Engine::submit_all`]); idempotent as [`Self::submit`] is.
    pub async fn submit_all(
        &self,
        plans: Vec<JobPlan>,
    ) -> Result<Vec<tessera_core::JobId>, TaskError> {
        match self
            .engine
            .submit_all(plans, Some(self.fence_write()))
            .await
        {
            Ok(ids) => Ok(ids),
            Err(crate::EngineError::Store(StoreError::Conflict { index: 0, .. })) => {
                Err(self.lease_lost())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Raise `notices` now (a photo withheld mid-run): one delivery per webhook that
    /// wants each, none for a notice raised before.
    pub async fn raise(
        &self,
        notices: &[tessera_core::notify::Notice],
    ) -> Result<usize, TaskError> {
        Ok(self.engine.raise(notices).await?)
    }

    /// Publish `notices` to this process's notice bus now (the `notify.publish` task). A
    /// bus that cannot be reached or refuses this role is tried again by the attempt
    /// policy (the operator may fix a grant within the day it lasts).
    pub async fn publish(&self, notices: &[tessera_core::notify::Notice]) -> Result<(), TaskError> {
        if self.engine.bus.is_none() {
            return Err(TaskError::transient(
                "this process publishes to no notice bus (TESSERA_EVENT_BUS is not set)",
            ));
        }
        self.engine
            .publish_now(notices)
            .await
            .map_err(|e| TaskError::transient(e.to_string()))
    }

    /// Store a progress event under the fence; for a handler that defers its events,
    /// keep it for the run's end (stored then, with the outcome, under the same fence).
    pub async fn emit(&self, kind: EventKind) -> Result<(), TaskError> {
        if let Some(deferred) = &self.deferred {
            deferred
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((kind, Millis::now()));
            return Ok(());
        }
        self.engine
            .ports
            .events
            .append(
                self.task.job_id,
                Some(self.task.id),
                kind,
                Some(self.fence()),
            )
            .await?;
        Ok(())
    }

    /// The events this run deferred, in order (none when its handler does not defer).
    pub(crate) fn take_deferred(&self) -> Vec<(EventKind, Millis)> {
        self.deferred
            .as_ref()
            .map(|d| std::mem::take(&mut *d.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
    }

    /// Announce a phase; returns when it started, for [`Self::phase_completed`].
    pub async fn phase_started(&self, phase: Phase) -> Result<Instant, TaskError> {
        self.emit(EventKind::PhaseStarted { phase }).await?;
        Ok(Instant::now())
    }

    /// Report progress in a phase.
    pub async fn progress(
        &self,
        phase: Phase,
        current: u64,
        total: Option<u64>,
        rate: Option<f64>,
    ) -> Result<(), TaskError> {
        self.emit(EventKind::PhaseProgress {
            phase,
            current,
            total,
            rate,
        })
        .await
    }

    /// Close a phase.
    pub async fn phase_completed(&self, phase: Phase, started: Instant) -> Result<(), TaskError> {
        self.emit(EventKind::PhaseCompleted {
            phase,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
        .await
    }

    /// Record a measured figure; one that is not a finite number is logged, not stored
    /// (`EventKind::metric`).
    pub async fn metric(
        &self,
        name: &str,
        value: f64,
        unit: Option<&str>,
    ) -> Result<(), TaskError> {
        match EventKind::metric(name, value, unit) {
            Some(e) => self.emit(e).await,
            None => {
                tracing::warn!(task_id = %self.task.id, job_id = %self.task.job_id, metric = name, value, "a figure that is not a finite number is not recorded");
                Ok(())
            }
        }
    }

    /// A phase boundary: fails with a *cancelled* error when the job's cancel was
    /// requested or this worker lost its lease. Work done so far stays.
    pub async fn checkpoint(&self) -> Result<(), TaskError> {
        if self.cancel.is_cancelled() {
            return Err(TaskError::cancelled("the task's lease was lost or revoked"));
        }
        let job = self
            .engine
            .ports
            .store
            .get(&records::job_key(self.task.job_id))
            .await?;
        if let Some(item) = job
            && records::job_from(&item)?.cancel.is_some()
        {
            return Err(TaskError::cancelled("the job was cancelled"));
        }
        Ok(())
    }

    /// Results of this task's dependencies, by task name.
    pub async fn upstream_results(&self) -> Result<Vec<(String, serde_json::Value)>, TaskError> {
        let mut out = Vec::with_capacity(self.task.depends_on.len());
        for id in &self.task.depends_on {
            let item = self
                .engine
                .ports
                .store
                .get(&records::task_key(*id))
                .await?
                .ok_or_else(|| {
                    TaskError::poison(format!(
                        "dependency {id} of task {} is missing",
                        self.task.id
                    ))
                })?;
            let t = records::task_from(&item)?;
            out.push((t.name, t.result.unwrap_or(serde_json::Value::Null)));
        }
        Ok(out)
    }

    /// Run a subprocess that is killed (with its whole process group) when the task is
    /// cancelled or loses its lease.
    pub async fn run_process(
        &self,
        spec: ProcessSpec,
        lines: LineSink<'_>,
    ) -> Result<ProcessReport, TaskError> {
        Ok(self
            .engine
            .ports
            .compute
            .run(spec, &self.cancel, lines)
            .await?)
    }
}
