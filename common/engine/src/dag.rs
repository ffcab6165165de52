//! DAG advancement: when a task ends, its dependents learn of it in the same
//! transaction as its own final state when they fit, and in idempotent follow-ups when
//! they do not.
//!
//! - A success removes the parent from each dependent's pending set; the dependent whose
//!   set empties becomes queued.
//! - Any other end (failed, dead, cancelled) cancels the dependents still waiting, with
//!   the reason, and they tell theirs in turn, so a job always reaches a terminal state.
//!
//! Each dependent write is conditioned on the dependent's revision and is a no-op when
//! already applied, so a follow-up repeated by the reaper after a crash changes nothing
//! twice.

use crate::lifecycle;
use crate::{Engine, EngineError};
use tessera_core::event::EventKind;
use tessera_core::ports::state_store::{Condition, MAX_TRANSACTION_ITEMS, StoreError, Write};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};
use tessera_core::{Millis, TaskId};

/// Most rounds a commit retries after losing a race on a dependent.
const RACE_ROUNDS: usize = 64;

/// What telling a batch of dependents takes.
#[derive(Default)]
pub(crate) struct Fanout {
    /// Conditional writes of the dependents.
    pub writes: Vec<Write>,
    /// Dependents that become queued (to offer after the commit).
    pub runnable: Vec<Task>,
    /// Dependents cancelled because the parent did not succeed (to cascade after the
    /// commit).
    pub cancelled: Vec<TaskId>,
}

/// Where a terminal commit's condition failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The task's own condition (fence or revision).
    Task,
    /// The n-th extra write.
    Extra(usize),
}

impl Engine {
    /// The writes that tell `dependents` how `parent` ended.
    pub(crate) async fn dependent_writes(
        &self,
        parent: &Task,
        dependents: &[TaskId],
        now: Millis,
    ) -> Result<Fanout, EngineError> {
        let mut fan = Fanout::default();
        for id in dependents {
            let Some(item) = self.ports.store.get(&records::task_key(*id)).await? else {
                tracing::warn!(task_id = %id, parent = %parent.id, "dependent task is missing; skipping it");
                continue;
            };
            let mut d = records::task_from(&item)?;
            let next = if parent.state == TaskState::Succeeded {
                if !d.deps_pending.remove(&parent.id) {
                    continue;
                }
                if d.deps_pending.is_empty() && d.state == TaskState::Waiting {
                    d.state = TaskState::Queued;
                    d.not_before = now;
                    d.reoffered = None;
                    fan.runnable.push(d.clone());
                }
                d
            } else {
                if !matches!(d.state, TaskState::Waiting | TaskState::Queued) {
                    continue;
                }
                let mut c = lifecycle::cancelled(
                    &d,
                    now,
                    &format!("upstream task `{}` {}", parent.name, parent.state),
                );
                c.advance_pending = c.dependents.clone();
                fan.cancelled.push(c.id);
                c
            };
            fan.writes.push(Write::Put {
                item: records::task_item(&next),
                condition: Condition::Rev(item.rev),
            });
        }
        Ok(fan)
    }

    /// [`Self::commit_terminal`] with a handler's `compensations` as its extra writes. A
    /// compensation may be conditioned on what it undoes (a photo's version the task
    /// staged), or find it gone (the photo erased): when one is refused, the task ends
    /// without them, rather than not at all (its lease would lapse, it would end dead and
    /// be refused the same way at every try).
    pub(crate) async fn commit_compensated(
        &self,
        next: Task,
        condition: Condition,
        compensations: Vec<Write>,
        events: Vec<(EventKind, Millis)>,
    ) -> Result<Result<(), Refused>, EngineError> {
        if compensations.is_empty() {
            return self
                .commit_terminal(next, condition, Vec::new(), events)
                .await;
        }
        match self
            .commit_terminal(
                next.clone(),
                condition.clone(),
                compensations,
                events.clone(),
            )
            .await?
        {
            Err(Refused::Extra(write)) => {
                tracing::info!(task_id = %next.id, job_id = %next.job_id, write, state = %next.state, "a compensation's condition no longer holds; the task ends without its compensations");
                let mut next = next;
                next.compensation_refused = true;
                self.commit_terminal(next, condition, Vec::new(), events)
                    .await
            }
            done => Ok(done),
        }
    }

    /// Commit `next`, a terminal version of a task, under `condition`, together with
    /// `extra` writes, the job counter for its state, the event that says why it ended
    /// (`reason`, when there is one) and the first dependents it fits; then finish the
    /// fan-out. This is the one place a task ends. The reason is stored in the same
    /// transaction, so a stream never closes on a task's end without it; so are the
    /// events a task deferred ([`crate::TaskHandler::defers_events`]), before it. `events`:
    /// both, in order, each with when it happened.
    pub(crate) async fn commit_terminal(
        &self,
        mut next: Task,
        condition: Condition,
        extra: Vec<Write>,
        events: Vec<(EventKind, Millis)>,
    ) -> Result<Result<(), Refused>, EngineError> {
        debug_assert!(next.state.is_terminal());
        // The events take at most one write each (fewer when the log packs them): the
        // room is counted for the most, and each round places the extra writes after
        // the events it staged.
        let most_fixed = 2 + events.len() + extra.len();
        if most_fixed >= MAX_TRANSACTION_ITEMS {
            return Err(EngineError::Refused(format!(
                "task {} ends with {} extra writes; at most {} fit in one transaction",
                next.id,
                extra.len(),
                MAX_TRANSACTION_ITEMS - 3 - events.len()
            )));
        }
        let room = MAX_TRANSACTION_ITEMS - most_fixed;
        next.notify_pending = self.may_notify(&next).await?;
        let counter = lifecycle::job_counter(next.state).expect("terminal states have a counter");
        for _ in 0..RACE_ROUNDS {
            let first = next.dependents.len().min(room);
            let fan = self
                .dependent_writes(&next, &next.dependents[..first], Millis::now())
                .await?;
            next.advance_pending = next.dependents[first..].to_vec();
            let mut deltas = vec![(counter.to_string(), 1)];
            if !fan.cancelled.is_empty() {
                add_delta(&mut deltas, "cancelled", fan.cancelled.len() as i64);
            }
            let mut writes = vec![
                Write::Put {
                    item: records::task_item(&next),
                    condition: condition.clone(),
                },
                Write::Add {
                    key: records::job_key(next.job_id),
                    deltas,
                },
            ];
            let staged = self
                .ports
                .events
                .stage_all(next.job_id, Some(next.id), events.clone())
                .await?;
            let first_extra = 2 + staged.writes.len();
            let fixed = first_extra + extra.len();
            writes.extend(staged.writes);
            writes.extend(extra.iter().cloned());
            writes.extend(fan.writes);
            match self.ports.store.transact(writes).await {
                Ok(()) => {
                    crate::outcomes::ended(&next);
                    self.after_fanout(&fan.runnable, &fan.cancelled).await?;
                    if !next.advance_pending.is_empty() || next.notify_pending {
                        self.advance(next.id).await?;
                    }
                    return Ok(Ok(()));
                }
                Err(StoreError::Conflict { index: 0, .. }) => return Ok(Err(Refused::Task)),
                Err(StoreError::Conflict { index, .. })
                    if (first_extra..fixed).contains(&index) =>
                {
                    return Ok(Err(Refused::Extra(index - first_extra)));
                }
                // Another writer took the event's sequence number, or a dependent moved:
                // stage and read again.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Unavailable(format!(
            "ending task {} lost {RACE_ROUNDS} races in a row",
            next.id
        ))
        .into())
    }

    async fn after_fanout(
        &self,
        runnable: &[Task],
        cancelled: &[TaskId],
    ) -> Result<(), EngineError> {
        for r in runnable {
            self.offer(r, std::time::Duration::ZERO).await?;
        }
        for c in cancelled {
            Box::pin(self.advance(*c)).await?;
        }
        Ok(())
    }

    /// Finish telling the dependents of an ended task (its `advance_pending`), a chunk
    /// per transaction. Safe to run concurrently and repeatedly.
    pub async fn advance(&self, task_id: TaskId) -> Result<usize, EngineError> {
        let mut advanced = 0;
        loop {
            let mut t = self.task(task_id).await?;
            if !t.state.is_terminal() {
                return Ok(advanced);
            }
            if t.advance_pending.is_empty() {
                if t.notify_pending
                    && let Err(e) = self.raise_ended(&t).await
                {
                    // The task stays due with the flag set; the reaper raises them.
                    tracing::warn!(task_id = %t.id, job_id = %t.job_id, error = %e, "raising the notices of an ended task failed; the reaper retries");
                }
                return Ok(advanced);
            }
            let n = t.advance_pending.len().min(MAX_TRANSACTION_ITEMS - 2);
            let chunk: Vec<TaskId> = t.advance_pending.drain(..n).collect();
            let fan = self.dependent_writes(&t, &chunk, Millis::now()).await?;
            let mut writes = vec![Write::Put {
                item: records::task_item(&t),
                condition: Condition::Rev(t.rev),
            }];
            if !fan.cancelled.is_empty() {
                writes.push(Write::add(
                    records::job_key(t.job_id),
                    "cancelled",
                    fan.cancelled.len() as i64,
                ));
            }
            writes.extend(fan.writes);
            match self.ports.store.transact(writes).await {
                Ok(()) => {
                    advanced += chunk.len();
                    self.after_fanout(&fan.runnable, &fan.cancelled).await?;
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn add_delta(deltas: &mut Vec<(String, i64)>, field: &str, n: i64) {
    match deltas.iter_mut().find(|(f, _)| f == field) {
        Some((_, d)) => *d += n,
        None => deltas.push((field.to_string(), n)),
    }
}
