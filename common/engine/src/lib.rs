//! The engine: one code path for every job type and every queue.
//!
//! The state store is the truth; a queue message only says "task X may be runnable".
//! Deliveries are at least once, so every step is idempotent and every effect is a
//! conditional write:
//!
//! - **claim** ([`dispatch`]) is one conditional write that bumps the task's fencing
//!   epoch; of two racing workers exactly one wins;
//! - a **heartbeat** runs beside the work and renews the lease under the epoch; losing
//!   it cancels the work (and kills its subprocesses);
//! - every write a worker makes (events, results, effects) carries the epoch condition,
//!   so a worker presumed dead that comes back is refused;
//! - failures are **classified** before any retry ([`lifecycle`]); the attempt ceiling
//!   ends in `dead` with the handler's compensating writes in the same transaction;
//! - finishing a task makes its dependents runnable in the same transaction ([`dag`]);
//! - a task whose end is news to a webhook raises its notices ([`notify`]) in one
//!   transaction with their deliveries;
//! - the **reaper** ([`reaper`]) re-offers expired leases and lost messages.
#![deny(missing_docs)]

pub mod context;
pub mod control;
pub mod dag;
pub mod dispatch;
pub mod ending;
pub mod error;
pub mod handler;
pub mod lifecycle;
pub mod notify;
pub mod outcomes;
pub mod plan;
pub mod reaper;
pub mod remote;
pub mod retry;
pub mod worker;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use context::TaskContext;
pub use error::EngineError;
pub use handler::{Need, Registry, TakenOver, TaskError, TaskHandler, TaskOutput};
pub use plan::{JobPlan, PREPARED_RESERVE, Prepared, Submitted, TaskPlan};
pub use retry::RetryPolicy;
pub use worker::{LoopHealth, LoopState, Worker};

/// The adapters the engine runs on.
pub use tessera_core::ports::Ports;

/// How the engine behaves.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The task queue's name.
    pub queue: String,
    /// How long a claim holds a task without a heartbeat.
    pub lease: Duration,
    /// How often the heartbeat renews the lease (well under `lease`); also how soon a
    /// revoked lease is noticed.
    pub heartbeat_every: Duration,
    /// Back-off for transient failures of every kind, in place of the attempt policy
    /// table's (`tessera_core::attempts`): for drills and tests that cannot wait a
    /// policy's seconds. `None` in every deployment.
    pub retry: Option<RetryPolicy>,
    /// Who this worker is, for leases and logs.
    pub owner: String,
    /// Local scratch space for tasks (per job: `<scratch>/<job id>`): a state
    /// directory's `work/` in embedded mode, `/tmp` in a Lambda or container.
    pub scratch: std::path::PathBuf,
    /// Which queue each task is offered on; by default every task goes to `queue`.
    pub routes: QueueRoutes,
    /// The reaper leaves queued tasks alone until they have been due this long, so it
    /// only re-offers tasks whose message was really lost.
    pub reoffer_grace: Duration,
    /// How long a heavy task waits for the memory gate before it gives its worker slot
    /// back and its message is offered again: a wait with no bound would hold the slot
    /// while the light tasks behind it queue.
    pub admission_wait: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            queue: "tasks".into(),
            lease: Duration::from_secs(30),
            heartbeat_every: Duration::from_secs(2),
            retry: None,
            owner: worker_identity(),
            reoffer_grace: Duration::from_secs(60),
            admission_wait: Duration::from_secs(60),
            routes: QueueRoutes::default(),
            scratch: std::env::temp_dir().join("tessera-scratch"),
        }
    }
}

/// How long a Batch container's claim holds its task without a heartbeat. Its stage may
/// run for hours, and with the 30 s lease of a function a container stalled for half a
/// minute (a throttled store, a pause under memory pressure, a network hiccup) lost its
/// task to the reaper, which launched a second Batch job for the same stage. A container
/// that dies is closed at once by Batch's job-state event ([`remote`]); the lease is only
/// the fallback when that event is lost.
pub const CONTAINER_LEASE: Duration = Duration::from_secs(300);

impl EngineConfig {
    /// This config as a Batch container runs it: the [`CONTAINER_LEASE`], renewed every
    /// 20 s (a forced cancel is noticed within that; fifteen times fewer heartbeat
    /// writes an hour than a function's).
    pub fn for_container(mut self) -> Self {
        self.lease = CONTAINER_LEASE;
        self.heartbeat_every = Duration::from_secs(20);
        self
    }

    /// This config with a lease of `lease` and a heartbeat every third of it, at most
    /// every 2 s: the heartbeat is also how a worker learns its lease was revoked (a
    /// forced cancel), so it should not wait long.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.heartbeat_every = (lease / 3).min(Duration::from_secs(2));
        self
    }
}

/// Which queue a task is offered on. Embedded mode has one queue for everything; on
/// AWS each job type has its own queue and Lambda function, and heavy tasks go to the
/// orchestrator, which hands them to Batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRoutes {
    /// Task kind → queue.
    pub by_kind: std::collections::BTreeMap<String, String>,
    /// Queue for tasks of a heavy resource class, whatever their kind.
    pub heavy: Option<String>,
    /// Queue for a kind without a route (none: the engine's own queue).
    pub fallback: Option<String>,
}

impl QueueRoutes {
    /// The queue `task` is offered on; `own` is the engine's queue.
    pub fn queue_for<'a>(&'a self, task: &tessera_core::task::Task, own: &'a str) -> &'a str {
        self.queue_for_kind(&task.kind, task.resource_class, own)
    }

    /// The queue a task of `kind` in resource class `class` is offered on.
    pub fn queue_for_kind<'a>(
        &'a self,
        kind: &str,
        class: tessera_core::task::ResourceClass,
        own: &'a str,
    ) -> &'a str {
        if class.is_heavy()
            && let Some(q) = &self.heavy
        {
            return q;
        }
        self.by_kind
            .get(kind)
            .or(self.fallback.as_ref())
            .map_or(own, String::as_str)
    }

    /// Every queue a route names (to create them, or to check they exist).
    pub fn queues(&self) -> std::collections::BTreeSet<&str> {
        self.by_kind
            .values()
            .chain(&self.heavy)
            .chain(&self.fallback)
            .map(String::as_str)
            .collect()
    }
}

/// `host:pid:random`, unique per worker process start.
pub fn worker_identity() -> String {
    let host =
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "host".into());
    format!(
        "{}:{}:{:04x}",
        host.trim(),
        std::process::id(),
        fastrand::u16(..)
    )
}

/// Latencies the engine measured, for benchmarks.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Claim latencies in microseconds (the conditional write and its read).
    pub claim_micros: Mutex<Vec<u32>>,
}

/// The engine: ports, configuration and the task handlers.
#[derive(Clone)]
pub struct Engine {
    pub(crate) ports: Ports,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) stats: Option<Arc<EngineStats>>,
    pub(crate) webhooks: notify::WebhookCache,
    /// Where every notice also goes (EventBridge on AWS); none in embedded mode.
    pub(crate) bus: Option<Arc<dyn tessera_core::ports::NoticeBus>>,
}

impl Engine {
    /// An engine on `ports` running the handlers in `registry`.
    pub fn new(ports: Ports, config: EngineConfig, registry: Registry) -> Self {
        Engine {
            ports,
            config: Arc::new(config),
            registry: Arc::new(registry),
            stats: None,
            webhooks: Default::default(),
            bus: None,
        }
    }

    /// Publish every notice to `bus` as well as to the tenants' webhooks. With a bus,
    /// the end of every task that may be news is looked at, whether or not its tenant
    /// has a webhook.
    pub fn with_notice_bus(mut self, bus: Arc<dyn tessera_core::ports::NoticeBus>) -> Self {
        self.bus = Some(bus);
        self
    }

    /// Record latencies into `stats`.
    pub fn with_stats(mut self, stats: Arc<EngineStats>) -> Self {
        self.stats = Some(stats);
        self
    }

    /// The back-off for a failed try of a task of kind `kind`.
    pub(crate) fn backoff(&self, kind: &str) -> RetryPolicy {
        self.config
            .retry
            .unwrap_or_else(|| RetryPolicy::for_kind(kind))
    }

    /// The ports.
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Create the task queue, and every queue a route names, if missing.
    pub async fn ensure_queue(&self) -> Result<(), EngineError> {
        let settings = tessera_core::ports::QueueSettings {
            visibility: self.config.lease,
            max_receives: 50,
        };
        let mut queues = self.config.routes.queues();
        queues.insert(&self.config.queue);
        for q in queues {
            self.ports.queue.ensure(q, settings).await?;
        }
        Ok(())
    }
}
