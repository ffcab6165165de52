//! The bytes of a dataset's images, stored once per distinct content: a blob registered
//! under 100 names is one object, not 100.
//!
//! Each distinct content of a dataset has a record, `IMAGEBYTES#<dataset>#<sha>`, that
//! counts the images naming it (`refs`) and carries a **generation**; its object is
//! `datasets/<dataset>/contents/<sha>.<generation>`. Why a generation: a deletion that
//! takes the count to zero deletes the object afterwards, and a registration of the same
//! bytes can come in between. Without a generation the late delete would remove the new
//! image's bytes. With one, a registration that finds the count at zero starts the next
//! generation and writes its own object, which no deleter of an earlier one ever names.
//!
//! Invariants:
//! - a reference is taken in the same transaction that writes the image's records, and
//!   given back in the same transaction that removes them, so the count is exact;
//! - generations only grow: the record is never deleted (at zero it stays as a
//!   tombstone until its dataset is erased), so no generation is ever used twice, and a
//!   late or repeated delete of an old generation's object can only remove garbage;
//! - once the count of generation `g` reaches zero, no image ever names `g` again;
//! - an object no image may name is due in the expiry index (the record while it is
//!   `collecting`, a marker for an older generation left behind), so a deleter that
//!   dies leaves work the collector finishes.

use super::CatalogError;
use crate::Millis;
use crate::ids::DatasetId;
use crate::ports::state_store::{Condition, Index, Item, ItemKey, Write};
use crate::ports::{ObjectStore, StateStore};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a content record's key begins (the collector tells its kind by it).
pub(super) const KEY_PREFIX: &str = "IMAGEBYTES#";

/// How long an object no image names waits in the expiry index before the collector
/// takes it over from a deleter that died: the deleter itself deletes at once.
const ORPHAN_AFTER: Duration = Duration::from_secs(3600);

/// One distinct content of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    /// Its dataset.
    pub dataset_id: DatasetId,
    /// SHA-256 of the bytes, hex.
    pub sha: String,
    /// Images naming it.
    pub refs: u64,
    /// Which object holds the bytes.
    pub generation: u64,
    /// No image names this generation and its object is still to be deleted.
    pub collecting: bool,
}

impl Content {
    /// Where this generation's bytes are.
    pub fn object_key(&self) -> String {
        object_key(self.dataset_id, &self.sha, self.generation)
    }
}

pub(super) fn record_key(dataset: DatasetId, sha: &str) -> ItemKey {
    ItemKey::new(format!("{KEY_PREFIX}{dataset}#{sha}"), "BYTES")
}

/// The marker of an older generation's object left to the collector: a key of its own,
/// so that it and the record are never one entry of an index.
fn leftover_key(dataset: DatasetId, sha: &str, generation: u64) -> ItemKey {
    ItemKey::new(
        format!("{KEY_PREFIX}{dataset}#{sha}#{generation}"),
        "LEFTOVER",
    )
}

/// The by-parent partition listing a dataset's contents (what erasing it sweeps).
pub fn contents_partition(dataset: DatasetId) -> String {
    format!("DATASET#{dataset}#CONTENTS")
}

/// Object-store prefix of a dataset's contents.
pub fn contents_prefix(dataset: DatasetId) -> String {
    format!("datasets/{dataset}/contents/")
}

/// Object key of one generation of a content.
pub fn object_key(dataset: DatasetId, sha: &str, generation: u64) -> String {
    format!("{}{sha}.{generation}", contents_prefix(dataset))
}

fn item(key: ItemKey, c: &Content, due: bool) -> Item {
    let sort = if key.sk == "BYTES" {
        c.sha.clone()
    } else {
        format!("{}#{}", c.sha, c.generation)
    };
    let mut it = Item::new(key, serde_json::to_value(c).expect("serializable"));
    it.by_parent = Some(ItemKey::new(contents_partition(c.dataset_id), sort));
    if due {
        it.by_due = Some(super::expiry_index_key(
            Millis::now().plus(ORPHAN_AFTER),
            &it.key.pk,
        ));
    }
    it
}

fn record(c: &Content) -> Item {
    item(record_key(c.dataset_id, &c.sha), c, c.collecting)
}

async fn load(
    store: &dyn StateStore,
    dataset: DatasetId,
    sha: &str,
) -> Result<Option<(Content, u64)>, CatalogError> {
    match store.get(&record_key(dataset, sha)).await? {
        Some(it) => Ok(Some((crate::records::decode(&it)?, it.rev))),
        None => Ok(None),
    }
}

/// A reference about to be taken: the writes to put in the registering transaction
/// (the record's, then a leftover marker where an older object was still to be
/// deleted), the generation the image will name, and that older generation.
#[derive(Debug)]
pub(super) struct Take {
    pub writes: Vec<Write>,
    pub generation: u64,
    pub stale: Option<u64>,
}

/// Read the content's record and make the writes that add one reference. The caller
/// retries on a conflict (someone else took or gave one back meanwhile).
pub(super) async fn take(
    store: &dyn StateStore,
    dataset: DatasetId,
    sha: &str,
) -> Result<Take, CatalogError> {
    let Some((mut c, rev)) = load(store, dataset, sha).await? else {
        let c = Content {
            dataset_id: dataset,
            sha: sha.to_string(),
            refs: 1,
            generation: 1,
            collecting: false,
        };
        return Ok(Take {
            writes: vec![Write::Put {
                item: record(&c),
                condition: Condition::Absent,
            }],
            generation: 1,
            stale: None,
        });
    };
    let mut writes = Vec::new();
    let mut stale = None;
    if c.refs == 0 {
        // Nobody names this generation: its object is gone or going. Start the next.
        if c.collecting {
            // Its deleter may have died: the collector finishes through a marker.
            writes.push(Write::Put {
                item: item(leftover_key(dataset, sha, c.generation), &c, true),
                condition: Condition::None,
            });
            stale = Some(c.generation);
        }
        c.generation += 1;
        c.collecting = false;
    }
    c.refs += 1;
    writes.insert(
        0,
        Write::Put {
            item: record(&c),
            condition: Condition::Rev(rev),
        },
    );
    Ok(Take {
        writes,
        generation: c.generation,
        stale,
    })
}

/// A reference about to be given back: the write for the removing transaction, and the
/// content if it is left with none (then [`collect`] it once the write lands).
#[derive(Debug)]
pub(super) struct Give {
    pub write: Write,
    pub emptied: Option<Content>,
}

/// Read the content's record and make the write that removes the reference an image of
/// `generation` holds. `None` when the record holds no such reference (it would be a
/// count gone wrong: nothing is given back rather than another image's reference).
pub(super) async fn give_back(
    store: &dyn StateStore,
    dataset: DatasetId,
    sha: &str,
    generation: u64,
) -> Result<Option<Give>, CatalogError> {
    let Some((mut c, rev)) = load(store, dataset, sha).await? else {
        return Ok(None);
    };
    if c.generation != generation || c.refs == 0 {
        return Ok(None);
    }
    c.refs -= 1;
    c.collecting = c.refs == 0;
    Ok(Some(Give {
        write: Write::Put {
            item: record(&c),
            condition: Condition::Rev(rev),
        },
        emptied: c.collecting.then_some(c),
    }))
}

/// Store the bytes of generation `generation`, unless an earlier registration of it
/// already did. If the image was deleted meanwhile and its generation emptied, the
/// bytes just written are nobody's (the deletion found no object to delete): they go.
pub(super) async fn store_bytes(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    dataset: DatasetId,
    sha: &str,
    generation: u64,
    bytes: bytes::Bytes,
) -> Result<(), CatalogError> {
    let key = object_key(dataset, sha, generation);
    if objects.head(&key).await?.is_some() {
        return Ok(());
    }
    match objects.put_if_absent(&key, bytes).await {
        Ok(_) | Err(crate::ports::object_store::ObjectStoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // Once a generation's count is zero nobody takes it again, so deleting is safe.
    let named = load(store, dataset, sha)
        .await?
        .is_some_and(|(c, _)| c.generation == generation && c.refs > 0);
    if !named {
        objects.delete(&key).await?;
    }
    Ok(())
}

/// Delete an emptied generation's object, then mark the record done (a tombstone at
/// zero, out of the expiry index) unless a registration moved it on meanwhile. Safe to
/// repeat and to run concurrently.
pub async fn collect(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    c: &Content,
) -> Result<(), CatalogError> {
    objects.delete(&c.object_key()).await?;
    let done = Content {
        collecting: false,
        refs: 0,
        ..c.clone()
    };
    match store
        .transact(vec![Write::Put {
            item: record(&done),
            condition: Condition::All(vec![
                Condition::field_eq("collecting", true),
                Condition::field_eq("generation", c.generation),
            ]),
        }])
        .await
    {
        Err(e) if e.is_conflict() => Ok(()),
        other => Ok(other.map(|_| ())?),
    }
}

/// The collector's part: an object whose deleter did not finish. Answers whether there
/// was anything to collect.
pub(super) async fn collect_orphan(
    store: &dyn StateStore,
    objects: &dyn ObjectStore,
    it: &Item,
) -> Result<bool, CatalogError> {
    let c: Content = crate::records::decode(it)?;
    if it.key.sk != "BYTES" {
        // A leftover marker: its generation is never named again.
        objects.delete(&c.object_key()).await?;
        super::drop_if_unchanged(store, it).await?;
        return Ok(true);
    }
    if !c.collecting {
        return Ok(false);
    }
    collect(store, objects, &c).await?;
    Ok(true)
}

/// Every content record of a dataset, tombstones included (tests and audits: counts
/// against images).
pub async fn all(store: &dyn StateStore, dataset: DatasetId) -> Result<Vec<Content>, CatalogError> {
    let items: Vec<Item> = {
        let mut q = crate::ports::state_store::Query::partition(
            Index::ByParent,
            contents_partition(dataset),
            500,
        );
        let mut out = Vec::new();
        loop {
            let page = store.query(&q).await?;
            out.extend(page.items);
            match page.next {
                Some(n) => q.after = Some(n),
                None => break out,
            }
        }
    };
    items
        .iter()
        .filter(|it| it.key.sk == "BYTES")
        .map(|it| Ok(crate::records::decode(it)?))
        .collect()
}
