//! How a claimed task's run is recorded, under its fencing epoch, in the one
//! transaction that ends it: success (with the handler's writes and the events it
//! deferred), a stand-down to a newer run, running again with the attempt given back
//! when what it decided from moved on, and a classified failure (retried, escalated,
//! failed, dead or cancelled, with compensations where it ends).

use crate::dag::Refused;
use crate::dispatch::Handled;
use crate::handler::{TaskError, TaskOutput};
use crate::lifecycle;
use crate::{Engine, EngineError};
use tessera_core::Millis;
use tessera_core::event::EventKind;
use tessera_core::ports::event_log::{EventLogError, Fence};
use tessera_core::ports::state_store::{Condition, Item, MAX_TRANSACTION_ITEMS, StoreError, Write};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};

impl Engine {
    /// Record success under the fence, with the cache entry and the handler's writes,
    /// in the one transaction that ends the task.
    pub(crate) async fn complete(
        &self,
        claimed: &Task,
        tenant: &tessera_core::TenantId,
        out: TaskOutput,
        deferred: Vec<(EventKind, Millis)>,
    ) -> Result<Handled, EngineError> {
        let done = lifecycle::succeeded(claimed, out.result.clone(), Millis::now());
        let moved_on = out.moved_on;
        let taken_over = out.taken_over;
        let mut extra = out.writes;
        if let Some(key) = &claimed.cache_key {
            let entry = serde_json::json!({ "result": out.result, "task": claimed.id });
            extra.insert(
                0,
                Write::Put {
                    item: Item::new(records::cache_key(tenant, key), entry),
                    condition: Condition::None,
                },
            );
        }
        let cache_slots = usize::from(claimed.cache_key.is_some());
        if extra.len() + deferred.len() + 3 > MAX_TRANSACTION_ITEMS {
            let e = TaskError::permanent(format!(
                "the handler asked for {} writes with its result and {} events; at most {} fit",
                extra.len() - cache_slots,
                deferred.len(),
                MAX_TRANSACTION_ITEMS - 3 - cache_slots
            ));
            return self.fail_with(claimed, e, None, deferred).await;
        }
        match self
            .commit_terminal(
                done,
                records::fenced(claimed.epoch),
                extra,
                deferred.clone(),
            )
            .await?
        {
            Ok(()) => {
                tracing::info!(task_id = %claimed.id, job_id = %claimed.job_id, epoch = claimed.epoch, "task succeeded");
                Ok(Handled::Ran(TaskState::Succeeded))
            }
            Err(Refused::Task) => Ok(Handled::LostLease),
            Err(Refused::Extra(i)) => {
                let write = i.saturating_sub(cache_slots);
                if i >= cache_slots
                    && let Some(t) = taken_over
                    && t.shown_by(self.ports.store.get(&t.key).await?.as_ref())
                {
                    return self.stand_down(claimed, t, write, deferred).await;
                }
                let message =
                    format!("write #{write} of the task's result conflicted with stored state");
                let err = if i >= cache_slots && moved_on.contains(&write) {
                    TaskError::moved_on(format!("{message}: what the run decided from moved on"))
                } else {
                    TaskError::transient(message)
                };
                self.fail_with(claimed, err, None, deferred).await
            }
        }
    }

    /// End `claimed` succeeded with `taken`'s result and none of its writes (write
    /// `write` conflicted): a newer run owns what it was for ([`crate::TakenOver`]).
    pub(crate) async fn stand_down(
        &self,
        claimed: &Task,
        taken: crate::TakenOver,
        write: usize,
        deferred: Vec<(EventKind, Millis)>,
    ) -> Result<Handled, EngineError> {
        tracing::info!(task_id = %claimed.id, job_id = %claimed.job_id, epoch = claimed.epoch, write, owner = %taken.key.pk, counter = %taken.field, mine = taken.mine, "a newer run took over what this one was for; it ends without its writes");
        let done = lifecycle::succeeded(claimed, taken.result, Millis::now());
        match self
            .commit_terminal(done, records::fenced(claimed.epoch), Vec::new(), deferred)
            .await?
        {
            Ok(()) => Ok(Handled::Ran(TaskState::Succeeded)),
            Err(_) => Ok(Handled::LostLease),
        }
    }

    /// Store `next`, the queued version [`lifecycle::moved_on`] made of `claimed`, and
    /// offer it: the run ended because what it decided from moved on.
    pub(crate) async fn run_again(
        &self,
        claimed: &Task,
        next: Task,
        deferred: Vec<(EventKind, Millis)>,
    ) -> Result<Handled, EngineError> {
        let fence = Fence {
            task: claimed.id,
            epoch: claimed.epoch,
        };
        let why = EventKind::Warning {
            message: format!(
                "task `{}` runs again, its attempt given back ({} of {} such runs): {}",
                claimed.name,
                next.moved_on,
                lifecycle::MOVED_ON_LIMIT,
                next.last_error.as_ref().map_or("", |e| e.message.as_str())
            ),
        };
        if !self
            .store_requeued(claimed, &next, fence, why, deferred)
            .await?
        {
            return Ok(Handled::LostLease);
        }
        tracing::info!(task_id = %claimed.id, job_id = %claimed.job_id, epoch = claimed.epoch, moved_on = next.moved_on, "what the run decided from moved on; it runs again");
        self.offer(&next, next.not_before.since(Millis::now()))
            .await?;
        Ok(Handled::Ran(next.state))
    }

    /// Store `next`, a queued version of the running `claimed`, under the run's fence:
    /// first what the run deferred, then `why` it runs again (a retry is rare: one
    /// append each). `false`: the lease was lost, and nothing of the run's is stored.
    pub(crate) async fn store_requeued(
        &self,
        claimed: &Task,
        next: &Task,
        fence: Fence,
        why: EventKind,
        deferred: Vec<(EventKind, Millis)>,
    ) -> Result<bool, EngineError> {
        for kind in deferred.into_iter().map(|(k, _)| k).chain([why]) {
            match self
                .ports
                .events
                .append(claimed.job_id, Some(claimed.id), kind, Some(fence))
                .await
            {
                Ok(_) => {}
                Err(EventLogError::Fenced(_)) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        match self
            .ports
            .store
            .put(records::task_item(next), records::fenced(claimed.epoch))
            .await
        {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Record a classified failure under the fence: retry, escalate, fail, kill or
    /// cancel, with the job counter and (when dead) the compensations in the same
    /// transaction.
    pub(crate) async fn fail(
        &self,
        claimed: &Task,
        err: TaskError,
        fence: Option<Fence>,
    ) -> Result<Handled, EngineError> {
        self.fail_with(claimed, err, fence, Vec::new()).await
    }

    /// [`Self::fail`], storing first the events the run deferred.
    pub(crate) async fn fail_with(
        &self,
        claimed: &Task,
        err: TaskError,
        fence: Option<Fence>,
        deferred: Vec<(EventKind, Millis)>,
    ) -> Result<Handled, EngineError> {
        // What the run decided from moved on (mid-run, or a write named in
        // `TaskOutput::moved_on` at completion): run again with the attempt given back,
        // until MOVED_ON_LIMIT runs in a row ended so.
        if err.moved_on
            && let Some(next) = lifecycle::moved_on(
                claimed,
                &err.message,
                Millis::now(),
                self.backoff(&claimed.kind)
                    .delay(claimed.moved_on + 1, fastrand::f64()),
            )
        {
            return self.run_again(claimed, next, deferred).await;
        }
        let now = Millis::now();
        let next = lifecycle::failed(
            claimed,
            err.class,
            &err.message,
            now,
            &self.backoff(&claimed.kind),
            fastrand::f64(),
        );
        let fence = fence.unwrap_or(Fence {
            task: claimed.id,
            epoch: claimed.epoch,
        });
        let event = if next.state == TaskState::Queued {
            let why = if next.resource_class != claimed.resource_class {
                format!("retrying in resource class {:?}", next.resource_class)
            } else {
                format!(
                    "retrying in {:.1} s",
                    next.not_before.since(now).as_secs_f64()
                )
            };
            EventKind::Warning {
                message: format!(
                    "task `{}` attempt {} failed ({}): {}; {why}",
                    claimed.name, claimed.attempts, err.class, err.message
                ),
            }
        } else {
            EventKind::Error {
                class: err.class,
                message: format!(
                    "task `{}` {}: {}",
                    claimed.name,
                    next.state,
                    next.last_error.as_ref().map_or("", |e| e.message.as_str())
                ),
            }
        };
        if next.state.is_terminal() {
            let compensations = match (next.state, self.registry.get(&claimed.kind)) {
                (TaskState::Dead | TaskState::Failed, Some(h)) => h.compensate(&next),
                (TaskState::Cancelled, Some(h)) if h.compensates_cancellation() => {
                    h.compensate(&next)
                }
                _ => Vec::new(),
            };
            // The fence is the task write's own condition; the reason goes in with it,
            // after what the run deferred.
            let mut events = deferred;
            events.push((event, now));
            if self
                .commit_compensated(
                    next.clone(),
                    records::fenced(claimed.epoch),
                    compensations,
                    events,
                )
                .await?
                .is_err()
            {
                return Ok(Handled::LostLease);
            }
        } else if !self
            .store_requeued(claimed, &next, fence, event, deferred)
            .await?
        {
            return Ok(Handled::LostLease);
        }
        tracing::warn!(task_id = %claimed.id, job_id = %claimed.job_id, epoch = claimed.epoch, class = %err.class, state = %next.state, error = %err.message, "task failed");
        if next.state == TaskState::Queued {
            self.offer(&next, next.not_before.since(Millis::now()))
                .await?;
        }
        Ok(Handled::Ran(next.state))
    }
}
