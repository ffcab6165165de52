//! Embedded mode: the engine on a state directory.

use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tessera_engine::{Engine, EngineConfig, Ports};
use tessera_local::StateDir;
use tessera_local::embedded::{self, Memory};

/// Open the state directory and build the ports on it.
pub fn ports(dir: &Path) -> anyhow::Result<(StateDir, Ports)> {
    let state = embedded::state_dir(dir)?;
    let ports = embedded::ports(
        &state,
        Memory::this_machine(tessera_engine::worker_identity()),
    )?;
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
