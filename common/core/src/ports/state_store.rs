//! The state store: items with conditional writes and small transactions.
//!
//! This is DynamoDB's data model on purpose. An item has a partition key and a sort key,
//! a JSON body, a store-owned revision, and up to two secondary index keys. Conditions
//! only look at one item at a time; a transaction applies up to
//! [`MAX_TRANSACTION_ITEMS`] writes all or nothing. Typed records (tasks, jobs, events)
//! are mapped onto items in [`crate::records`].

use crate::error::{Classify, ErrorClass};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// DynamoDB's TransactWriteItems limit; the embedded store enforces the same.
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// An item's primary key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemKey {
    /// Partition key.
    pub pk: String,
    /// Sort key.
    pub sk: String,
}

impl ItemKey {
    /// A key from its two parts.
    pub fn new(pk: impl Into<String>, sk: impl Into<String>) -> Self {
        ItemKey {
            pk: pk.into(),
            sk: sk.into(),
        }
    }
}

/// The two secondary indexes every store offers. Both are sparse: an item without an
/// entry for an index does not appear in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Index {
    /// The table itself (partition key, sort key).
    Table,
    /// Parent → children (a job's tasks, a tenant's jobs).
    ByParent,
    /// Work that is due (`DUE#queued#<shard>` ordered by not-before,
    /// `DUE#running#<shard>` by the lease expiry the entry was last put at): what the
    /// reaper scans, shard by shard.
    ByDue,
}

/// A stored item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Primary key.
    pub key: ItemKey,
    /// The record, a JSON object. Conditions can test its top-level fields.
    pub body: Value,
    /// Entry in [`Index::ByParent`], if any.
    pub by_parent: Option<ItemKey>,
    /// Entry in [`Index::ByDue`], if any.
    pub by_due: Option<ItemKey>,
    /// Revision: 1 on creation, +1 on every write. Set by the store; ignored on put.
    pub rev: u64,
}

impl Item {
    /// An item with no index entries.
    pub fn new(key: ItemKey, body: Value) -> Self {
        Item {
            key,
            body,
            by_parent: None,
            by_due: None,
            rev: 0,
        }
    }
}

/// A condition on the current version of one item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Condition {
    /// Always true.
    None,
    /// The item does not exist (put-if-absent).
    Absent,
    /// The item exists.
    Exists,
    /// The item exists at exactly this revision (optimistic concurrency).
    Rev(u64),
    /// The item exists and its top-level body field equals the value.
    FieldEq(String, Value),
    /// The item exists and its top-level body field is absent, or an integer no greater
    /// than the value. For a field that orders writers (a submission time): "nobody
    /// later than this one wrote it". A field holding anything else (null, text, a
    /// fraction) fails the condition, as DynamoDB's `<=` fails across types.
    FieldAtMost(String, i64),
    /// The item exists and its top-level body field is absent or null: "not set".
    FieldNull(String),
    /// All of these hold.
    All(Vec<Condition>),
    /// At least one of these holds (none given: never). For a write that has more than
    /// one reason to be made, such as failing a photo that is withheld either because it
    /// was unpublished or because it was decided before the latest opt-out.
    Any(Vec<Condition>),
}

impl Condition {
    /// `field == value` on an existing item.
    pub fn field_eq(field: &str, value: impl Into<Value>) -> Self {
        Condition::FieldEq(field.to_string(), value.into())
    }

    /// `field` absent or `<= n` on an existing item.
    pub fn field_at_most(field: &str, n: i64) -> Self {
        Condition::FieldAtMost(field.to_string(), n)
    }

    /// `field` absent or null on an existing item.
    pub fn field_null(field: &str) -> Self {
        Condition::FieldNull(field.to_string())
    }

    /// Evaluate against the current item (or its absence). Adapters that cannot push a
    /// condition down to their store use this; it is also the reference semantics.
    pub fn holds(&self, current: Option<&Item>) -> bool {
        match self {
            Condition::None => true,
            Condition::Absent => current.is_none(),
            Condition::Exists => current.is_some(),
            Condition::Rev(r) => current.is_some_and(|i| i.rev == *r),
            Condition::FieldEq(f, v) => current.is_some_and(|i| i.body.get(f) == Some(v)),
            Condition::FieldAtMost(f, n) => current.is_some_and(|i| match i.body.get(f) {
                None => true,
                Some(v) => v.as_i64().is_some_and(|x| x <= *n),
            }),
            Condition::FieldNull(f) => {
                current.is_some_and(|i| i.body.get(f).is_none_or(Value::is_null))
            }
            Condition::All(cs) => cs.iter().all(|c| c.holds(current)),
            Condition::Any(cs) => cs.iter().any(|c| c.holds(current)),
        }
    }
}

/// One write of a transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Write {
    /// Create or replace the item if the condition holds.
    Put {
        /// The new item (its `rev` is ignored).
        item: Item,
        /// Must hold on the current item.
        condition: Condition,
    },
    /// Delete the item if the condition holds (deleting a missing item is not an error
    /// unless the condition requires it to exist).
    Delete {
        /// Which item.
        key: ItemKey,
        /// Must hold on the current item.
        condition: Condition,
    },
    /// Only check the condition (DynamoDB's ConditionCheck): makes the transaction
    /// depend on an item it does not change, such as a task's fencing epoch.
    Check {
        /// Which item.
        key: ItemKey,
        /// Must hold.
        condition: Condition,
    },
    /// Add to numeric top-level fields of an existing item (a missing field counts as
    /// 0). Needs no read, so concurrent counters never conflict.
    Add {
        /// Which item; it must exist.
        key: ItemKey,
        /// Field and amount, each field once.
        deltas: Vec<(String, i64)>,
    },
    /// Set top-level fields of an existing item if the condition holds, leaving the rest
    /// of its body alone (DynamoDB's UpdateItem `SET`). For writes that must not depend
    /// on a body read earlier, such as a compensation that unpublishes a photo.
    Set {
        /// Which item; it must exist.
        key: ItemKey,
        /// Field and new value (JSON `null` stores null), each field once.
        fields: Vec<(String, Value)>,
        /// Must hold on the current item (besides existing).
        condition: Condition,
    },
}

impl Write {
    /// Add `delta` to one counter field of `key`.
    pub fn add(key: ItemKey, field: &str, delta: i64) -> Self {
        Write::Add {
            key,
            deltas: vec![(field.to_string(), delta)],
        }
    }

    /// The key this write touches.
    pub fn key(&self) -> &ItemKey {
        match self {
            Write::Put { item, .. } => &item.key,
            Write::Delete { key, .. }
            | Write::Check { key, .. }
            | Write::Add { key, .. }
            | Write::Set { key, .. } => key,
        }
    }
}

/// A query: one partition of the table or of an index, in sort-key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Query {
    /// Table or index.
    pub index: Index,
    /// The partition key within that index.
    pub pk: String,
    /// Only sort keys starting with this.
    pub sk_prefix: Option<String>,
    /// Only sort keys strictly greater than this (ascending) or smaller (descending).
    /// This is how pages continue: pass the previous page's cursor.
    pub after: Option<String>,
    /// Only sort keys less than or equal to this.
    pub sk_max: Option<String>,
    /// At most this many items (the store may return fewer with a cursor).
    pub limit: usize,
    /// Newest (largest sort key) first.
    pub descending: bool,
}

impl Query {
    /// All of a partition, ascending, in pages of `limit`.
    pub fn partition(index: Index, pk: impl Into<String>, limit: usize) -> Self {
        Query {
            index,
            pk: pk.into(),
            sk_prefix: None,
            after: None,
            sk_max: None,
            limit,
            descending: false,
        }
    }
}

/// A page of results.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The items, in order.
    pub items: Vec<Item>,
    /// Pass as [`Query::after`] for the next page; `None` when this was the last one.
    pub next: Option<String>,
}

impl Page {
    /// A page from a read of up to `limit + 1` items and each one's sort key: the extra
    /// item only says there is more, and the last kept item's sort key is the cursor.
    pub fn from_overfetch(mut items: Vec<Item>, cursors: Vec<String>, limit: usize) -> Page {
        let next = if items.len() > limit {
            items.truncate(limit);
            Some(cursors[limit - 1].clone())
        } else {
            None
        };
        Page { items, next }
    }
}

/// Errors of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A condition did not hold; nothing of the transaction was applied.
    #[error("condition failed on write {index} ({pk} / {sk})")]
    Conflict {
        /// Position of the failing write in the transaction.
        index: usize,
        /// Its partition key.
        pk: String,
        /// Its sort key.
        sk: String,
    },
    /// The request itself is invalid (too many items, one key twice, non-object body…).
    #[error("invalid state-store request: {0}")]
    Invalid(String),
    /// The store could not be reached or is busy; retrying may help.
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// The stored data is damaged or of an unknown version.
    #[error("state store data is corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// True for a failed condition.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

impl Classify for StoreError {
    fn class(&self) -> ErrorClass {
        match self {
            StoreError::Conflict { .. } | StoreError::Unavailable(_) => ErrorClass::Transient,
            StoreError::Invalid(_) | StoreError::Corrupt(_) => ErrorClass::Permanent,
        }
    }
}

/// The rules every adapter checks before a transaction touches its store: at least one
/// write, at most [`MAX_TRANSACTION_ITEMS`], no key twice, object bodies.
pub fn validate_transaction(writes: &[Write]) -> Result<(), StoreError> {
    if writes.is_empty() {
        return Err(StoreError::Invalid(
            "a transaction needs at least one write".into(),
        ));
    }
    if writes.len() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::Invalid(format!(
            "a transaction may hold at most {MAX_TRANSACTION_ITEMS} writes, this one has {}; split it",
            writes.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for w in writes {
        if !seen.insert(w.key()) {
            return Err(StoreError::Invalid(format!(
                "key {} / {} appears twice in one transaction",
                w.key().pk,
                w.key().sk
            )));
        }
        if let Write::Put { item, .. } = w
            && !item.body.is_object()
        {
            return Err(StoreError::Invalid(format!(
                "item {} / {} body must be a JSON object",
                item.key.pk, item.key.sk
            )));
        }
    }
    Ok(())
}

/// The state store port.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// Read one item (strongly consistent).
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError>;

    /// Apply up to [`MAX_TRANSACTION_ITEMS`] writes, all or nothing. No key may appear
    /// twice. On a failed condition returns [`StoreError::Conflict`] naming the write.
    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError>;

    /// One page of a partition of the table or an index.
    async fn query(&self, query: &Query) -> Result<Page, StoreError>;

    /// One conditional put: a transaction of one.
    async fn put(&self, item: Item, condition: Condition) -> Result<(), StoreError> {
        self.transact(vec![Write::Put { item, condition }]).await
    }
}
