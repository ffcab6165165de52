//! DAG advancement: a task that succeeds tells its dependents, in the same transaction
//! as its own success when they fit, and in idempotent follow-ups when they do not.
//!
//! Each dependent keeps the set of dependencies still pending; removing a parent from it
//! is conditioned on the dependent's revision and is a no-op when already done, so a
//! follow-up repeated by the reaper after a crash changes nothing twice.

use crate::{Engine, EngineError};
use tessera_core::ports::state_store::{Condition, MAX_TRANSACTION_ITEMS, StoreError, Write};
use tessera_core::records;
use tessera_core::task::{Task, TaskState};
use tessera_core::{Millis, TaskId};

/// Dependents advanced per follow-up transaction (one slot is the parent itself).
pub(crate) const FOLLOW_UP_CHUNK: usize = MAX_TRANSACTION_ITEMS - 1;

impl Engine {
    /// Writes that record `parent`'s success on each of `dependents`, and the dependents
    /// those writes make runnable.
    pub(crate) async fn dependent_writes(
        &self,
        parent: TaskId,
        dependents: &[TaskId],
        now: Millis,
    ) -> Result<(Vec<Write>, Vec<Task>), EngineError> {
        let mut writes = Vec::new();
        let mut runnable = Vec::new();
        for id in dependents {
            let Some(item) = self.ports.store.get(&records::task_key(*id)).await? else {
                tracing::warn!(task_id = %id, parent = %parent, "dependent task is missing; skipping it");
                continue;
            };
            let mut d = records::task_from(&item)?;
            if !d.deps_pending.remove(&parent) {
                continue;
            }
            if d.deps_pending.is_empty() && d.state == TaskState::Waiting {
                d.state = TaskState::Queued;
                d.not_before = now;
                runnable.push(d.clone());
            }
            writes.push(Write::Put {
                item: records::task_item(&d),
                condition: Condition::Rev(item.rev),
            });
        }
        Ok((writes, runnable))
    }

    /// Finish telling the dependents of a succeeded task (its `advance_pending`), a
    /// chunk per transaction. Safe to run concurrently and repeatedly.
    pub async fn advance(&self, task_id: TaskId) -> Result<usize, EngineError> {
        let mut advanced = 0;
        loop {
            let Some(item) = self.ports.store.get(&records::task_key(task_id)).await? else {
                return Err(EngineError::NoSuchTask(task_id));
            };
            let mut t = records::task_from(&item)?;
            if t.state != TaskState::Succeeded || t.advance_pending.is_empty() {
                return Ok(advanced);
            }
            let n = t.advance_pending.len().min(FOLLOW_UP_CHUNK);
            let chunk: Vec<TaskId> = t.advance_pending.drain(..n).collect();
            let (mut writes, runnable) = self
                .dependent_writes(task_id, &chunk, Millis::now())
                .await?;
            writes.insert(
                0,
                Write::Put {
                    item: records::task_item(&t),
                    condition: Condition::Rev(item.rev),
                },
            );
            match self.ports.store.transact(writes).await {
                Ok(()) => {
                    advanced += chunk.len();
                    for r in &runnable {
                        self.offer(r, std::time::Duration::ZERO).await?;
                    }
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
