//! The worker loop: receive deliveries, handle each on its own task up to a
//! concurrency limit, run the reaper on a timer, and on shutdown finish what is in
//! flight.

use crate::Engine;
use crate::dispatch::Handled;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tessera_core::Millis;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Whether a worker loop runs, for the health checks of a process that also serves the
/// API (`tessera serve`): starting until the loop is entered, running while it loops,
/// stopped once it has left — by shutdown or by dying, which a guard notes even when the
/// loop panics.
#[derive(Debug, Clone, Default)]
pub struct LoopHealth(Arc<AtomicU8>);

/// Where a worker loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopState {
    /// Not entered yet.
    Starting,
    /// Receiving and running tasks.
    Running,
    /// Left, for good.
    Stopped,
}

impl LoopHealth {
    /// Where the loop is now.
    pub fn state(&self) -> LoopState {
        match self.0.load(Ordering::Acquire) {
            0 => LoopState::Starting,
            1 => LoopState::Running,
            _ => LoopState::Stopped,
        }
    }

    fn set(&self, s: LoopState) {
        let v = match s {
            LoopState::Starting => 0,
            LoopState::Running => 1,
            LoopState::Stopped => 2,
        };
        self.0.store(v, Ordering::Release);
    }
}

/// Marks the loop stopped when dropped: on return and on unwinding alike.
struct StoppedOnDrop(LoopHealth);

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        self.0.set(LoopState::Stopped);
    }
}

/// The least time an embedded reaper pass may start work in, whatever its interval.
const MIN_REAP_TIME: Duration = Duration::from_secs(2);

/// The fault a test names in `TESSERA_FAULT` to make the worker loop die (panic) right
/// after it starts: a loop cannot otherwise be made to die from outside at will.
pub const LOOP_DIES_FAULT: &str = "worker-loop-dies";

/// A worker: one engine, several deliveries at a time.
pub struct Worker {
    engine: Engine,
    concurrency: usize,
    reap_every: Option<Duration>,
    health: LoopHealth,
}

impl Worker {
    /// A worker running up to `concurrency` tasks at once, reaping every `reap_every`
    /// (none: leave reaping to someone else).
    pub fn new(engine: Engine, concurrency: usize, reap_every: Option<Duration>) -> Self {
        Worker {
            engine,
            concurrency: concurrency.max(1),
            reap_every,
            health: LoopHealth::default(),
        }
    }

    /// Where this worker's loop is (shared: it follows the loop).
    pub fn health(&self) -> LoopHealth {
        self.health.clone()
    }

    /// Run until `shutdown` is cancelled, then wait for the tasks in flight.
    pub async fn run(&self, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let mut reap = tokio::time::interval(self.reap_every.unwrap_or(Duration::from_secs(3600)));
        reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let queue = self.engine.config.queue.clone();
        tracing::info!(owner = %self.engine.config.owner, concurrency = self.concurrency, "worker started");
        let _stopped = StoppedOnDrop(self.health.clone());
        self.health.set(LoopState::Running);
        if std::env::var("TESSERA_FAULT").is_ok_and(|f| f == LOOP_DIES_FAULT) {
            panic!("injected fault {LOOP_DIES_FAULT}: the worker loop dies");
        }
        loop {
            let first = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = reap.tick(), if self.reap_every.is_some() => {
                    // The pass runs in this loop, so no task is received meanwhile: it
                    // may start work for half the interval (at least a floor, so that
                    // a short interval on a loaded machine still gets work done), then
                    // the loop goes on.
                    let every = self.reap_every.unwrap_or_default();
                    let budget = crate::reaper::ReapBudget::within(200, (every / 2).max(MIN_REAP_TIME));
                    match self.engine.reap(Millis::now(), budget).await {
                        Ok(r) if r != Default::default() => tracing::info!(?r, "reaper pass"),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
                    }
                    continue;
                }
                p = slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
            };
            let free = slots.available_permits() + 1;
            let batch = tokio::select! {
                _ = shutdown.cancelled() => break,
                b = self.engine.ports.queue.receive(&queue, free, Duration::from_millis(500)) => b,
            };
            let deliveries = match batch {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, "receive failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let mut permit = Some(first);
            for d in deliveries {
                let p = match permit.take() {
                    Some(p) => p,
                    None => slots
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("semaphore is never closed"),
                };
                let engine = self.engine.clone();
                tokio::spawn(async move {
                    match engine.handle_delivery(&d).await {
                        Ok(Handled::Ran(state)) => tracing::debug!(%state, "delivery handled"),
                        Ok(other) => tracing::debug!(?other, "delivery handled"),
                        // The message stays and comes back after its visibility timeout.
                        Err(e) => {
                            tracing::warn!(error = %e, message_id = %d.message_id, "delivery failed; it will be retried")
                        }
                    }
                    drop(p);
                });
            }
        }
        let _ = slots.acquire_many(self.concurrency as u32).await;
        tracing::info!(owner = %self.engine.config.owner, "worker stopped");
    }
}
