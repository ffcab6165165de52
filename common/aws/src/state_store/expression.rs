//! Port writes and conditions as DynamoDB requests: the expressions (every name and
//! value out of line) and the `TransactWriteItem` of each kind of write.

use super::{BODY, PK, REV, SK, TTL, TTL_FIELD, index_keys};
use crate::attr;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete, TransactWriteItem, Update};
use std::collections::HashMap;
use tessera_core::ports::state_store::{Condition, Index, ItemKey, StoreError, Write};

/// Placeholders for one expression: DynamoDB wants every name and value out of line.
#[derive(Default)]
pub(super) struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    pub(super) fn name(&mut self, n: &str) -> String {
        if let Some((k, _)) = self.names.iter().find(|(_, v)| v.as_str() == n) {
            return k.clone();
        }
        let k = format!("#n{}", self.names.len());
        self.names.insert(k.clone(), n.to_string());
        k
    }

    pub(super) fn value(&mut self, v: AttributeValue) -> String {
        let k = format!(":v{}", self.values.len());
        self.values.insert(k.clone(), v);
        k
    }

    pub(super) fn num(&mut self, n: impl ToString) -> String {
        self.value(AttributeValue::N(n.to_string()))
    }

    /// The condition as an expression, or `None` when it always holds.
    pub(super) fn condition(&mut self, c: &Condition) -> Option<String> {
        match c {
            Condition::None => None,
            Condition::Absent => Some(format!("attribute_not_exists({})", self.name(PK))),
            Condition::Exists => Some(format!("attribute_exists({})", self.name(PK))),
            Condition::Rev(r) => {
                let (n, v) = (self.name(REV), self.num(r));
                Some(format!("{n} = {v}"))
            }
            Condition::FieldEq(f, v) => {
                let (b, f, v) = (
                    self.name(BODY),
                    self.name(f),
                    self.value(attr::body_field(v)),
                );
                Some(format!("{b}.{f} = {v}"))
            }
            Condition::FieldAtMost(f, n) => {
                let (k, b, f, v) = (self.name(PK), self.name(BODY), self.name(f), self.num(n));
                // `attribute_not_exists` alone holds on a missing item too, and an update
                // that holds creates the item: an erased row would come back.
                Some(format!(
                    "attribute_exists({k}) AND (attribute_not_exists({b}.{f}) OR {b}.{f} <= {v})"
                ))
            }
            Condition::FieldNull(f) => {
                let (k, b, f) = (self.name(PK), self.name(BODY), self.name(f));
                let null = self.value(AttributeValue::S("NULL".into()));
                Some(format!(
                    "attribute_exists({k}) AND (attribute_not_exists({b}.{f}) OR attribute_type({b}.{f}, {null}))"
                ))
            }
            Condition::All(cs) => {
                let parts: Vec<String> = cs.iter().filter_map(|c| self.condition(c)).collect();
                joined(parts, " AND ")
            }
            Condition::Any(cs) => {
                // One that always holds makes the whole hold; found before any name or
                // value is placed, since DynamoDB refuses placeholders left unused.
                if cs.iter().any(always_holds) {
                    return None;
                }
                let parts: Vec<String> = cs.iter().filter_map(|c| self.condition(c)).collect();
                if parts.is_empty() {
                    // None given never holds, as `Condition::holds` says.
                    let k = self.name(PK);
                    return Some(format!(
                        "attribute_exists({k}) AND attribute_not_exists({k})"
                    ));
                }
                joined(parts, " OR ")
            }
        }
    }

    pub(super) fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    pub(super) fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// `parts` joined by `op`, each in parentheses where there are several: DynamoDB refuses
/// parentheses around a lone expression ("redundant parentheses"), which a one-part
/// `All` or `Any` inside another would otherwise make.
fn joined(parts: Vec<String>, op: &str) -> Option<String> {
    match parts.len() {
        0 => None,
        1 => parts.into_iter().next(),
        _ => Some(
            parts
                .iter()
                .map(|p| format!("({p})"))
                .collect::<Vec<_>>()
                .join(op),
        ),
    }
}

/// Whether `c` holds whatever the item (what [`Expr::condition`] writes as no expression).
fn always_holds(c: &Condition) -> bool {
    match c {
        Condition::None => true,
        Condition::All(cs) => cs.iter().all(always_holds),
        Condition::Any(cs) => cs.iter().any(always_holds),
        _ => false,
    }
}

pub(super) fn key_attrs(key: &ItemKey) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_string(), AttributeValue::S(key.pk.clone())),
        (SK.to_string(), AttributeValue::S(key.sk.clone())),
    ])
}

/// One port write as one transaction item.
pub(super) fn transact_item(table: &str, w: &Write) -> Result<TransactWriteItem, StoreError> {
    let mut x = Expr::default();
    let built = match w {
        Write::Put { item, condition } => {
            let body = item.body.as_object().ok_or_else(|| {
                StoreError::Invalid(format!("item {} body must be an object", item.key.pk))
            })?;
            let mut set = vec![
                format!(
                    "{} = {}",
                    x.name(BODY),
                    x.value(AttributeValue::M(attr::body_to_attr_map(body)))
                ),
                format!(
                    "{r} = if_not_exists({r}, {z}) + {o}",
                    r = x.name(REV),
                    z = x.num(0),
                    o = x.num(1)
                ),
            ];
            let mut remove = Vec::new();
            // DynamoDB's TTL reads a top-level number: copied from the body's `ttl_s`.
            match body.get(TTL_FIELD).and_then(|v| v.as_u64()) {
                Some(at) => set.push(format!("{} = {}", x.name(TTL), x.num(at))),
                None => remove.push(x.name(TTL)),
            }
            for (index, entry) in [
                (Index::ByParent, &item.by_parent),
                (Index::ByDue, &item.by_due),
            ] {
                let (_, h, r) = index_keys(index);
                match entry {
                    Some(k) => {
                        set.push(format!(
                            "{} = {}",
                            x.name(h),
                            x.value(AttributeValue::S(k.pk.clone()))
                        ));
                        set.push(format!(
                            "{} = {}",
                            x.name(r),
                            x.value(AttributeValue::S(k.sk.clone()))
                        ));
                    }
                    None => {
                        remove.push(x.name(h));
                        remove.push(x.name(r));
                    }
                }
            }
            let mut update = format!("SET {}", set.join(", "));
            if !remove.is_empty() {
                update += &format!(" REMOVE {}", remove.join(", "));
            }
            let cond = x.condition(condition);
            TransactWriteItem::builder().update(
                Update::builder()
                    .table_name(table)
                    .set_key(Some(key_attrs(&item.key)))
                    .update_expression(update)
                    .set_condition_expression(cond)
                    .set_expression_attribute_names(x.names())
                    .set_expression_attribute_values(x.values())
                    .build()
                    .map_err(|e| StoreError::Invalid(e.to_string()))?,
            )
        }
        Write::Delete { key, condition } => {
            let cond = x.condition(condition);
            TransactWriteItem::builder().delete(
                Delete::builder()
                    .table_name(table)
                    .set_key(Some(key_attrs(key)))
                    .set_condition_expression(cond)
                    .set_expression_attribute_names(x.names())
                    .set_expression_attribute_values(x.values())
                    .build()
                    .map_err(|e| StoreError::Invalid(e.to_string()))?,
            )
        }
        Write::Check { key, condition } => {
            let cond = x.condition(condition).unwrap_or_else(|| {
                let pk = x.name(PK);
                format!("attribute_exists({pk}) OR attribute_not_exists({pk})")
            });
            TransactWriteItem::builder().condition_check(
                ConditionCheck::builder()
                    .table_name(table)
                    .set_key(Some(key_attrs(key)))
                    .condition_expression(cond)
                    .set_expression_attribute_names(x.names())
                    .set_expression_attribute_values(x.values())
                    .build()
                    .map_err(|e| StoreError::Invalid(e.to_string()))?,
            )
        }
        Write::Add { key, deltas } => {
            let b = x.name(BODY);
            let mut set = Vec::new();
            for (field, delta) in deltas {
                let (f, z, d) = (x.name(field), x.num(0), x.num(delta));
                set.push(format!("{b}.{f} = if_not_exists({b}.{f}, {z}) + {d}"));
            }
            set.push(format!("{r} = {r} + {o}", r = x.name(REV), o = x.num(1)));
            let cond = format!("attribute_exists({})", x.name(PK));
            update_item(table, key, &mut x, set, cond)?
        }
        Write::Set {
            key,
            fields,
            condition,
        } => {
            let b = x.name(BODY);
            let mut set = Vec::new();
            for (field, value) in fields {
                let (f, v) = (x.name(field), x.value(attr::body_field(value)));
                set.push(format!("{b}.{f} = {v}"));
            }
            set.push(format!("{r} = {r} + {o}", r = x.name(REV), o = x.num(1)));
            let mut cond = format!("attribute_exists({})", x.name(PK));
            if let Some(c) = x.condition(condition) {
                cond = format!("{cond} AND ({c})");
            }
            update_item(table, key, &mut x, set, cond)?
        }
    };
    Ok(built.build())
}

fn update_item(
    table: &str,
    key: &ItemKey,
    x: &mut Expr,
    set: Vec<String>,
    cond: String,
) -> Result<aws_sdk_dynamodb::types::builders::TransactWriteItemBuilder, StoreError> {
    Ok(TransactWriteItem::builder().update(
        Update::builder()
            .table_name(table)
            .set_key(Some(key_attrs(key)))
            .update_expression(format!("SET {}", set.join(", ")))
            .condition_expression(cond)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .build()
            .map_err(|e| StoreError::Invalid(e.to_string()))?,
    ))
}
