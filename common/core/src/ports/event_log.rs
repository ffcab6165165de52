//! The event log: per-job progress events with gap-free sequence numbers.
//!
//! [`StoreEventLog`] implements it on any [`StateStore`]: an event is a put-if-absent of
//! sequence `last + 1`, so of two writers racing for one number exactly one wins and
//! the other retries with the next; no number is skipped because a writer only ever
//! claims the successor of a number it has read. A fenced append also checks, in the
//! same transaction, that the emitting task still runs under the writer's epoch.
//!
//! Events staged together (a task's deferred events, stored with its end) are packed:
//! every event but the last goes into items of up to [`PACK_MAX`] events, each keyed by
//! the first number it holds, and the last event keeps an item of its own. A photo's
//! task ends with five events, and each item is a transactional write (2 units under
//! 1 KB): five items were 10 write units a photo, two are 4 (the load rehearsal's
//! `write_units_by_action`). The rules stay those of one item per event:
//! - every item's key is the first number it holds, so two writers that read the same
//!   last number collide on their first write, and a writer that read an older number
//!   collides with the first item written after it;
//! - the last item holds exactly the last number, so a writer built before packing (it
//!   reads the last number from the last key, during a rolling deploy) claims the right
//!   successor; it reads the first event of each pack (a pack's body is its first event
//!   with the rest under `then`) and misses the others, and nothing is numbered twice.

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

/// Events staged to be stored by their caller's own transaction, in order.
#[derive(Debug, Clone, Default)]
pub struct StagedEvents {
    /// The events as they will read once stored.
    pub events: Vec<ProgressEvent>,
    /// The puts-if-absent that store them (fewer than the events when they are packed;
    /// never more). When the caller's transaction fails on one of them, another writer
    /// took a number first: stage again.
    pub writes: Vec<Write>,
}

/// The most events one stored item holds. A pack of this many small events stays a
/// few kilobytes.
pub const PACK_MAX: u64 = 16;

/// How many numbers before the one it resumes at a reader starts its query, so that it
/// finds the item holding that number: one less than the largest pack any build has
/// ever written (never less, or a reader resuming inside such a pack misses it).
/// [`unpack`] refuses a larger pack as corrupt instead of skipping its events.
const READ_BACK: u64 = PACK_MAX - 1;

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
        let staged = self
            .stage_all(job, task, vec![(kind, Millis::now())])
            .await?;
        match (staged.events.as_slice(), staged.writes.as_slice()) {
            ([event], [write]) => Ok(StagedEvent {
                event: event.clone(),
                write: write.clone(),
            }),
            _ => Err(StoreError::Invalid(format!(
                "one event of job {job} was staged as {} events in {} writes",
                staged.events.len(),
                staged.writes.len()
            ))
            .into()),
        }
    }

    /// `events` (each with when it happened) as the next writes of `job`'s log, in order,
    /// for a caller that stores them in one transaction of its own: how a task that
    /// defers its events stores them with its end. A conflict on any of the writes
    /// means another writer took a number first: stage again.
    async fn stage_all(
        &self,
        job: JobId,
        task: Option<TaskId>,
        events: Vec<(EventKind, Millis)>,
    ) -> Result<StagedEvents, EventLogError>;

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
    ) -> Result<StagedEvents, EventLogError> {
        let last = if events.is_empty() {
            0
        } else {
            self.last_seq(job).await?
        };
        let events: Vec<ProgressEvent> = (last + 1..)
            .zip(events)
            .map(|(seq, (kind, at))| ProgressEvent {
                job_id: job,
                seq,
                task_id: task,
                at,
                kind,
            })
            .collect();
        let mut writes = Vec::new();
        if let Some((tail, packed)) = events.split_last() {
            for pack in packed.chunks(PACK_MAX as usize) {
                writes.push(put_new(job, pack)?);
            }
            writes.push(put_new(job, std::slice::from_ref(tail))?);
        }
        Ok(StagedEvents { events, writes })
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
        // An item holds its key's number and up to READ_BACK after it, so the first one
        // that can hold `after + 1` is keyed above `after - READ_BACK`; at most
        // READ_BACK items are read before the wanted events start, each at least one
        // event after it.
        let mut q = Query::partition(
            Index::Table,
            records::events_partition(job),
            limit.max(1).saturating_add(READ_BACK as usize),
        );
        q.after = Some(format!("{:012}", after.saturating_sub(READ_BACK)));
        let page = self.store.query(&q).await?;
        let mut out = Vec::new();
        for item in &page.items {
            out.extend(unpack(item)?.into_iter().filter(|e| e.seq > after));
            if out.len() >= limit.max(1) {
                break;
            }
        }
        out.truncate(limit.max(1));
        Ok(out)
    }

    async fn last_seq(&self, job: JobId) -> Result<u64, EventLogError> {
        let mut q = Query::partition(Index::Table, records::events_partition(job), 1);
        q.descending = true;
        let page = self.store.query(&q).await?;
        // The key and the length of `then`, without decoding the events: a last item
        // whose events do not decode stops no writer.
        Ok(match page.items.first() {
            Some(item) => {
                let first: u64 = item.key.sk.parse().map_err(|_| {
                    StoreError::Corrupt(format!(
                        "event key {} is not a sequence number",
                        item.key.sk
                    ))
                })?;
                let later = item
                    .body
                    .get(THEN)
                    .and_then(|v| v.as_array())
                    .map_or(0, Vec::len);
                first + later as u64
            }
            None => 0,
        })
    }
}

/// An event after the first of a pack: the pack's job and task, the next number.
#[derive(serde::Serialize, serde::Deserialize)]
struct Later {
    at: Millis,
    #[serde(flatten)]
    kind: EventKind,
}

/// Field of a pack's body holding the events after its first.
const THEN: &str = "then";

/// The put-if-absent of `events` (consecutive, at least one) as one item keyed by the
/// first one's number: its body is that event, with the others under [`THEN`].
fn put_new(job: JobId, events: &[ProgressEvent]) -> Result<Write, StoreError> {
    let invalid = |e: serde_json::Error| StoreError::Invalid(e.to_string());
    let (first, rest) = events
        .split_first()
        .ok_or_else(|| StoreError::Invalid(format!("an empty pack of job {job}'s events")))?;
    let mut body = serde_json::to_value(first).map_err(invalid)?;
    if !rest.is_empty() {
        let later: Vec<Later> = rest
            .iter()
            .map(|e| Later {
                at: e.at,
                kind: e.kind.clone(),
            })
            .collect();
        body[THEN] = serde_json::to_value(later).map_err(invalid)?;
    }
    Ok(Write::Put {
        item: Item::new(records::event_key(job, first.seq), body),
        condition: Condition::Absent,
    })
}

/// The events one stored item holds, in order: one, or a pack's first and its `then`.
fn unpack(item: &Item) -> Result<Vec<ProgressEvent>, StoreError> {
    use serde::Deserialize;
    let first: ProgressEvent = records::decode(item)?;
    let later: Vec<Later> = match item.body.get(THEN) {
        None => Vec::new(),
        Some(v) => Vec::<Later>::deserialize(v)
            .map_err(|e| StoreError::Corrupt(format!("events packed in {}: {e}", item.key.pk)))?,
    };
    if later.len() as u64 > READ_BACK {
        return Err(StoreError::Corrupt(format!(
            "{} holds a pack of {} events where at most {PACK_MAX} are written; a reader \
             resuming inside it would miss some",
            item.key.pk,
            later.len() + 1
        )));
    }
    let mut out = Vec::with_capacity(1 + later.len());
    for (seq, l) in (first.seq + 1..).zip(later) {
        out.push(ProgressEvent {
            job_id: first.job_id,
            seq,
            task_id: first.task_id,
            at: l.at,
            kind: l.kind,
        });
    }
    out.insert(0, first);
    Ok(out)
}
