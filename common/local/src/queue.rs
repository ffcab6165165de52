//! A durable queue on SQLite with SQS's semantics: visibility timeout, receive counts,
//! redrive to `<name>-dlq` after `max_receives` deliveries, and receipts that are valid
//! for one delivery only.

use crate::sqlite;
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_core::Millis;
use tessera_core::ports::queue::{Delivery, Queue, QueueDepth, QueueError, QueueSettings, Turn};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY,
    visibility_ms INTEGER NOT NULL,
    max_receives INTEGER NOT NULL,
    dead_letter TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    body TEXT NOT NULL,
    visible_at INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt TEXT,
    sent_at INTEGER NOT NULL,
    dead_reason TEXT,
    lane TEXT NOT NULL DEFAULT '',
    priority INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, visible_at);
CREATE UNIQUE INDEX IF NOT EXISTS messages_receipt ON messages (receipt) WHERE receipt IS NOT NULL;
";

/// The SQLite queue. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct SqliteQueue {
    conn: Arc<Mutex<Connection>>,
}

fn unavailable(e: rusqlite::Error) -> QueueError {
    QueueError::Unavailable(e.to_string())
}

struct QueueRow {
    visibility: Duration,
    max_receives: u32,
    dead_letter: Option<String>,
}

fn queue_row(conn: &Connection, name: &str) -> Result<QueueRow, QueueError> {
    conn.query_row(
        "SELECT visibility_ms, max_receives, dead_letter FROM queues WHERE name = ?1",
        params![name],
        |r| {
            Ok(QueueRow {
                visibility: Duration::from_millis(r.get::<_, i64>(0)? as u64),
                max_receives: r.get::<_, i64>(1)? as u32,
                dead_letter: r.get(2)?,
            })
        },
    )
    .optional()
    .map_err(unavailable)?
    .ok_or_else(|| QueueError::NoSuchQueue(name.to_string()))
}

/// A queue database made before messages had lanes gets the columns (its messages all
/// wait in the no-tenant lane).
fn add_turn_columns(conn: &Connection) -> rusqlite::Result<()> {
    let has_lane: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('messages') WHERE name = 'lane'",
        [],
        |r| r.get(0),
    )?;
    if !has_lane {
        conn.execute_batch(
            "ALTER TABLE messages ADD COLUMN lane TEXT NOT NULL DEFAULT '';
             ALTER TABLE messages ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;",
        )?;
    }
    // Each lane's next messages in turn order, read from an index: a receive costs the
    // lanes times a few index steps, not a sort of every waiting message (a burst of
    // 10,000 photos would otherwise sort 10,000 rows per receive).
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS messages_turns ON messages (queue, lane, priority DESC, visible_at);",
    )?;
    Ok(())
}

/// One lane's next visible messages, in its turn order. The index is named: without
/// statistics the planner takes the (queue, visible_at) index and sorts every visible
/// message of the queue, which made a receive ten times dearer at 10,000 waiting.
const LANE_NEXT: &str =
    "SELECT id, body, receive_count, visible_at, rowid FROM messages INDEXED BY messages_turns
     WHERE queue = ?1 AND lane = ?2 AND visible_at <= ?3
     ORDER BY priority DESC, visible_at, rowid LIMIT ?4";

/// Up to `limit` visible messages of `queue` in turn order: every lane's first before
/// any lane's second; within a lane higher priority first, then the oldest; between
/// lanes in one round the oldest first, the rowid breaking ties within a millisecond in
/// the order messages were sent.
fn turn_candidates(
    tx: &Connection,
    queue: &str,
    now: i64,
    limit: usize,
) -> Result<Vec<(String, String, u32)>, QueueError> {
    // The lanes with any message, one index seek each (a skip scan written out).
    let lanes: Vec<String> = {
        let mut stmt = tx
            .prepare_cached(
                "WITH RECURSIVE lanes(lane) AS (
                   SELECT (SELECT MIN(lane) FROM messages WHERE queue = ?1)
                   UNION ALL
                   SELECT (SELECT MIN(lane) FROM messages WHERE queue = ?1 AND lane > lanes.lane)
                   FROM lanes WHERE lanes.lane IS NOT NULL)
                 SELECT lane FROM lanes WHERE lane IS NOT NULL",
            )
            .map_err(unavailable)?;
        stmt.query_map(params![queue], |r| r.get(0))
            .map_err(unavailable)?
            .collect::<Result<_, _>>()
            .map_err(unavailable)?
    };
    // (turn, visible_at, rowid, id, body, receive_count)
    let mut all: Vec<(usize, i64, i64, String, String, u32)> = Vec::new();
    let mut stmt = tx.prepare_cached(LANE_NEXT).map_err(unavailable)?;
    for lane in &lanes {
        let rows = stmt
            .query_map(params![queue, lane, now, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)? as u32,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })
            .map_err(unavailable)?;
        for (turn, row) in rows.enumerate() {
            let (id, body, count, visible_at, rowid) = row.map_err(unavailable)?;
            all.push((turn, visible_at, rowid, id, body, count));
        }
    }
    all.sort_by_key(|c| (c.0, c.1, c.2));
    all.truncate(limit);
    Ok(all
        .into_iter()
        .map(|(_, _, _, id, body, count)| (id, body, count))
        .collect())
}

impl SqliteQueue {
    /// Open or create the queue database at `path`.
    pub fn open(path: &Path) -> Result<Self, QueueError> {
        let conn = sqlite::open(path, SCHEMA).map_err(unavailable)?;
        add_turn_columns(&conn).map_err(unavailable)?;
        Ok(SqliteQueue {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, QueueError> + Send + 'static,
    ) -> Result<T, QueueError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || f(&mut conn.lock().unwrap_or_else(|p| p.into_inner())))
            .await
            .map_err(|e| QueueError::Unavailable(format!("queue worker thread failed: {e}")))?
    }

    fn receive_now(
        conn: &mut Connection,
        queue: &str,
        max: usize,
    ) -> Result<Vec<Delivery>, QueueError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(unavailable)?;
        let settings = queue_row(&tx, queue)?;
        let now = Millis::now().0;
        let candidates = turn_candidates(&tx, queue, now, (max * 2).max(1))?;
        let mut out = Vec::new();
        for (id, body, count) in candidates {
            if out.len() >= max {
                break;
            }
            if count >= settings.max_receives {
                // SQS redrive: a message received max_receives times moves to the DLQ
                // on its next receive instead of being delivered again.
                let dlq = settings
                    .dead_letter
                    .clone()
                    .unwrap_or_else(|| format!("{queue}-dlq"));
                tx.execute(
                    "UPDATE messages SET queue = ?1, visible_at = ?2, receipt = NULL,
                     dead_reason = 'received ' || receive_count || ' times without being deleted' WHERE id = ?3",
                    params![dlq, now, id],
                )
                .map_err(unavailable)?;
                continue;
            }
            let receipt = ulid::Ulid::new().to_string();
            let visible_at = Millis(now).plus(settings.visibility).0;
            tx.execute(
                "UPDATE messages SET visible_at = ?1, receive_count = receive_count + 1, receipt = ?2 WHERE id = ?3",
                params![visible_at, receipt, id],
            )
            .map_err(unavailable)?;
            out.push(Delivery {
                message_id: id,
                receipt,
                body,
                receive_count: count + 1,
            });
        }
        tx.commit().map_err(unavailable)?;
        Ok(out)
    }

    /// Messages in the dead-letter queue of `queue`, with why they are there (for
    /// `tessera` diagnostics and tests).
    pub async fn dead_letters(
        &self,
        queue: &str,
    ) -> Result<Vec<(String, Option<String>)>, QueueError> {
        let dlq = format!("{queue}-dlq");
        self.with_conn(move |c| {
            let mut stmt = c
                .prepare("SELECT body, dead_reason FROM messages WHERE queue = ?1 ORDER BY id")
                .map_err(unavailable)?;
            stmt.query_map(params![dlq], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(unavailable)?
                .collect::<Result<_, _>>()
                .map_err(unavailable)
        })
        .await
    }
}

fn check_name(queue: &str) -> Result<(), QueueError> {
    let ok = !queue.is_empty()
        && queue.len() <= 80
        && queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(QueueError::Invalid(format!(
            "queue name `{queue}`: use 1-80 letters, digits, `-` or `_`"
        )))
    }
}

#[async_trait]
impl Queue for SqliteQueue {
    async fn ensure(&self, queue: &str, settings: QueueSettings) -> Result<(), QueueError> {
        check_name(queue)?;
        if settings.max_receives == 0 {
            return Err(QueueError::Invalid(
                "max_receives must be at least 1".into(),
            ));
        }
        let queue = queue.to_string();
        self.with_conn(move |c| {
            let dlq = format!("{queue}-dlq");
            c.execute(
                "INSERT INTO queues (name, visibility_ms, max_receives, dead_letter) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET visibility_ms = excluded.visibility_ms,
                   max_receives = excluded.max_receives, dead_letter = excluded.dead_letter",
                params![queue, settings.visibility.as_millis() as i64, settings.max_receives, dlq],
            )
            .map_err(unavailable)?;
            c.execute(
                "INSERT OR IGNORE INTO queues (name, visibility_ms, max_receives, dead_letter) VALUES (?1, ?2, ?3, NULL)",
                params![dlq, settings.visibility.as_millis() as i64, u32::MAX],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn send_in_turn(
        &self,
        queue: &str,
        body: &str,
        delay: Duration,
        turn: &Turn,
    ) -> Result<String, QueueError> {
        tessera_core::ports::queue::check_body(body)?;
        let (queue, body, turn) = (queue.to_string(), body.to_string(), turn.clone());
        self.with_conn(move |c| {
            queue_row(c, &queue)?;
            let id = ulid::Ulid::new().to_string();
            let now = Millis::now();
            c.execute(
                "INSERT INTO messages (id, queue, body, visible_at, sent_at, lane, priority)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id,
                    queue,
                    body,
                    now.plus(delay).0,
                    now.0,
                    turn.lane,
                    turn.priority
                ],
            )
            .map_err(unavailable)?;
            Ok(id)
        })
        .await
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(5);
        loop {
            let q = queue.to_string();
            let got = self
                .with_conn(move |c| Self::receive_now(c, &q, max.max(1)))
                .await?;
            if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            // Long polling by polling: a cheap indexed read, backing off to 100 ms.
            tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    async fn delete(&self, queue: &str, receipt: &str) -> Result<(), QueueError> {
        let (queue, receipt) = (queue.to_string(), receipt.to_string());
        self.with_conn(move |c| {
            let n = c
                .execute(
                    "DELETE FROM messages WHERE queue = ?1 AND receipt = ?2",
                    params![queue, receipt],
                )
                .map_err(unavailable)?;
            if n == 0 {
                Err(QueueError::StaleReceipt(receipt))
            } else {
                Ok(())
            }
        })
        .await
    }

    async fn extend(
        &self,
        queue: &str,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), QueueError> {
        let (queue, receipt) = (queue.to_string(), receipt.to_string());
        self.with_conn(move |c| {
            let n = c
                .execute(
                    "UPDATE messages SET visible_at = ?1 WHERE queue = ?2 AND receipt = ?3",
                    params![Millis::now().plus(visibility).0, queue, receipt],
                )
                .map_err(unavailable)?;
            if n == 0 {
                Err(QueueError::StaleReceipt(receipt))
            } else {
                Ok(())
            }
        })
        .await
    }

    async fn archive(
        &self,
        queue: &str,
        delivery: &Delivery,
        reason: &str,
    ) -> Result<(), QueueError> {
        let (queue, receipt, reason) = (
            queue.to_string(),
            delivery.receipt.clone(),
            reason.to_string(),
        );
        self.with_conn(move |c| {
            let dlq = queue_row(c, &queue)?.dead_letter.unwrap_or_else(|| format!("{queue}-dlq"));
            let n = c
                .execute(
                    "UPDATE messages SET queue = ?1, receipt = NULL, visible_at = ?2, dead_reason = ?3
                     WHERE queue = ?4 AND receipt = ?5",
                    params![dlq, Millis::now().0, reason, queue, receipt],
                )
                .map_err(unavailable)?;
            if n == 0 { Err(QueueError::StaleReceipt(receipt)) } else { Ok(()) }
        })
        .await
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, QueueError> {
        let queue = queue.to_string();
        self.with_conn(move |c| {
            let dlq = queue_row(c, &queue)?
                .dead_letter
                .unwrap_or_else(|| format!("{queue}-dlq"));
            let now = Millis::now().0;
            let count = |sql: &str, a: &str| -> Result<u64, QueueError> {
                c.query_row(sql, params![a, now], |r| r.get::<_, i64>(0))
                    .map(|n| n as u64)
                    .map_err(unavailable)
            };
            Ok(QueueDepth {
                visible: count(
                    "SELECT count(*) FROM messages WHERE queue = ?1 AND visible_at <= ?2",
                    &queue,
                )?,
                hidden: count(
                    "SELECT count(*) FROM messages WHERE queue = ?1 AND visible_at > ?2",
                    &queue,
                )?,
                dead: count(
                    "SELECT count(*) FROM messages WHERE queue = ?1 AND ?2 = ?2",
                    &dlq,
                )?,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receive walks one index per lane and sorts nothing, however many wait.
    #[test]
    fn a_lanes_next_messages_come_from_the_index_without_a_sort() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        drop(SqliteQueue::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LANE_NEXT}"))
            .unwrap()
            .query_map(params!["tasks", "a", 0, 4], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("messages_turns"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }
}
