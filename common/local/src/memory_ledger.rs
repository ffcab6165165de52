//! Memory reservations shared by every process on one state directory.
//!
//! Each process's [`MemoryGate`](crate::MemoryGate) admits by its own count and by the
//! measured free memory; a stage admitted by another process has not touched its memory
//! yet when this one measures, so two processes would each admit a heavy stage at once
//! and the OOM kill that follows would read as "needs a bigger class". The ledger closes
//! that gap: a reservation is a row in SQLite, written only if every live reservation
//! plus it fits in the budget (one immediate transaction, so two processes cannot both
//! take the last room), and held under a lease that its process renews. A process that
//! dies stops renewing, and its reservation stops counting when the lease lapses.

use crate::sqlite;
use rusqlite::{Connection, TransactionBehavior, params};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_core::Millis;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_live ON reservations (expires_at);
";

/// How long a reservation counts without renewal.
pub const RESERVATION_LEASE: Duration = Duration::from_secs(30);

/// The shared reservations. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct MemoryLedger {
    conn: Arc<Mutex<Connection>>,
    owner: String,
    lease: Duration,
}

impl std::fmt::Debug for MemoryLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryLedger({})", self.owner)
    }
}

impl MemoryLedger {
    /// Open (creating) the ledger at `path`, reserving as `owner` under `lease`.
    pub fn open(path: &Path, owner: &str, lease: Duration) -> rusqlite::Result<Self> {
        Ok(MemoryLedger {
            conn: Arc::new(Mutex::new(sqlite::open(path, SCHEMA)?)),
            owner: owner.to_string(),
            lease,
        })
    }

    /// How long a reservation counts without renewal.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserve `bytes` if every live reservation plus them fits in `budget`; the
    /// reservation's id, or `None` when it does not fit now.
    pub fn try_reserve(&self, bytes: u64, budget: u64) -> rusqlite::Result<Option<i64>> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = Millis::now().0;
        let live: i64 = tx.query_row(
            "SELECT COALESCE(SUM(bytes), 0) FROM reservations WHERE expires_at > ?1",
            params![now],
            |r| r.get(0),
        )?;
        if (live as u64).saturating_add(bytes) > budget {
            return Ok(None);
        }
        tx.execute(
            "DELETE FROM reservations WHERE expires_at <= ?1",
            params![now],
        )?;
        tx.execute(
            "INSERT INTO reservations (owner, bytes, expires_at) VALUES (?1, ?2, ?3)",
            params![self.owner, bytes as i64, Millis(now).plus(self.lease).0],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Some(id))
    }

    /// Extend reservation `id` by a lease from now; `false` if it had lapsed and gone.
    pub fn renew(&self, id: i64) -> rusqlite::Result<bool> {
        let expires = Millis::now().plus(self.lease).0;
        let n = self.conn().execute(
            "UPDATE reservations SET expires_at = ?1 WHERE id = ?2",
            params![expires, id],
        )?;
        Ok(n == 1)
    }

    /// Give reservation `id` back.
    pub fn release(&self, id: i64) -> rusqlite::Result<()> {
        self.conn()
            .execute("DELETE FROM reservations WHERE id = ?1", params![id])?;
        Ok(())
    }

    /// Bytes held by live reservations of every process.
    pub fn reserved(&self) -> rusqlite::Result<u64> {
        let live: i64 = self.conn().query_row(
            "SELECT COALESCE(SUM(bytes), 0) FROM reservations WHERE expires_at > ?1",
            params![Millis::now().0],
            |r| r.get(0),
        )?;
        Ok(live as u64)
    }
}
