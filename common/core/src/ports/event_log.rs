//! The event log: per-job progress events with gap-free sequence numbers.
//!
//! [`StoreEventLog`] implements it on any [`StateStore`]: an event is a put-if-absent of
//! sequence `last + 1`, so of two writers racing for one number exactly one wins and
//! the other retries with the next; no number is skipped because a writer only ever
//! claims the successor of a number it has read. A fenced append also checks, in the
//! same transaction, that the emitting task still runs under the writer's epoch.

use crate::clock::Millis;
use crate::error::{Classify, ErrorClass};
use crate::event::{EventKind, ProgressEvent};
use crate::ids::{JobId, TaskId};
use crate::ports::state_store::{Condition, Index, Item, Query, StateStore, StoreError, Write};
use crate::records;
use async_trait::async_trait;
use std::sync::Arc;

/// Proof that the writer holds a task's lease at an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// The task.
    pub task: TaskId,
    /// The epoch of the writer's claim.
    pub epoch: u64,
}

/// Errors of the event log.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    /// The writer's fence no longer holds: its task was claimed again or revoked.
    #[error("task {0} is no longer held at this epoch; the event was not stored")]
    Fenced(TaskId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classify for EventLogError {
    fn class(&self) -> ErrorClass {
        match self {
            EventLogError::Fenced(_) => ErrorClass::Cancelled,
            EventLogError::Store(e) => e.class(),
        }
    }
}

/// An event ready to be stored by its caller's own transaction.
#[derive(Debug, Clone)]
pub struct StagedEvent {
    /// The event as it will read once stored.
    pub event: ProgressEvent,
    /// The put-if-absent of its sequence number. When the caller's transaction fails on
    /// this write, another writer took the number first: stage again.
    pub write: Write,
}

/// The event log port.
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// The event as the next write of `job`'s log, for a caller that must store it in
    /// the same transaction as its own writes, so that the event exists exactly when
    /// they do. This is how the reason a task ended is never lost between its terminal
    /// commit and a later append; it requires the log to live in the caller's state
    /// store.
    async fn stage(
        &self,
        job: JobId,
        task: Option<TaskId>,
        kind: EventKind,
    ) -> Result<StagedEvent, EventLogError> {
        let mut staged = self
            .stage_all(job, task, vec![(kind, Millis::now())])
            .await?;
        Ok(staged.remove(0))
    }

    /// `events` (each with when it happened) as the next writes of `job`'s log, in order,
    /// for a caller that stores them in one transaction of its own: how a task that
    /// defers its events stores them with its end. A conflict on any of them means
    /// another writer took a number first: stage again.
    async fn stage_all(
        &self,
        job: JobId,
        task: Option<TaskId>,
        events: Vec<(EventKind, Millis)>,
    ) -> Result<Vec<StagedEvent>, EventLogError>;

    /// Store an event and return it with its sequence number. With a fence, nothing is
    /// stored unless the fence holds.
    async fn append(
        &self,
        job: JobId,
        task: Option<TaskId>,
        kind: EventKind,
        fence: Option<Fence>,
    ) -> Result<ProgressEvent, EventLogError>;

    /// Up to `limit` events with sequence numbers above `after`, in order.
    async fn read_after(
        &self,
        job: JobId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<ProgressEvent>, EventLogError>;

    /// The highest sequence number stored for the job (0 when none).
    async fn last_seq(&self, job: JobId) -> Result<u64, EventLogError>;
}

/// The event log on top of a state store.
pub struct StoreEventLog {
    store: Arc<dyn StateStore>,
}

impl StoreEventLog {
    /// Use `store` for events.
    pub fn new(store: Arc<dyn StateStore>) -> Self {
        StoreEventLog { store }
    }
}

/// How many times an append retries a lost race for a sequence number before giving up
/// as transient; each loss means another writer progressed, so this bounds only extreme
/// contention.
const APPEND_RACE_LIMIT: usize = 1000;

#[async_trait]
impl EventLog for StoreEventLog {
    async fn stage_all(
        &self,
        job: JobId,
        task: Option<TaskId>,
        events: Vec<(EventKind, Millis)>,
    ) -> Result<Vec<StagedEvent>, EventLogError> {
        let last = if events.is_empty() {
            0
        } else {
            self.last_seq(job).await?
        };
        let mut out = Vec::with_capacity(events.len());
        for (seq, (kind, at)) in (last + 1..).zip(events) {
            let event = ProgressEvent {
                job_id: job,
                seq,
                task_id: task,
                at,
                kind,
            };
            let body =
                serde_json::to_value(&event).map_err(|e| StoreError::Invalid(e.to_string()))?;
            out.push(StagedEvent {
                write: Write::Put {
                    item: Item::new(records::event_key(job, seq), body),
                    condition: Condition::Absent,
                },
                event,
            });
        }
        Ok(out)
    }

    async fn append(
        &self,
        job: JobId,
        task: Option<TaskId>,
        kind: EventKind,
        fence: Option<Fence>,
    ) -> Result<ProgressEvent, EventLogError> {
        for _ in 0..APPEND_RACE_LIMIT {
            let StagedEvent { event, write } = self.stage(job, task, kind.clone()).await?;
            let mut writes = vec![write];
            if let Some(f) = fence {
                writes.push(Write::Check {
                    key: records::task_key(f.task),
                    condition: records::fenced(f.epoch),
                });
            }
            match self.store.transact(writes).await {
                Ok(()) => return Ok(event),
                Err(StoreError::Conflict { index: 1, .. }) if let Some(f) = fence => {
                    return Err(EventLogError::Fenced(f.task));
                }
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Unavailable(format!(
            "event append for job {job} lost {APPEND_RACE_LIMIT} races in a row"
        ))
        .into())
    }

    async fn read_after(
        &self,
        job: JobId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<ProgressEvent>, EventLogError> {
        let mut q = Query::partition(Index::Table, records::events_partition(job), limit.max(1));
        q.after = Some(format!("{after:012}"));
        let page = self.store.query(&q).await?;
        let mut out = Vec::with_capacity(page.items.len());
        for item in &page.items {
            out.push(records::decode::<ProgressEvent>(item)?);
        }
        Ok(out)
    }

    async fn last_seq(&self, job: JobId) -> Result<u64, EventLogError> {
        let mut q = Query::partition(Index::Table, records::events_partition(job), 1);
        q.descending = true;
        let page = self.store.query(&q).await?;
        Ok(match page.items.first() {
            Some(item) => item.key.sk.parse().map_err(|_| {
                StoreError::Corrupt(format!(
                    "event key {} is not a sequence number",
                    item.key.sk
                ))
            })?,
            None => 0,
        })
    }
}
