//! Task handlers: what a task kind does, and how it reports failure.

use crate::context::TaskContext;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_core::ports::state_store::{ItemKey, Write};
use tessera_core::task::Task;
use tessera_core::{Classify, ErrorClass};

/// A classified failure returned by a handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct TaskError {
    /// What the engine does with it.
    pub class: ErrorClass,
    /// What failed and what to do about it.
    pub message: String,
    /// The run found, before it could finish, that the state it decided from had moved
    /// on (a conditional write it made mid-run conflicted with a change it did not
    /// make): nothing failed, so the task runs again with its attempt given back, as a
    /// conflict on a write named in [`TaskOutput::moved_on`] does at completion.
    pub moved_on: bool,
}

impl TaskError {
    /// Might succeed unchanged later.
    pub fn transient(m: impl Into<String>) -> Self {
        TaskError {
            class: ErrorClass::Transient,
            message: m.into(),
            moved_on: false,
        }
    }
    /// Out of memory or time: retry one resource class up.
    pub fn resource(m: impl Into<String>) -> Self {
        TaskError {
            class: ErrorClass::Resource,
            message: m.into(),
            moved_on: false,
        }
    }
    /// Bad input: fail now.
    pub fn permanent(m: impl Into<String>) -> Self {
        TaskError {
            class: ErrorClass::Permanent,
            message: m.into(),
            moved_on: false,
        }
    }
    /// Cannot even be interpreted: archive now.
    pub fn poison(m: impl Into<String>) -> Self {
        TaskError {
            class: ErrorClass::Poison,
            message: m.into(),
            moved_on: false,
        }
    }
    /// Stopped on request.
    pub fn cancelled(m: impl Into<String>) -> Self {
        TaskError {
            class: ErrorClass::Cancelled,
            message: m.into(),
            moved_on: false,
        }
    }

    /// What the run decided from moved on while it ran ([`TaskError::moved_on`]): run
    /// again with the attempt given back, up to [`crate::lifecycle::MOVED_ON_LIMIT`]
    /// times in a row, then an ordinary transient failure.
    pub fn moved_on(m: impl Into<String>) -> Self {
        TaskError {
            class: ErrorClass::Transient,
            message: m.into(),
            moved_on: true,
        }
    }

    /// Wrap any classified error, keeping its class.
    pub fn from_classified<E: Classify + std::fmt::Display>(e: E) -> Self {
        TaskError {
            class: e.class(),
            message: e.to_string(),
            moved_on: false,
        }
    }
}

macro_rules! from_classified {
    ($($t:ty),*) => {$(
        impl From<$t> for TaskError {
            fn from(e: $t) -> Self {
                TaskError::from_classified(e)
            }
        }
    )*};
}
from_classified!(
    tessera_core::ports::StoreError,
    tessera_core::ports::ObjectStoreError,
    tessera_core::ports::QueueError,
    tessera_core::ports::EventLogError,
    tessera_core::ports::ComputeError,
    tessera_core::spec::SpecError,
    crate::EngineError
);

/// What a successful run produces.
#[derive(Debug, Clone, Default)]
pub struct TaskOutput {
    /// The task's result, kept on the task and given to its dependents.
    pub result: serde_json::Value,
    /// Extra writes committed in the same transaction as the success, under the fence:
    /// effects that must happen exactly when the task is recorded as done.
    pub writes: Vec<Write>,
    /// Which of `writes` check the state the run decided from (a version or revision it
    /// read), where a conflict means only that the state moved on meanwhile: the task
    /// then runs again at once without spending an attempt (see
    /// [`crate::lifecycle::moved_on`]). A conflict on any other write is a transient
    /// failure, retried after a back-off and counted.
    pub moved_on: Vec<usize>,
    /// How to tell, when one of `writes` conflicts, that a newer run has taken over what
    /// this one was for (see [`TakenOver`]); `None`: it never does.
    pub taken_over: Option<TakenOver>,
}

/// A counter that says whether a newer run has taken a run's place. Some state has one
/// owner at a time, and each new owner raises a counter on it as it takes over: a
/// photo's variant version, which every run that decides the photo raises as it stages
/// its files, and only the run whose version the row holds may publish. When a write of
/// a run's output conflicts and the counter at `key`'s `field` is above `mine`, a newer
/// owner took over, and the task ends succeeded with `result` and none of its writes,
/// instead of running again to take the state back. (Two runs of one photo, its first
/// processing and an opt-out's re-decision, did that to each other, each bump undoing
/// the other's, until one ended dead and its compensation unpublished the photo the
/// other had just published.)
///
/// What the owner of the counter keeps true: it only grows, so once read above `mine`
/// it stays so and the read needs no condition; and every run that raised it ends by
/// publishing, by a failure its compensation records, or by a newer run raising it
/// again, so a run that stands down leaves nothing without an owner.
#[derive(Debug, Clone)]
pub struct TakenOver {
    /// The item holding the counter.
    pub key: ItemKey,
    /// The counter: a non-negative integer field of the item's body.
    pub field: String,
    /// The value this run owns (wrote, or read as the current owner's).
    pub mine: u64,
    /// The result the task ends with when it stands down.
    pub result: serde_json::Value,
}

impl TakenOver {
    /// Whether `item` (the counter's item as stored now) shows a newer owner.
    pub fn shown_by(&self, item: Option<&tessera_core::ports::state_store::Item>) -> bool {
        item.and_then(|i| i.body.get(&self.field))
            .and_then(|v| v.as_u64())
            .is_some_and(|v| v > self.mine)
    }
}

impl TaskOutput {
    /// A result with no extra writes.
    pub fn result(result: serde_json::Value) -> Self {
        TaskOutput {
            result,
            writes: Vec::new(),
            moved_on: Vec::new(),
            taken_over: None,
        }
    }
}

/// What a task kind needs from the machine that runs it, beyond the Tessera binary. On
/// AWS each queue's function has a package (a zip with its layers, or a container image)
/// that provides some of these; a kind must only be routed where its needs are met, since
/// a missing engine fails the task permanently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// The COLMAP executable (every reconstruction stage reads its version).
    Colmap,
    /// ONNX Runtime and the face models (detection, recognition).
    FaceRuntime,
}

/// What a task kind does.
#[async_trait]
pub trait TaskHandler: Send + Sync + 'static {
    /// What the machine must provide to run this kind (see [`Need`]).
    fn needs(&self) -> &'static [Need] {
        &[]
    }

    /// Do the work. Long work calls [`TaskContext::checkpoint`] at phase boundaries
    /// and runs subprocesses through the context so cancel can stop them.
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError>;

    /// Whether its runs keep their progress events and store them with their end, in
    /// the transaction that ends the run (after a failure that is tried again, just
    /// before it). Each event stored alone is a read of the log's last number and a
    /// transaction with the fence's check, which for a run of a second or two (a photo's)
    /// cost more than the run's own writes, and shows nothing a watcher could act on
    /// before the run ends. A run that loses its lease stores none of them. Long work
    /// (a reconstruction stage, a sweep) shows its events as they happen.
    fn defers_events(&self) -> bool {
        false
    }

    /// Writes that undo what must not stay visible when the task ends without success —
    /// failed permanently or dead after its last attempt (for example unpublishing a
    /// photo). They commit in the same transaction as that final state. `task` is the task
    /// in that final state: its `last_error` says why, for records people read.
    fn compensate(&self, _task: &Task) -> Vec<Write> {
        Vec::new()
    }

    /// Whether [`Self::compensate`] also runs when the task ends cancelled (its job
    /// cancelled by someone, while the task waited, was queued or ran). For a kind whose
    /// run can leave state half-done that only its own success would finish: a photo's
    /// run stages a version (unpublishing the photo) that only its publication ends, and
    /// an older run of the photo stood down to it.
    fn compensates_cancellation(&self) -> bool {
        false
    }

    /// Whether [`Self::notices`] may return any: the engine looks at the end of a task
    /// that does not end its job only for handlers that say so.
    fn raises_notices(&self) -> bool {
        false
    }

    /// The notices the end of `task` raises besides its job's (a photo published or
    /// failed, a sweep finished), with `job` as it stands after the task's terminal
    /// commit. Called once that commit is stored, possibly more than once (notice ids
    /// make a repeat harmless).
    fn notices(
        &self,
        _task: &Task,
        _job: &tessera_core::job::Job,
    ) -> Vec<tessera_core::notify::Notice> {
        Vec::new()
    }
}

/// Handlers by task kind.
#[derive(Default, Clone)]
pub struct Registry {
    handlers: HashMap<String, Arc<dyn TaskHandler>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `handler` for `kind` (replacing any earlier one).
    pub fn register(&mut self, kind: &str, handler: impl TaskHandler) -> &mut Self {
        self.handlers.insert(kind.to_string(), Arc::new(handler));
        self
    }

    /// The handler for `kind`.
    pub fn get(&self, kind: &str) -> Option<Arc<dyn TaskHandler>> {
        self.handlers.get(kind).cloned()
    }

    /// What running `kind` needs (nothing for an unknown kind: it is archived as poison
    /// wherever it lands).
    pub fn needs(&self, kind: &str) -> &'static [Need] {
        self.handlers.get(kind).map_or(&[], |h| h.needs())
    }

    /// Registered kinds, sorted.
    pub fn kinds(&self) -> Vec<String> {
        let mut k: Vec<_> = self.handlers.keys().cloned().collect();
        k.sort();
        k
    }
}
