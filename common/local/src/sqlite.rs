//! Opening SQLite the same way everywhere.

use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::time::Duration;

/// How long a writer waits for another process's lock before reporting the store busy.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Open (creating if needed) a database in WAL mode with a busy timeout.
///
/// `synchronous = NORMAL` in WAL mode keeps every committed transaction across a process
/// crash (SIGKILL); only an OS crash or power loss can drop the last commits.
///
/// Two processes opening a new database at once (`tessera serve` and `tessera worker`
/// started together on a fresh state directory) contend for the switch to WAL, which
/// SQLite answers `SQLITE_BUSY` at once instead of through the busy handler: that setup
/// is retried here, within the same [`BUSY_TIMEOUT`].
pub(crate) fn open(path: &Path, schema: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let started = std::time::Instant::now();
    loop {
        match set_up(&conn, schema) {
            Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10 + fastrand::u64(..40)));
            }
            other => return other.map(|()| conn),
        }
    }
}

fn set_up(conn: &Connection, schema: &str) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.execute_batch(schema)
}

/// True for errors that mean "another process holds the lock".
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked)
    )
}
