//! The state store on DynamoDB.
//!
//! Table design (also in `infra/README.md` and `infra/template.yaml`):
//!
//! | attribute | type | role |
//! | --- | --- | --- |
//! | `pk`, `sk` | S | table key |
//! | `body` | M | the record; conditions test its top-level fields in place |
//! | `rev` | N | revision, +1 on every write, computed by DynamoDB (`if_not_exists(rev, 0) + 1`) |
//! | `parent_pk`, `parent_sk` | S | GSI `by_parent` (sparse): a job's tasks, a tenant's jobs |
//! | `due_pk`, `due_sk` | S | GSI `by_due` (sparse): what the reaper scans |
//! | `ttl` | N | TTL (epoch seconds), copied from a body's `ttl_s`; only records that may vanish carry it (launch markers) |
//!
//! Writes of several items are one `TransactWriteItems` call (at most 100 items, the
//! engine never asks for more) with a fresh `ClientRequestToken`, so the SDK's own
//! retries of one call are applied once. A put or set of one item alone is a plain
//! conditional `UpdateItem` (half the units of a transaction of one) that carries a
//! write token (`wt`) for the same exactly-once: see `update_alone`. A put is an
//! update that replaces the body and bumps the revision in one step, because `PutItem`
//! cannot compute `rev + 1` without a read.
//! Both indexes project keys only (`KEYS_ONLY`): an index entry is written when an
//! item's index key changes, not on every write to the item (a heartbeat, a photo's
//! next field), which is what keeps one hot index partition from throttling the table.
//! An index query therefore reads keys from the index and the items themselves from the
//! table (`BatchGetItem`, strongly consistent, in the index's order); an item gone
//! between the two reads is left out. Index queries are eventually consistent on
//! DynamoDB (not on moto); nothing that decides a task's fate reads an index without
//! re-reading the item itself.

mod expression;

use crate::attr;
use crate::sdk_error::{self, Failure};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ScalarAttributeType, Update,
};
use expression::{Expr, key_attrs, transact_item};
use std::collections::HashMap;
use std::time::Duration;
use tessera_core::ports::state_store::{
    Index, Item, ItemKey, Page, Query, StateStore, StoreError, Write, validate_transaction,
};

const PK: &str = "pk";
const SK: &str = "sk";
const BODY: &str = "body";
const REV: &str = "rev";
/// The table's TTL attribute (epoch seconds): DynamoDB deletes the item some time after.
const TTL: &str = "ttl";
/// A record that may expire carries its expiry in this body field.
pub const TTL_FIELD: &str = "ttl_s";

/// What both indexes project: keys only (the template declares the same, and a test
/// checks that it does).
pub const INDEX_PROJECTION: ProjectionType = ProjectionType::KeysOnly;

/// Keys one `BatchGetItem` may name.
const BATCH_GET_MAX: usize = 100;

/// The index's name in the table and its key attributes.
fn index_keys(index: Index) -> (Option<&'static str>, &'static str, &'static str) {
    match index {
        Index::Table => (None, PK, SK),
        Index::ByParent => (Some("by_parent"), "parent_pk", "parent_sk"),
        Index::ByDue => (Some("by_due"), "due_pk", "due_sk"),
    }
}

/// The DynamoDB state store: one table, two sparse GSIs.
#[derive(Clone)]
pub struct DynamoStateStore {
    client: Client,
    table: String,
}

impl DynamoStateStore {
    /// A store on `table` (which must exist; see [`DynamoStateStore::ensure_table`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStateStore {
            client,
            table: table.into(),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Create the table with its indexes if it does not exist (tests and local
    /// development; on AWS the SAM template creates it).
    pub async fn ensure_table(&self) -> Result<(), StoreError> {
        if self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .is_ok()
        {
            return Ok(());
        }
        let s = |n: &str| {
            AttributeDefinition::builder()
                .attribute_name(n)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("name and type are set")
        };
        let key = |h: &str, r: &str| {
            vec![
                KeySchemaElement::builder()
                    .attribute_name(h)
                    .key_type(KeyType::Hash)
                    .build()
                    .expect("set"),
                KeySchemaElement::builder()
                    .attribute_name(r)
                    .key_type(KeyType::Range)
                    .build()
                    .expect("set"),
            ]
        };
        let gsi = |index: Index| {
            let (name, h, r) = index_keys(index);
            GlobalSecondaryIndex::builder()
                .index_name(name.expect("a secondary index"))
                .set_key_schema(Some(key(h, r)))
                .projection(
                    Projection::builder()
                        .projection_type(INDEX_PROJECTION)
                        .build(),
                )
                .build()
                .expect("set")
        };
        let made = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .set_attribute_definitions(Some(
                [PK, SK, "parent_pk", "parent_sk", "due_pk", "due_sk"]
                    .map(s)
                    .to_vec(),
            ))
            .set_key_schema(Some(key(PK, SK)))
            .global_secondary_indexes(gsi(Index::ByParent))
            .global_secondary_indexes(gsi(Index::ByDue))
            .send()
            .await;
        match made {
            Ok(_) => Ok(()),
            Err(e) if sdk_error::code(&e) == Some("ResourceInUseException") => Ok(()),
            Err(e) => Err(store_error(&format!("creating table {}", self.table), e)),
        }
    }
}

fn item_from(attrs: &HashMap<String, AttributeValue>) -> Result<Item, StoreError> {
    let Item {
        key,
        by_parent,
        by_due,
        ..
    } = keys_from(attrs)?;
    let corrupt = |why: String| StoreError::Corrupt(format!("item {} / {}: {why}", key.pk, key.sk));
    let body = match attrs.get(BODY) {
        Some(AttributeValue::M(m)) => {
            serde_json::Value::Object(attr::body_from_attr_map(m).map_err(corrupt)?)
        }
        _ => return Err(corrupt("`body` is missing or not a map".into())),
    };
    let rev = match attrs.get(REV) {
        Some(AttributeValue::N(n)) => n.parse().map_err(|_| corrupt(format!("revision `{n}`")))?,
        _ => return Err(corrupt("`rev` is missing".into())),
    };
    Ok(Item {
        body,
        by_parent,
        by_due,
        rev,
        key,
    })
}

fn store_error<E>(what: &str, e: aws_sdk_dynamodb::error::SdkError<E>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match sdk_error::classify(&e) {
        Failure::Invalid => StoreError::Invalid(format!("{what}: {}", sdk_error::describe(&e))),
        _ => StoreError::Unavailable(format!("{what}: {}", sdk_error::describe(&e))),
    }
}

/// The attribute a write made alone carries: a token of that write, so that a retry of
/// it by the SDK (a response lost after DynamoDB applied it) knows its own work when the
/// condition then fails.
const WRITE_TOKEN: &str = "wt";

impl DynamoStateStore {
    /// One put or set as a plain conditional `UpdateItem`: DynamoDB bills a transaction
    /// twice the units of the same writes made alone, and a transaction of one item buys
    /// nothing but the request token's exactly-once. That is kept by the write token: the
    /// write's condition also requires that the item does not carry this write's token,
    /// so a retry of a write already applied (the SDK's, after a lost response) always
    /// fails its condition, and failing on an item that carries the token means applied
    /// (never applied twice over someone else's later write). An item inside a running
    /// transaction answers `TransactionConflict`, which is contention: tried again, as
    /// transactions are. Counter additions stay in transactions (their retry would count
    /// twice, and they carry no condition to fail).
    async fn update_alone(&self, write: &Write, u: &Update) -> Result<(), StoreError> {
        let token: String = std::iter::repeat_with(fastrand::alphanumeric)
            .take(12)
            .collect();
        let mut names = u.expression_attribute_names().cloned().unwrap_or_default();
        let mut values = u.expression_attribute_values().cloned().unwrap_or_default();
        names.insert("#wt".into(), WRITE_TOKEN.into());
        values.insert(":wt".into(), AttributeValue::S(token.clone()));
        let expr = u.update_expression();
        let (set, rest) = expr.split_at(expr.find(" REMOVE ").unwrap_or(expr.len()));
        let not_yet = "(attribute_not_exists(#wt) OR #wt <> :wt)";
        let condition = match u.condition_expression() {
            Some(c) => format!("({c}) AND {not_yet}"),
            None => not_yet.to_string(),
        };
        let key = write.key();
        for round in 0..CONTENTION_ROUNDS {
            let sent = self
                .client
                .update_item()
                .table_name(u.table_name())
                .set_key(Some(u.key().clone()))
                .update_expression(format!("{set}, #wt = :wt{rest}"))
                .condition_expression(&condition)
                .set_expression_attribute_names(Some(names.clone()))
                .set_expression_attribute_values(Some(values.clone()))
                .return_values_on_condition_check_failure(
                    aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let Err(e) = sent else { return Ok(()) };
            use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
            match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    if failed
                        .item()
                        .and_then(|i| i.get(WRITE_TOKEN))
                        .is_some_and(|t| t == &AttributeValue::S(token.clone()))
                    {
                        tracing::info!(pk = %key.pk, sk = %key.sk, "a retried write found itself applied");
                        return Ok(());
                    }
                    return Err(StoreError::Conflict {
                        index: 0,
                        pk: key.pk.clone(),
                        sk: key.sk.clone(),
                    });
                }
                Some(UpdateItemError::TransactionConflictException(_)) => {
                    tokio::time::sleep(Duration::from_millis(
                        10 + fastrand::u64(0..(20 << round.min(5))),
                    ))
                    .await;
                }
                _ => return Err(store_error(&format!("writing {} / {}", key.pk, key.sk), e)),
            }
        }
        Err(StoreError::Unavailable(format!(
            "writing {} / {} kept meeting transactions on the item ({CONTENTION_ROUNDS} tries)",
            key.pk, key.sk
        )))
    }
}

/// Rounds a transaction is retried when DynamoDB cancels it only because another
/// transaction held one of its items (`TransactionConflict`), which is contention, not
/// a failed condition.
const CONTENTION_ROUNDS: u32 = 8;

#[async_trait]
impl StateStore for DynamoStateStore {
    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_attrs(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error(&format!("reading {} / {}", key.pk, key.sk), e))?;
        out.item().map(item_from).transpose()
    }

    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        validate_transaction(&writes)?;
        let items = writes
            .iter()
            .map(|w| transact_item(&self.table, w))
            .collect::<Result<Vec<_>, _>>()?;
        if let ([Write::Put { .. } | Write::Set { .. }], [one]) =
            (writes.as_slice(), items.as_slice())
            && let Some(update) = one.update()
        {
            return self.update_alone(&writes[0], update).await;
        }
        for round in 0..CONTENTION_ROUNDS {
            // One token per attempt: the SDK's own retries of this call reuse it, so a
            // call that reached DynamoDB twice is applied once.
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(crate::request_token())
                .send()
                .await;
            let Err(e) = sent else { return Ok(()) };
            let Some(reasons) = e
                .as_service_error()
                .and_then(|s| match s {
                    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(t) => {
                        Some(t.cancellation_reasons().to_vec())
                    }
                    _ => None,
                })
            else {
                return Err(store_error("transaction", e));
            };
            if let Some(index) = reasons
                .iter()
                .position(|r| r.code() == Some("ConditionalCheckFailed"))
            {
                let key = writes[index].key();
                return Err(StoreError::Conflict {
                    index,
                    pk: key.pk.clone(),
                    sk: key.sk.clone(),
                });
            }
            if !reasons
                .iter()
                .any(|r| matches!(r.code(), Some("TransactionConflict" | "ThrottlingError")))
            {
                return Err(StoreError::Invalid(format!(
                    "transaction cancelled: {:?}",
                    reasons
                        .iter()
                        .map(|r| (r.code().unwrap_or(""), r.message().unwrap_or("")))
                        .collect::<Vec<_>>()
                )));
            }
            tokio::time::sleep(Duration::from_millis(
                10 + fastrand::u64(0..(20 << round.min(5))),
            ))
            .await;
        }
        Err(StoreError::Unavailable(format!(
            "transaction kept meeting concurrent transactions on its items ({CONTENTION_ROUNDS} tries)"
        )))
    }

    async fn query(&self, q: &Query) -> Result<Page, StoreError> {
        let (index_name, h, r) = index_keys(q.index);
        let limit = q.limit.clamp(1, 10_000);
        let mut x = Expr::default();
        let mut key_cond = format!(
            "{} = {}",
            x.name(h),
            x.value(AttributeValue::S(q.pk.clone()))
        );
        if let Some(after) = &q.after {
            let op = if q.descending { "<" } else { ">" };
            let (rn, v) = (x.name(r), x.value(AttributeValue::S(after.clone())));
            key_cond += &format!(" AND {rn} {op} {v}");
        } else if let Some(prefix) = &q.sk_prefix {
            let (rn, v) = (x.name(r), x.value(AttributeValue::S(prefix.clone())));
            key_cond += &format!(" AND begins_with({rn}, {v})");
        } else if let Some(max) = &q.sk_max {
            let (rn, v) = (x.name(r), x.value(AttributeValue::S(max.clone())));
            key_cond += &format!(" AND {rn} <= {v}");
        }
        let sort_key = |i: &Item| match q.index {
            Index::Table => Some(i.key.sk.clone()),
            Index::ByParent => i.by_parent.as_ref().map(|k| k.sk.clone()),
            Index::ByDue => i.by_due.as_ref().map(|k| k.sk.clone()),
        };
        // The key condition carries one sort-key bound; the others are checked here,
        // stopping as soon as the sort order has left the requested range.
        let mut items = Vec::new();
        let mut cursors = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        'pages: loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .set_index_name(index_name.map(str::to_string))
                .key_condition_expression(&key_cond)
                .set_expression_attribute_names(x.names())
                .set_expression_attribute_values(x.values())
                .scan_index_forward(!q.descending)
                .consistent_read(q.index == Index::Table)
                .limit((limit + 1 - items.len()) as i32)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| store_error(&format!("querying {}", q.pk), e))?;
            for attrs in out.items() {
                let item = if q.index == Index::Table {
                    item_from(attrs)?
                } else {
                    keys_from(attrs)?
                };
                let sk = sort_key(&item).unwrap_or_default();
                if let Some(p) = &q.sk_prefix
                    && !sk.starts_with(p.as_str())
                {
                    if (sk.as_str() > p.as_str()) != q.descending {
                        break 'pages;
                    }
                    continue;
                }
                if let Some(m) = &q.sk_max
                    && sk.as_str() > m.as_str()
                {
                    if q.descending {
                        continue;
                    }
                    break 'pages;
                }
                items.push(item);
                cursors.push(sk);
                if items.len() > limit {
                    break 'pages;
                }
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => break,
            }
        }
        let mut page = Page::from_overfetch(items, cursors, limit);
        if q.index != Index::Table {
            // The page and its cursor are the index's; only the bodies come from the
            // table, so an item gone meanwhile shortens this page, never the listing.
            let keys: Vec<ItemKey> = page.items.iter().map(|i| i.key.clone()).collect();
            let mut full = self.batch_get(&keys).await?;
            page.items = keys
                .into_iter()
                .filter_map(|k| full.remove(&(k.pk, k.sk)))
                .collect();
        }
        Ok(page)
    }
}

impl DynamoStateStore {
    /// The items at `keys`, strongly consistent, by (pk, sk); missing ones are absent.
    async fn batch_get(
        &self,
        keys: &[ItemKey],
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        let mut out = HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_MAX) {
            let mut pending: Vec<HashMap<String, AttributeValue>> =
                chunk.iter().map(key_attrs).collect();
            let mut round = 0u32;
            while !pending.is_empty() {
                let ka = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| StoreError::Invalid(e.to_string()))?;
                let got = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, ka)
                    .send()
                    .await
                    .map_err(|e| store_error("reading the items an index names", e))?;
                for attrs in got
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .into_iter()
                    .flatten()
                {
                    let item = item_from(attrs)?;
                    out.insert((item.key.pk.clone(), item.key.sk.clone()), item);
                }
                // Keys DynamoDB did not get to (throttling, response size) are asked
                // again after a short pause, a bounded number of times.
                if let Some(left) = got
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.table))
                    .map(|k| k.keys().to_vec())
                    .filter(|k| !k.is_empty())
                {
                    round += 1;
                    if round > CONTENTION_ROUNDS {
                        return Err(StoreError::Unavailable(format!(
                            "{} items an index names were not read after {CONTENTION_ROUNDS} rounds",
                            left.len()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(20 << round.min(6))).await;
                    pending = left;
                }
            }
        }
        Ok(out)
    }
}

/// An item's (or an index entry's) keys, as an item without a body (an index page's
/// is filled in from the table).
fn keys_from(attrs: &HashMap<String, AttributeValue>) -> Result<Item, StoreError> {
    let s = |n: &str| match attrs.get(n) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let key = ItemKey::new(
        s(PK).ok_or_else(|| StoreError::Corrupt("an item without `pk`".into()))?,
        s(SK).ok_or_else(|| StoreError::Corrupt("an item without `sk`".into()))?,
    );
    let pair = |h: &str, r: &str| s(h).zip(s(r)).map(|(pk, sk)| ItemKey { pk, sk });
    Ok(Item {
        body: serde_json::Value::Null,
        by_parent: pair("parent_pk", "parent_sk"),
        by_due: pair("due_pk", "due_sk"),
        rev: 0,
        key,
    })
}
