//! The state store on SQLite.
//!
//! One `items` table mirrors the DynamoDB item model (pk, sk, JSON body, revision, two
//! sparse secondary indexes). A transaction is one `BEGIN IMMEDIATE`: every condition is
//! evaluated against the current rows with [`Condition::holds`] (the reference
//! semantics) and every write is applied, or nothing is.

use crate::sqlite;
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tessera_core::ports::state_store::{
    Index, Item, ItemKey, Page, Query, StateStore, StoreError, Write, validate_transaction,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL,
    sk TEXT NOT NULL,
    body TEXT NOT NULL,
    rev INTEGER NOT NULL,
    parent_pk TEXT, parent_sk TEXT,
    due_pk TEXT, due_sk TEXT,
    PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_by_parent ON items (parent_pk, parent_sk) WHERE parent_pk IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_by_due ON items (due_pk, due_sk) WHERE due_pk IS NOT NULL;
";

/// The SQLite state store. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct SqliteStateStore {
    conn: Arc<Mutex<Connection>>,
}

impl SqliteStateStore {
    /// Open or create the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = sqlite::open(path, SCHEMA)
            .map_err(|e| map_err(e, &format!("opening {}", path.display())))?;
        Ok(SqliteStateStore {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("state-store worker thread failed: {e}")))?
    }
}

fn map_err(e: rusqlite::Error, what: &str) -> StoreError {
    if sqlite::is_busy(&e) {
        StoreError::Unavailable(format!("{what}: database is busy ({e})"))
    } else {
        StoreError::Unavailable(format!("{what}: {e}"))
    }
}

fn read_item(conn: &Connection, key: &ItemKey) -> Result<Option<Item>, StoreError> {
    conn.query_row(
        "SELECT body, rev, parent_pk, parent_sk, due_pk, due_sk FROM items WHERE pk = ?1 AND sk = ?2",
        params![key.pk, key.sk],
        row_to_parts,
    )
    .optional()
    .map_err(|e| map_err(e, "reading item"))?
    .map(|parts| assemble(key.clone(), parts))
    .transpose()
}

type Parts = (
    String,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn row_to_parts(r: &rusqlite::Row<'_>) -> rusqlite::Result<Parts> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn assemble(key: ItemKey, (body, rev, ppk, psk, dpk, dsk): Parts) -> Result<Item, StoreError> {
    let body = serde_json::from_str(&body).map_err(|e| {
        StoreError::Corrupt(format!(
            "item {} / {} holds invalid JSON: {e}",
            key.pk, key.sk
        ))
    })?;
    let pair = |a: Option<String>, b: Option<String>| a.zip(b).map(|(pk, sk)| ItemKey { pk, sk });
    Ok(Item {
        key,
        body,
        by_parent: pair(ppk, psk),
        by_due: pair(dpk, dsk),
        rev: rev as u64,
    })
}

fn write_item(conn: &Connection, item: &Item, rev: u64) -> Result<(), StoreError> {
    let body = serde_json::to_string(&item.body).map_err(|e| StoreError::Invalid(e.to_string()))?;
    conn.execute(
        "INSERT INTO items (pk, sk, body, rev, parent_pk, parent_sk, due_pk, due_sk)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (pk, sk) DO UPDATE SET body = excluded.body, rev = excluded.rev,
           parent_pk = excluded.parent_pk, parent_sk = excluded.parent_sk,
           due_pk = excluded.due_pk, due_sk = excluded.due_sk",
        params![
            item.key.pk,
            item.key.sk,
            body,
            rev as i64,
            item.by_parent.as_ref().map(|k| &k.pk),
            item.by_parent.as_ref().map(|k| &k.sk),
            item.by_due.as_ref().map(|k| &k.pk),
            item.by_due.as_ref().map(|k| &k.sk),
        ],
    )
    .map_err(|e| map_err(e, "writing item"))?;
    Ok(())
}

fn conflict(index: usize, key: &ItemKey) -> StoreError {
    StoreError::Conflict {
        index,
        pk: key.pk.clone(),
        sk: key.sk.clone(),
    }
}

fn apply(conn: &mut Connection, writes: &[Write]) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| map_err(e, "starting transaction"))?;
    for (index, w) in writes.iter().enumerate() {
        let current = read_item(&tx, w.key())?;
        match w {
            Write::Put { item, condition } => {
                if !condition.holds(current.as_ref()) {
                    return Err(conflict(index, &item.key));
                }
                write_item(&tx, item, current.map_or(1, |c| c.rev + 1))?;
            }
            Write::Delete { key, condition } => {
                if !condition.holds(current.as_ref()) {
                    return Err(conflict(index, key));
                }
                tx.execute(
                    "DELETE FROM items WHERE pk = ?1 AND sk = ?2",
                    params![key.pk, key.sk],
                )
                .map_err(|e| map_err(e, "deleting item"))?;
            }
            Write::Check { key, condition } => {
                if !condition.holds(current.as_ref()) {
                    return Err(conflict(index, key));
                }
            }
            Write::Add { key, deltas } => {
                let Some(mut cur) = current else {
                    return Err(conflict(index, key));
                };
                let obj = cur.body.as_object_mut().ok_or_else(|| {
                    StoreError::Corrupt(format!("item {} body is not an object", key.pk))
                })?;
                for (field, delta) in deltas {
                    let old = match obj.get(field) {
                        None | Some(serde_json::Value::Null) => 0,
                        Some(v) => v.as_i64().ok_or_else(|| {
                            StoreError::Invalid(format!(
                                "field `{field}` of {} / {} is not an integer",
                                key.pk, key.sk
                            ))
                        })?,
                    };
                    obj.insert(field.clone(), (old + delta).into());
                }
                write_item(&tx, &cur, cur.rev + 1)?;
            }
            Write::Set {
                key,
                fields,
                condition,
            } => {
                let Some(mut cur) = current.filter(|c| condition.holds(Some(c))) else {
                    return Err(conflict(index, key));
                };
                let obj = cur.body.as_object_mut().ok_or_else(|| {
                    StoreError::Corrupt(format!("item {} body is not an object", key.pk))
                })?;
                for (field, value) in fields {
                    obj.insert(field.clone(), value.clone());
                }
                write_item(&tx, &cur, cur.rev + 1)?;
            }
        }
    }
    tx.commit()
        .map_err(|e| map_err(e, "committing transaction"))
}

#[async_trait]
impl StateStore for SqliteStateStore {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        let key = key.clone();
        self.with_conn(move |c| read_item(c, &key)).await
    }

    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        validate_transaction(&writes)?;
        self.with_conn(move |c| apply(c, &writes)).await
    }

    async fn query(&self, query: &Query) -> Result<Page, StoreError> {
        let q = query.clone();
        self.with_conn(move |c| run_query(c, &q)).await
    }
}

fn run_query(conn: &Connection, q: &Query) -> Result<Page, StoreError> {
    let (pkc, skc) = match q.index {
        Index::Table => ("pk", "sk"),
        Index::ByParent => ("parent_pk", "parent_sk"),
        Index::ByDue => ("due_pk", "due_sk"),
    };
    let mut sql = format!(
        "SELECT pk, sk, body, rev, parent_pk, parent_sk, due_pk, due_sk, {skc} FROM items WHERE {pkc} = ?1"
    );
    let mut args: Vec<String> = vec![q.pk.clone()];
    if let Some(p) = &q.sk_prefix {
        args.push(p.clone());
        sql += &format!(" AND substr({skc}, 1, length(?{n})) = ?{n}", n = args.len());
    }
    if let Some(a) = &q.after {
        args.push(a.clone());
        sql += &format!(
            " AND {skc} {} ?{}",
            if q.descending { "<" } else { ">" },
            args.len()
        );
    }
    if let Some(m) = &q.sk_max {
        args.push(m.clone());
        sql += &format!(" AND {skc} <= ?{}", args.len());
    }
    let limit = q.limit.clamp(1, 10_000);
    sql += &format!(
        " ORDER BY {skc} {} LIMIT {}",
        if q.descending { "DESC" } else { "ASC" },
        limit + 1
    );
    let mut stmt = conn
        .prepare_cached(&sql)
        .map_err(|e| map_err(e, "preparing query"))?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), |r| {
            Ok((
                ItemKey {
                    pk: r.get(0)?,
                    sk: r.get(1)?,
                },
                (
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ),
                r.get::<_, String>(8)?,
            ))
        })
        .map_err(|e| map_err(e, "running query"))?;
    let mut items = Vec::new();
    let mut cursors = Vec::new();
    for row in rows {
        let (key, parts, cursor) = row.map_err(|e| map_err(e, "reading query row"))?;
        items.push(assemble(key, parts)?);
        cursors.push(cursor);
    }
    Ok(Page::from_overfetch(items, cursors, limit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::ports::state_store::Condition;

    #[tokio::test]
    async fn the_transaction_limit_and_duplicate_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStateStore::open(&dir.path().join("s.db")).unwrap();
        let writes: Vec<_> = (0..101)
            .map(|i| Write::Put {
                item: Item::new(ItemKey::new(format!("K{i}"), "x"), serde_json::json!({})),
                condition: Condition::None,
            })
            .collect();
        assert!(matches!(
            store.transact(writes).await,
            Err(StoreError::Invalid(_))
        ));
        let w = Write::Check {
            key: ItemKey::new("a", "b"),
            condition: Condition::None,
        };
        assert!(matches!(
            store.transact(vec![w.clone(), w]).await,
            Err(StoreError::Invalid(_))
        ));
    }
}
