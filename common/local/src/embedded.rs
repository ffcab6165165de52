//! Embedded mode's ports on one state directory: SQLite for state and the queue, events
//! in the state store, a folder as the object store, local processes under a memory
//! gate; the engine's scratch space is the directory's `work/` ([`StateDir::work`]). Every way embedded mode runs — `tessera`'s commands, `tessera serve`, and the
//! tests of each crate — builds its ports here, so a test's world is the one a user
//! gets; what a test changes (a wrapper that makes a race certain, a memory budget that
//! is the same on every machine) it says by name.

use crate::{
    FixedMemory, FolderObjectStore, LocalCompute, MemoryGate, MemoryLedger, SqliteQueue,
    SqliteStateStore, StateDir,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_core::ports::event_log::StoreEventLog;
use tessera_core::ports::{ObjectStore, Ports, StateStore};

/// The memory heavy stages may take at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Memory {
    /// What this machine has available, less `reserve` bytes for everything else, shared
    /// with every other process on the state directory through its ledger, where this
    /// process's reservations are `owner`'s. What a user gets.
    ThisMachine {
        /// Bytes left to the rest of the machine.
        reserve: u64,
        /// This process in the ledger (`tessera_engine::worker_identity`).
        owner: String,
    },
    /// A fixed budget of `bytes` whatever the machine has, not shared: tests whose
    /// admissions must not depend on the machine they run on.
    Fixed {
        /// Bytes admitted at once.
        bytes: u64,
    },
}

/// Memory `tessera`'s commands leave to everything else on the machine.
pub const MACHINE_RESERVE: u64 = 1 << 30;

impl Memory {
    /// This machine's memory less [`MACHINE_RESERVE`], shared under `owner`.
    pub fn this_machine(owner: String) -> Self {
        Memory::ThisMachine {
            reserve: MACHINE_RESERVE,
            owner,
        }
    }
}

/// A part of the state directory that could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open {}: {why}; {hint}", path.display())]
pub struct OpenError {
    /// The file or folder.
    pub path: PathBuf,
    /// What failed.
    pub why: String,
    /// What to do.
    pub hint: &'static str,
}

fn open_error(path: &Path, hint: &'static str) -> impl FnOnce(String) -> OpenError {
    let path = path.to_path_buf();
    move |why| OpenError { path, why, hint }
}

/// Open (creating if needed) the state directory at `root`.
pub fn state_dir(root: &Path) -> Result<StateDir, OpenError> {
    if root.exists() && !root.is_dir() {
        return Err(OpenError {
            path: root.to_path_buf(),
            why: "it is a file".into(),
            hint: "pass --state DIR naming a folder",
        });
    }
    StateDir::open(root)
        .map_err(|e| open_error(root, "pass --state DIR naming a writable folder")(e.to_string()))
}

/// The ports of embedded mode on `state`.
pub fn ports(state: &StateDir, memory: Memory) -> Result<Ports, OpenError> {
    ports_wrapped(state, memory, |s| s, |o| o)
}

/// [`ports`], with the state store and the object store as `store` and `objects` return
/// them (a test's wrapper that counts requests or injects a fault into the real store).
/// Events go through the wrapped state store, as they would through the real one.
pub fn ports_wrapped(
    state: &StateDir,
    memory: Memory,
    store: impl FnOnce(Arc<dyn StateStore>) -> Arc<dyn StateStore>,
    objects: impl FnOnce(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>,
) -> Result<Ports, OpenError> {
    let db = state.state_db();
    let sqlite = SqliteStateStore::open(&db)
        .map_err(|e| open_error(&db, "is it a Tessera state database?")(e.to_string()))?;
    let store = store(Arc::new(sqlite));
    let queue_db = state.queue_db();
    let queue = SqliteQueue::open(&queue_db)
        .map_err(|e| open_error(&queue_db, "is it a Tessera queue database?")(e.to_string()))?;
    let folder = state.objects();
    let folder_store = FolderObjectStore::new(&folder, state.tmp())
        .map_err(|e| open_error(&folder, "is the state directory writable?")(e.to_string()))?;
    let gate = match memory {
        Memory::ThisMachine { reserve, owner } => {
            let gate = MemoryGate::for_this_machine(reserve);
            let ledger_db = state.memory_db();
            let ledger =
                MemoryLedger::open(&ledger_db, &owner, crate::memory_ledger::RESERVATION_LEASE)
                    .map_err(|e| {
                        open_error(&ledger_db, "is the state directory writable?")(e.to_string())
                    })?;
            gate.share_through(ledger);
            gate
        }
        Memory::Fixed { bytes } => MemoryGate::new(FixedMemory(bytes), bytes, 0, 4),
    };
    Ok(Ports {
        store: store.clone(),
        queue: Arc::new(queue),
        events: Arc::new(StoreEventLog::new(store)),
        objects: objects(Arc::new(folder_store)),
        compute: Arc::new(LocalCompute::new(gate)),
    })
}
