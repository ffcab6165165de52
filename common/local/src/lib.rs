//! Embedded adapters: everything Tessera needs on one machine, with no server to start.
//!
//! A state directory holds `state.db` (SQLite, WAL: items for state and events),
//! `queue.db` (SQLite: the durable queue) and `objects/` (the object store). Several
//! processes may open the same directory at once: SQLite's locking serialises writers
//! and every multi-step change runs in one `BEGIN IMMEDIATE` transaction.
#![deny(missing_docs)]

pub mod compute;
pub mod embedded;
pub mod memory_gate;
pub mod memory_ledger;
pub mod object_store;
pub mod process;
pub mod queue;
mod sqlite;
pub mod state_dir;
pub mod state_store;

pub use compute::LocalCompute;
pub use memory_gate::{FixedMemory, MemoryGate, MemoryProbe, ProcMeminfo};
pub use memory_ledger::MemoryLedger;
pub use object_store::FolderObjectStore;
pub use queue::SqliteQueue;
pub use state_dir::StateDir;
pub use state_store::SqliteStateStore;
