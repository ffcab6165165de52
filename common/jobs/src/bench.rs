//! Task kinds for measuring the engine itself.
//!
//! - `bench.noop` does nothing: claim + complete throughput.
//! - `bench.sleep` sleeps for the payload's `ms` in small steps, emitting a progress
//!   event at start and end, and commits one *effect* record keyed by its epoch in the
//!   same fenced transaction as its success. After a chaos run, a task with more than
//!   one effect, or an effect from an epoch other than its final one, proves that two
//!   workers ran it at once and both committed.

use async_trait::async_trait;
use std::time::Duration;
use tessera_core::event::Phase;
use tessera_core::ports::state_store::{Condition, Item, ItemKey, Write};
use tessera_core::{Millis, TaskId};
use tessera_engine::{Registry, TaskContext, TaskError, TaskHandler, TaskOutput};

/// Partition of a task's effect records.
pub fn effect_partition(task: TaskId) -> String {
    format!("EFFECT#{task}")
}

struct Noop;

#[async_trait]
impl TaskHandler for Noop {
    async fn run(&self, _ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        Ok(TaskOutput::result(serde_json::Value::Null))
    }
}

struct Sleep;

#[async_trait]
impl TaskHandler for Sleep {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let ms = ctx.task().payload["ms"].as_u64().unwrap_or(100);
        let started_at = Millis::now();
        let started = ctx.phase_started(Phase::BackendAction).await?;
        let mut slept = 0;
        while slept < ms {
            let step = (ms - slept).min(25);
            tokio::time::sleep(Duration::from_millis(step)).await;
            slept += step;
        }
        ctx.phase_completed(Phase::BackendAction, started).await?;
        let t = ctx.task();
        let effect = Item::new(
            ItemKey::new(effect_partition(t.id), format!("{:08}", t.epoch)),
            serde_json::json!({
                "epoch": t.epoch,
                "owner": t.lease.as_ref().map(|l| l.owner.clone()),
                "started_at": started_at,
                "finished_at": Millis::now(),
            }),
        );
        Ok(TaskOutput {
            result: serde_json::json!({ "slept_ms": ms }),
            writes: vec![Write::Put {
                item: effect,
                condition: Condition::Absent,
            }],
            moved_on: Vec::new(),
            taken_over: None,
        })
    }
}

/// Register the bench task kinds.
pub fn register(r: &mut Registry) {
    r.register("bench.noop", Noop);
    r.register("bench.sleep", Sleep);
}
