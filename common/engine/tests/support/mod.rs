//! Builds an engine on real embedded adapters in a temporary state directory.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;
use tessera_core::ports::state_store::StateStore;
use tessera_engine::{Engine, EngineConfig, JobPlan, Registry, RetryPolicy, TaskPlan, Worker};
use tessera_local::embedded::{self, Memory};
use tessera_local::{FixedMemory, LocalCompute, MemoryGate, SqliteStateStore, StateDir};
use tokio_util::sync::CancellationToken;

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub state: StateDir,
}

impl Harness {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        Harness { dir, state }
    }

    /// A fresh engine (own connections, like another process) on the shared directory.
    pub async fn engine(&self, registry: Registry, lease: Duration) -> Engine {
        self.engine_as(registry, lease, None).await
    }

    /// The same, claiming under lease owner `owner` (a remote job's identity).
    pub async fn engine_as(
        &self,
        registry: Registry,
        lease: Duration,
        owner: Option<String>,
    ) -> Engine {
        let store: Arc<dyn StateStore> =
            Arc::new(SqliteStateStore::open(&self.state.state_db()).unwrap());
        self.engine_on(registry, lease, owner, store).await
    }

    /// The same on `store`: the directory's real store wrapped to inject a fault.
    pub async fn engine_on(
        &self,
        registry: Registry,
        lease: Duration,
        owner: Option<String>,
        store: Arc<dyn StateStore>,
    ) -> Engine {
        let gate = MemoryGate::new(FixedMemory(64 << 30), 64 << 30, 0, 4);
        self.engine_built(registry, lease, owner, store, gate, |_| {})
            .await
    }

    /// An engine whose memory gate is `gate` and whose configuration `tune` adjusts.
    pub async fn engine_gated(
        &self,
        registry: Registry,
        lease: Duration,
        gate: MemoryGate,
        tune: impl FnOnce(&mut EngineConfig),
    ) -> Engine {
        let store: Arc<dyn StateStore> =
            Arc::new(SqliteStateStore::open(&self.state.state_db()).unwrap());
        self.engine_built(registry, lease, None, store, gate, tune)
            .await
    }

    async fn engine_built(
        &self,
        registry: Registry,
        lease: Duration,
        owner: Option<String>,
        store: Arc<dyn StateStore>,
        gate: MemoryGate,
        tune: impl FnOnce(&mut EngineConfig),
    ) -> Engine {
        // Embedded mode's ports, with the store and the memory gate this test names.
        let mut ports = embedded::ports_wrapped(
            &self.state,
            Memory::Fixed { bytes: 64 << 30 },
            |_| store,
            |o| o,
        )
        .unwrap();
        ports.compute = Arc::new(LocalCompute::new(gate));
        let mut config = EngineConfig::default().with_lease(lease);
        config.retry = Some(RetryPolicy {
            base: Duration::from_millis(50),
            cap: Duration::from_millis(200),
        });
        config.reoffer_grace = Duration::from_millis(500);
        if let Some(o) = owner {
            config.owner = o;
        }
        tune(&mut config);
        let engine = Engine::new(ports, config, registry);
        engine.ensure_queue().await.unwrap();
        engine
    }
}

pub fn plan(label: &str, tasks: Vec<TaskPlan>) -> JobPlan {
    JobPlan {
        tenant: tessera_core::TenantId::local(),
        project: None,
        kind: "test".into(),
        label: label.into(),
        spec: serde_json::json!({ "label": label, "nonce": tessera_core::JobId::new().to_string() }),
        priority: 0,
        tasks,
    }
}

/// Run a worker until the job is finished (or the timeout passes).
pub async fn run_until_done(
    engine: &Engine,
    job: tessera_core::JobId,
    timeout: Duration,
) -> tessera_core::job::Job {
    let stop = CancellationToken::new();
    let worker = Worker::new(engine.clone(), 4, Some(Duration::from_millis(200)));
    let s = stop.clone();
    let handle = tokio::spawn(async move { worker.run(s).await });
    let deadline = tokio::time::Instant::now() + timeout;
    let job = loop {
        let j = engine.job(job).await.unwrap();
        if j.is_over() || tokio::time::Instant::now() > deadline {
            break j;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    handle.await.unwrap();
    job
}
