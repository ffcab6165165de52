//! Erasure: what remains of a photo, a dataset or a project once someone asked for it
//! to be gone — nothing but a tombstone and an audit entry.
//!
//! Erasing writes, in the transaction that deletes the main record, a **marker** naming
//! every object prefix and row partition the thing occupied; then deletes them. The
//! marker is due in the expiry index a day later, when the collector sweeps the same
//! prefixes and partitions again: that catches a crash half-way and any worker that was
//! uploading a derivative at the moment of erasure (its commit fails on the missing row,
//! its bytes do not survive the second sweep). After that sweep the marker stays as a
//! tombstone, so a late event (an S3 notification retried for hours) cannot bring an
//! erased photo back: ingest checks that no marker exists.

use super::CatalogError;
use crate::Millis;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Query, Write};
use crate::ports::{ObjectStore, StateStore};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// When the second sweep runs.
pub const FINAL_SWEEP_AFTER: Duration = Duration::from_secs(86_400);

/// What an erasure removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erasure {
    /// `photo/<id>`, `dataset/<id>`, `project/<id>`.
    pub target: String,
    /// Object prefixes (each ending in `/`).
    pub prefixes: Vec<String>,
    /// Row partitions: (`table` | `by_parent`, partition key).
    pub partitions: Vec<(String, String)>,
    /// When it was asked for.
    pub erased_at: Millis,
    /// Whether the second sweep ran.
    #[serde(default)]
    pub swept: bool,
}

/// How an erasure marker's key begins (the collector tells its items by it).
pub(super) const KEY_PREFIX: &str = "ERASED#";

/// The marker's key.
pub fn marker_key(target: &str) -> ItemKey {
    ItemKey::new(format!("{KEY_PREFIX}{target}"), "ERASED")
}

/// The write that makes a transaction fail if `target` was erased (ingest uses it so a
/// late event cannot recreate an erased photo).
pub fn not_erased(target: &str) -> Write {
    Write::Check {
        key: marker_key(target),
        condition: Condition::Absent,
    }
}

/// The marker write, due for its second sweep after [`FINAL_SWEEP_AFTER`].
pub fn marker(e: &Erasure) -> Write {
    super::due_item(
        marker_key(&e.target),
        serde_json::to_value(e).expect("serializable"),
        e.erased_at.plus(FINAL_SWEEP_AFTER),
    )
}

/// How much one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Swept {
    /// Objects deleted.
    pub objects: usize,
    /// Rows deleted.
    pub rows: usize,
}

/// Delete everything `e` names (idempotent).
pub async fn sweep(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    e: &Erasure,
) -> Result<Swept, CatalogError> {
    let mut done = Swept::default();
    for prefix in &e.prefixes {
        // Always re-list from the start: deleting while paging would skip keys.
        let mut last_first = None;
        loop {
            let (page, _) = objects.list(prefix, None, 1000).await?;
            if page.is_empty() {
                break;
            }
            if last_first.as_ref() == Some(&page[0].key) {
                return Err(CatalogError::Unavailable(format!(
                    "`{}` is still listed after it was deleted; the sweep will run again",
                    page[0].key
                )));
            }
            last_first = Some(page[0].key.clone());
            for o in &page {
                objects.delete(&o.key).await?;
            }
            done.objects += page.len();
        }
    }
    for (index, pk) in &e.partitions {
        let index = if index == "by_parent" {
            Index::ByParent
        } else {
            Index::Table
        };
        loop {
            let page = store
                .query(&Query::partition(index, pk.clone(), 25))
                .await?;
            if page.items.is_empty() {
                break;
            }
            let deletes: Vec<Write> = page
                .items
                .iter()
                .map(|i| Write::Delete {
                    key: i.key.clone(),
                    condition: Condition::None,
                })
                .collect();
            done.rows += deletes.len();
            store.transact(deletes).await?;
        }
    }
    Ok(done)
}

/// The collector's second sweep of a due marker: sweep, then keep the marker as a
/// tombstone, out of the expiry index.
pub(crate) async fn final_sweep(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    item: &Item,
) -> Result<Swept, CatalogError> {
    let mut e: Erasure = crate::records::decode(item)?;
    let swept = sweep(store, objects, &e).await?;
    e.swept = true;
    let tombstone = Item::new(
        item.key.clone(),
        serde_json::to_value(&e).expect("serializable"),
    );
    match store
        .transact(vec![Write::Put {
            item: tombstone,
            condition: Condition::Rev(item.rev),
        }])
        .await
    {
        Err(err) if err.is_conflict() => {}
        other => other?,
    }
    Ok(swept)
}
