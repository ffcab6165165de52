//! Embedded mode: the engine on a state directory.

use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tessera_core::ports::event_log::StoreEventLog;
use tessera_core::ports::state_store::StateStore;
use tessera_engine::{Engine, EngineConfig, Ports};
use tessera_local::{
    FolderObjectStore, LocalCompute, MemoryGate, MemoryLedger, SqliteQueue, SqliteStateStore,
    StateDir,
};

/// Memory the gate leaves to everything else on the machine.
const MEMORY_RESERVE: u64 = 1 << 30;

/// Open the state directory and build the ports on it.
pub fn ports(dir: &Path) -> anyhow::Result<(StateDir, Ports)> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "state directory {} is a file; pass --state DIR naming a folder",
            dir.display()
        );
    }
    let state = StateDir::open(dir).with_context(|| {
        format!(
            "cannot open state directory {}; pass --state DIR naming a writable folder",
            dir.display()
        )
    })?;
    let store: Arc<dyn StateStore> =
        Arc::new(SqliteStateStore::open(&state.state_db()).with_context(|| {
            format!(
                "cannot open {}; is it a Tessera state database?",
                state.state_db().display()
            )
        })?);
    let queue = SqliteQueue::open(&state.queue_db())
        .with_context(|| format!("cannot open {}", state.queue_db().display()))?;
    let objects = FolderObjectStore::new(state.objects(), state.tmp())
        .with_context(|| format!("cannot open {}", state.objects().display()))?;
    // Heavy stages of every process on this directory share one memory budget.
    let gate = MemoryGate::for_this_machine(MEMORY_RESERVE);
    let ledger = MemoryLedger::open(
        &state.memory_db(),
        &tessera_engine::worker_identity(),
        tessera_local::memory_ledger::RESERVATION_LEASE,
    )
    .with_context(|| format!("cannot open {}", state.memory_db().display()))?;
    gate.share_through(ledger);
    let ports = Ports {
        store: store.clone(),
        queue: Arc::new(queue),
        events: Arc::new(StoreEventLog::new(store)),
        objects: Arc::new(objects),
        compute: Arc::new(LocalCompute::new(gate)),
    };
    Ok((state, ports))
}

/// An engine on the state directory.
pub async fn engine(dir: &Path, lease: Option<Duration>) -> anyhow::Result<(StateDir, Engine)> {
    engine_with(
        dir,
        lease,
        Arc::new(tessera_jobs::photos::FaceService::from_env()),
    )
    .await
}

/// An engine on the state directory whose photo tasks use `faces`.
pub async fn engine_with(
    dir: &Path,
    lease: Option<Duration>,
    faces: Arc<tessera_jobs::photos::FaceService>,
) -> anyhow::Result<(StateDir, Engine)> {
    let (state, ports) = ports(dir)?;
    let mut config = EngineConfig {
        scratch: state.work(),
        ..EngineConfig::default()
    };
    if let Some(l) = lease {
        config = config.with_lease(l);
        config.reoffer_grace = l * 4;
    }
    let engine = Engine::new(ports, config, tessera_jobs::registry_with(faces));
    engine
        .ensure_queue()
        .await
        .context("cannot create the task queue")?;
    Ok((state, engine))
}

/// Whether a lease owner (`host:pid:suffix`, see `tessera_engine::worker_identity`) is a
/// process on this host that no longer exists.
pub fn local_owner_is_dead(owner: &str) -> bool {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let mut parts = owner.split(':');
    let (Some(h), Some(pid)) = (parts.next(), parts.next()) else {
        return false;
    };
    h == host.trim()
        && pid
            .parse::<u32>()
            .is_ok_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists())
}
